import Redis from "ioredis";
import { afterAll, beforeAll } from "vitest";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { rewriteShebang } from "../../scripts/shim/lua-flags.ts";
import { SLIDING_WINDOW_SCRIPT } from "../../src/script/sliding-window.ts";

/** The script as it ships, with the flag rewrite the shim applies for stock Redis. */
export const SHIPPED_SCRIPT = rewriteShebang(SLIDING_WINDOW_SCRIPT) ?? SLIDING_WINDOW_SCRIPT;

/**
 * A redis-server of the test file's own (so INFO commandstats counts only its work) with the
 * shipped script loaded; `ready` gets the client and the script's SHA1 before the file's tests.
 *
 * @example
 * let redis: Redis;
 * let sha: string;
 * scriptRedis((r, s) => ([redis, sha] = [r, s]));
 */
export function scriptRedis(ready: (redis: Redis, sha: string) => void): void {
  let server: LocalRedis | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    server = await startRedis();
    redis = new Redis(server.url);
    ready(redis, (await redis.script("LOAD", SHIPPED_SCRIPT)) as string);
  });
  afterAll(async () => {
    redis?.disconnect();
    await server?.stop();
  });
}
