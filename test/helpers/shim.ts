import { type ChildProcess, spawn } from "node:child_process";
import { Redis } from "@upstash/redis";
import IORedis from "ioredis";
import { inject } from "vitest";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { type RunningShim, type ShimOptions, startShim } from "../../scripts/shim/server.ts";

/** The project's shim, Redis and origin (started by test/setup/services.ts). */
export const services = () => inject("services");

/** The official client, pointed at the shim, as an application would build it. */
export function upstash(options: { responseEncoding?: false; url?: string; token?: string } = {}) {
  const s = services();
  return new Redis({ url: options.url ?? s.shimUrl, token: options.token ?? s.shimToken, responseEncoding: options.responseEncoding, enableTelemetry: false });
}

/** A raw HTTP call to the shim, for what the client never sends. */
export async function raw(path: string, body: string | undefined, headers: Record<string, string> = {}, method = "POST") {
  const s = services();
  const res = await fetch(s.shimUrl + path, {
    method,
    body,
    headers: { authorization: `Bearer ${s.shimToken}`, "content-type": "application/json", ...headers },
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: JSON.parse(text) as Record<string, unknown> | unknown[] };
}

/** A key unique to this test run, so parallel files never share data. */
export const key = (name: string) => `test:${name}:${crypto.randomUUID()}`;

export interface ShimStats {
  requests: number;
  commands: number;
  streams: number;
  transactions: { active: number; waiting: number };
}

/** A shim's own counters (GET /__shim/stats). */
export async function shimStats(url: string, token: string): Promise<ShimStats> {
  const res = await fetch(`${url}/__shim/stats`, { headers: { authorization: `Bearer ${token}` } });
  return ((await res.json()) as { result: ShimStats }).result;
}

export interface OwnShim {
  redis: LocalRedis;
  shim: RunningShim;
  token: string;
  /** a direct connection to the Redis, for what a test must see or do behind the shim */
  admin: IORedis;
  /** the official client, pointed at this shim */
  client(options?: { responseEncoding?: false; token?: string }): Redis;
  stats(): Promise<ShimStats>;
  close(): Promise<void>;
}

/**
 * A redis-server and a shim of the calling test file's own, for tests that pause, flush, count
 * or fill them without disturbing any other file.
 */
export async function startOwnShim(options: Omit<ShimOptions, "token" | "redisUrl" | "clusterNodes"> = {}): Promise<OwnShim> {
  const token = crypto.randomUUID();
  const redis = await startRedis();
  const shim = await startShim({ log: () => {}, ...options, token, redisUrl: redis.url });
  const admin = new IORedis(redis.url, { protocol: 2 });
  return {
    redis,
    shim,
    token,
    admin,
    client: (o = {}) => new Redis({ url: shim.url, token: o.token ?? token, responseEncoding: o.responseEncoding, enableTelemetry: false }),
    stats: () => shimStats(shim.url, token),
    async close() {
      admin.disconnect();
      await shim.close();
      await redis.stop();
    },
  };
}

export interface ShimProcess {
  url: string;
  token: string;
  child: ChildProcess;
  /** what it has written to stderr so far */
  stderr(): string;
  /** whether the process is still running */
  alive(): boolean;
  stop(): Promise<void>;
}

/**
 * `node <nodeArgs> scripts/shim/main.ts`, as an operator runs it, in front of the shared Redis
 * unless `env` says otherwise, once it says it listens: for what only a process of its own can
 * show (its environment, its memory, its dying).
 */
export async function startShimProcess(env: Record<string, string> = {}, nodeArgs: string[] = []): Promise<ShimProcess> {
  const token = crypto.randomUUID();
  const child = spawn(process.execPath, [...nodeArgs, "scripts/shim/main.ts"], {
    env: { ...process.env, SHIM_TOKEN: token, SHIM_PREVIOUS_TOKEN: "", REDIS_URL: services().redisUrl, SHIM_PORT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  const alive = () => child.exitCode === null && child.signalCode === null;
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const listening = / listening on (\S+)/.exec(out);
      if (listening) resolve(listening[1]!);
    });
    child.once("exit", (code) => reject(new Error(`the shim exited (${code}) before it listened: ${stderr}`)));
  });
  return {
    url,
    token,
    child,
    stderr: () => stderr,
    alive,
    async stop() {
      if (!alive()) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
