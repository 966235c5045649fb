import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { type RunningOrigin, startOrigin } from "../demo-origin.ts";
import { type RunningShim, startShim } from "../shim/server.ts";
import { freePort } from "./ports.ts";
import { type LocalRedis, startRedis } from "./redis-server.ts";

export interface LocalStack {
  redis: LocalRedis;
  shim: Pick<RunningShim, "url" | "close">;
  token: string;
  origin: RunningOrigin;
  /** the Worker bindings that point a gate at this stack */
  bindings: { ORIGIN_URL: string; UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
  close(): Promise<void>;
}

/** `npm run shim` as a child process, for measurements where it must not share a CPU with the caller. */
async function spawnShim(token: string, redisUrl: string): Promise<Pick<RunningShim, "url" | "close">> {
  const port = await freePort();
  const child = spawn(process.execPath, ["scripts/shim/main.ts"], {
    env: { ...process.env, SHIM_TOKEN: token, REDIS_URL: redisUrl, SHIM_PORT: String(port) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (c: Buffer) => c.toString().includes("listening on") && resolve());
    child.once("exit", (code) => reject(new Error(`shim exited (code ${code})`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  };
}

/**
 * A redis-server of its own, the shim in front of it, and the demo origin: everything a gate
 * needs on this machine, for scripts (benchmarks, trials) that must not touch anyone's data.
 * `shimProcess`: run the shim in a process of its own instead of this one.
 */
export async function startLocalStack(options: { shimProcess?: boolean } = {}): Promise<LocalStack> {
  const token = randomBytes(16).toString("hex");
  const redis = await startRedis();
  const shim = await (options.shimProcess ? spawnShim(token, redis.url) : startShim({ token, redisUrl: redis.url, log: () => {} })).catch(async (e) => {
    await redis.stop();
    throw e;
  });
  const origin = await startOrigin();
  return {
    redis,
    shim,
    token,
    origin,
    bindings: { ORIGIN_URL: origin.url, UPSTASH_REDIS_REST_URL: shim.url, UPSTASH_REDIS_REST_TOKEN: token },
    async close() {
      await origin.close();
      await shim.close();
      await redis.stop();
    },
  };
}
