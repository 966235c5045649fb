import { afterEach, describe, expect, it, vi } from "vitest";
import { hasRedisServer, type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";

// The collision another run causes: a port found free here that its redis-server binds first.
// The next port handed out is made to be one a server already holds.
const collide = vi.hoisted(() => ({ port: undefined as number | undefined }));
vi.mock("../../scripts/lib/ports.ts", async (importOriginal) => {
  const ports = await importOriginal<typeof import("../../scripts/lib/ports.ts")>();
  return {
    ...ports,
    freePort: async () => {
      const taken = collide.port;
      collide.port = undefined;
      return taken ?? ports.freePort();
    },
  };
});

// Tests and the dev stack flush the Redis they start: a server another run bound on the same
// port first must never be handed out as theirs.
describe.skipIf(!hasRedisServer())("startRedis, when another server holds the port", () => {
  const started: LocalRedis[] = [];
  afterEach(async () => {
    for (const redis of started.splice(0)) await redis.stop();
  });

  it("refuses a port the caller named, saying another process answers there", async () => {
    const other = await startRedis();
    started.push(other);
    await expect(startRedis({ port: other.port })).rejects.toThrow(
      new RegExp(`(another process .* answers on 127\\.0\\.0\\.1:${other.port}|port ${other.port} exited at start-up[^]*Address already in use)`),
    );
  });

  it("picks another port and starts a server of its own when the port it picked was taken", async () => {
    const other = await startRedis();
    started.push(other);
    collide.port = other.port;
    const mine = await startRedis();
    started.push(mine);
    expect(mine.port).not.toBe(other.port);
    expect(mine.pid).not.toBe(other.pid);
    expect(collide.port).toBeUndefined(); // the taken port was handed out, and passed over
  });
});
