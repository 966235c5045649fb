import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";
import { startOrigin } from "../../scripts/demo-origin.ts";
import { startRedis } from "../../scripts/lib/redis-server.ts";
import { startShim } from "../../scripts/shim/server.ts";

export interface Services {
  redisUrl: string;
  shimUrl: string;
  shimToken: string;
  originUrl: string;
  /** POST /redis/stop and /redis/start: for Worker tests, which cannot run processes */
  controlUrl: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    services: Services;
  }
}

/**
 * Global setup of each test project: a redis-server of its own on a free port, the shim in
 * front of it, a demo origin, and a small control endpoint. Stopped when the run ends.
 */
export default async function setup(project: TestProject) {
  const redis = await startRedis();
  const shimToken = randomBytes(16).toString("hex");
  const shim = await startShim({ token: shimToken, redisUrl: redis.url, log: () => {} });
  const origin = await startOrigin();
  const control = createServer((req, res) => {
    const action = req.method === "POST" ? { "/redis/stop": redis.stop, "/redis/start": redis.start }[req.url ?? ""] : undefined;
    if (!action) return res.writeHead(404).end();
    action().then(() => res.writeHead(204).end(), (e: Error) => res.writeHead(500).end(e.message));
  });
  await new Promise<void>((resolve) => control.listen(0, "127.0.0.1", resolve));

  project.provide("services", {
    redisUrl: redis.url,
    shimUrl: shim.url,
    shimToken,
    originUrl: origin.url,
    controlUrl: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
  });

  return async () => {
    control.closeAllConnections();
    control.close();
    await origin.close();
    await shim.close();
    await redis.stop();
  };
}
