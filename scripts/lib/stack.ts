import { randomBytes } from "node:crypto";
import { startOrigin, type RunningOrigin } from "../demo-origin.ts";
import { startShim, type RunningShim } from "../shim/server.ts";
import { startRedis, type LocalRedis } from "./redis-server.ts";

export interface LocalStack {
  redis: LocalRedis;
  shim: RunningShim;
  token: string;
  origin: RunningOrigin;
  /** the Worker bindings that point a gate at this stack */
  bindings: { ORIGIN_URL: string; UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
  close(): Promise<void>;
}

/**
 * A redis-server of its own, the shim in front of it, and the demo origin: everything a gate
 * needs on this machine, for scripts (benchmarks, trials) that must not touch anyone's data.
 */
export async function startLocalStack(): Promise<LocalStack> {
  const token = randomBytes(16).toString("hex");
  const redis = await startRedis();
  const shim = await startShim({ token, redisUrl: redis.url, log: () => {} }).catch(async (e) => {
    await redis.stop();
    throw e;
  });
  const origin = await startOrigin();
  return {
    redis, shim, token, origin,
    bindings: { ORIGIN_URL: origin.url, UPSTASH_REDIS_REST_URL: shim.url, UPSTASH_REDIS_REST_TOKEN: token },
    async close() {
      await origin.close();
      await shim.close();
      await redis.stop();
    },
  };
}
