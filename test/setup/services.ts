import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { TestProject } from "vitest/node";
import { startOrigin } from "../../scripts/demo-origin.ts";
import { buildWorker } from "../../scripts/lib/build-worker.ts";
import { startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import { startRedis } from "../../scripts/lib/redis-server.ts";
import { startShim } from "../../scripts/shim/server.ts";

export interface Services {
  redisUrl: string;
  shimUrl: string;
  shimToken: string;
  originUrl: string;
  /** a second shim on the same Redis, for the one test file that counts requests at the shim */
  countingShimUrl: string;
  /** a shim in front of a Redis of its own, which tests may stop and start */
  faultShimUrl: string;
  /** the shared shim behind a proxy that answers every call slowShimMs late, so a test can
   * assert measured Redis latency against a known floor (workerd's clock only moves on I/O) */
  slowShimUrl: string;
  slowShimMs: number;
  /** the same, verySlowShimMs late: long enough that two calls in a row overrun a budget one call stays within */
  verySlowShimUrl: string;
  verySlowShimMs: number;
  /** POST /redis/stop and /redis/start act on the fault Redis (Worker tests cannot run processes) */
  controlUrl: string;
  /** the Worker as `npm run build` bundles it, for Miniflare instances run from Node */
  workerDir: string;
}

declare module "vitest" {
  export interface ProvidedContext {
    services: Services;
  }
}

/**
 * Global setup of each test project: redis-servers of its own on free ports, shims in front
 * of them, a demo origin and a control endpoint. All stopped when the run ends.
 */
export default async function setup(project: TestProject) {
  const stops: (() => Promise<void>)[] = [];
  const keep = <T extends { close?: () => Promise<void>; stop?: () => Promise<void> }>(thing: T): T => {
    stops.unshift(async () => void (await (thing.close ?? thing.stop)!.call(thing)));
    return thing;
  };
  const teardown = async () => {
    for (const stop of stops) await stop().catch(() => {});
  };
  try {
    const shimToken = randomBytes(16).toString("hex");
    const quiet = { token: shimToken, log: () => {} };
    const redis = keep(await startRedis());
    const shim = keep(await startShim({ ...quiet, redisUrl: redis.url }));
    const countingShim = keep(await startShim({ ...quiet, redisUrl: redis.url }));
    const slowShimMs = 40;
    const slowShim = keep(await startFaultProxy(shim.url));
    slowShim.set({ kind: "slow", ms: slowShimMs });
    const verySlowShimMs = 1500;
    const verySlowShim = keep(await startFaultProxy(shim.url));
    verySlowShim.set({ kind: "slow", ms: verySlowShimMs });
    const faultRedis = keep(await startRedis());
    const faultShim = keep(await startShim({ ...quiet, redisUrl: faultRedis.url }));
    const origin = keep(await startOrigin());
    const workerDir = buildWorker();
    keep({ close: async () => rmSync(workerDir, { recursive: true, force: true }) });
    const control = createServer((req, res) => {
      const action = req.method === "POST" ? { "/redis/stop": faultRedis.stop, "/redis/start": faultRedis.start }[req.url ?? ""] : undefined;
      if (!action) return res.writeHead(404).end();
      action().then(
        () => res.writeHead(204).end(),
        (e: Error) => res.writeHead(500).end(e.message),
      );
    });
    await new Promise<void>((resolve) => control.listen(0, "127.0.0.1", resolve));
    keep({
      close: () =>
        new Promise<void>((resolve) => {
          control.closeAllConnections();
          control.close(() => resolve());
        }),
    });

    project.provide("services", {
      redisUrl: redis.url,
      shimUrl: shim.url,
      shimToken,
      originUrl: origin.url,
      countingShimUrl: countingShim.url,
      faultShimUrl: faultShim.url,
      slowShimUrl: slowShim.url,
      slowShimMs,
      verySlowShimUrl: verySlowShim.url,
      verySlowShimMs,
      controlUrl: `http://127.0.0.1:${(control.address() as AddressInfo).port}`,
      workerDir,
    });
  } catch (e) {
    await teardown();
    throw e;
  }
  return teardown;
}
