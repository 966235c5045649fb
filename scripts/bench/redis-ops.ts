import Redis from "ioredis";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { ratio, round } from "./stats.ts";

const script = readFileSync("src/sliding-window.lua", "utf8");
// @upstash/ratelimit ships its scripts inside its bundle; this is its single-region slidingWindow limit script.
const peerScript = /var slidingWindowLimitScript = `([\s\S]*?)`;/.exec(
  readFileSync(createRequire(import.meta.url).resolve("@upstash/ratelimit").replace(/index\.js$/, "index.mjs"), "utf8"),
)![1]!;
// Stock Redis refuses Upstash's allow-key-locking flag; the shim strips it the same way.
const forRedis = (lua: string) => lua.replace(/^#!lua flags=allow-key-locking/, "#!lua");

type Command = [string, ...(string | number)[]];

/**
 * Commands per second Redis completes when `connections` clients each keep a pipeline of
 * `depth` commands in flight: the script's cost inside Redis, where a round trip no longer hides it.
 */
async function opsPerSecond(url: string, next: () => Command, ms: number, connections = 8, depth = 16): Promise<number> {
  const clients = Array.from({ length: connections }, () => new Redis(url, { protocol: 2 }));
  let done = 0;
  const deadline = performance.now() + ms;
  const started = performance.now();
  await Promise.all(clients.map(async (c) => {
    while (performance.now() < deadline) {
      const p = c.pipeline();
      for (let i = 0; i < depth; i++) {
        const [name, ...args] = next();
        p.call(name, ...args);
      }
      const results = (await p.exec()) ?? [];
      for (const [error] of results) if (error) throw error;
      done += depth;
    }
  }));
  const elapsed = performance.now() - started;
  clients.forEach((c) => c.disconnect());
  return Math.round((done / elapsed) * 1000);
}

/**
 * Our script, driven through the edge-clock argument so the window stays at exactly `entries`:
 * every call moves "now" on by window/entries, so each evicts one entry and records one.
 */
function ourDecisions(sha: string, entries: number, rules: number, tag: string) {
  const windowMs = 60_000;
  const step = (windowMs * 1000) / entries;
  const t0 = 1_700_000_000_000_000;
  let n = 0;
  // the layout of src/limiter.ts: the identity's block key, then a log and a weight key per rule
  const keys = [`bench:{${tag}}:block`, ...Array.from({ length: rules }, (_, r) => [`bench:{${tag}}:t:r${r}`, `bench:{${tag}}:t:r${r}:w`]).flat()];
  const ruleArgs = Array.from({ length: rules }, () => [entries + 1000, windowMs, 1, 0]).flat();
  return (): Command => {
    const id = (n++).toString(36).padStart(8, "0");
    return ["EVALSHA", sha, keys.length, ...keys, Math.round(t0 + n * step), id, ...ruleArgs];
  };
}

export interface ScriptCost {
  label: string;
  entries: number | null;
  rules: number;
  opsPerSec: number;
  vsSet: number;
}

export async function measureScriptCost(url: string, ms: number, progress: (s: string) => void) {
  const redis = new Redis(url, { protocol: 2 });
  const sha = (await redis.script("LOAD", forRedis(script))) as string;
  const peerSha = (await redis.script("LOAD", forRedis(peerScript))) as string;

  const prefill = async (entries: number, rules: number, tag: string) => {
    const next = ourDecisions(sha, entries, rules, tag);
    for (let i = 0; i < entries; i += 500) {
      const p = redis.pipeline();
      for (let j = i; j < Math.min(entries, i + 500); j++) p.call(...next());
      await p.exec();
    }
    return next;
  };

  progress("SET");
  let k = 0;
  const setOps = await opsPerSecond(url, () => ["SET", `bench:set:${k++ % 1000}`, "x"], ms);
  const rows: ScriptCost[] = [{ label: "SET", entries: null, rules: 1, opsPerSec: setOps, vsSet: 1 }];

  progress("@upstash/ratelimit slidingWindow script");
  const peerOps = await opsPerSecond(url, () => {
    const now = Date.now();
    const bucket = Math.floor(now / 60_000);
    return ["EVALSHA", peerSha, 2, `bench:peer:${bucket}`, `bench:peer:${bucket - 1}`, 1e9, now, 60_000, 1];
  }, ms);
  rows.push({ label: "@upstash/ratelimit slidingWindow", entries: null, rules: 1, opsPerSec: peerOps, vsSet: ratio(peerOps, setOps) });

  for (const entries of [10, 1000, 10_000]) {
    progress(`slidegate script, ${entries} entries in the window`);
    const next = await prefill(entries, 1, `e${entries}`);
    const ops = await opsPerSecond(url, next, ms);
    rows.push({ label: `slidegate, ${entries} in window`, entries, rules: 1, opsPerSec: ops, vsSet: ratio(ops, setOps) });
  }
  for (const rules of [2, 4]) {
    progress(`slidegate script, ${rules} rules`);
    const next = await prefill(10, rules, `r${rules}`);
    const ops = await opsPerSecond(url, next, ms);
    rows.push({ label: `slidegate, ${rules} rules`, entries: 10, rules, opsPerSec: ops, vsSet: ratio(ops, setOps) });
  }
  redis.disconnect();
  return rows;
}

export interface MemoryRow {
  entries: number;
  slidegateBytesPerEntry: number;
  seedBytesPerEntry: number;
  ratio: number;
}

/** MEMORY USAGE per in-window request: our members vs the seeds' "<ms>-<uuid>" members. */
export async function measureMemory(url: string, sizes: number[]): Promise<MemoryRow[]> {
  const redis = new Redis(url, { protocol: 2 });
  const sha = (await redis.script("LOAD", forRedis(script))) as string;
  const rows: MemoryRow[] = [];
  for (const entries of sizes) {
    const tag = `mem${entries}`;
    const next = ourDecisions(sha, entries, 1, tag);
    const seedKey = `bench:seed:${entries}`;
    for (let i = 0; i < entries; i += 500) {
      const p = redis.pipeline();
      for (let j = i; j < Math.min(entries, i + 500); j++) {
        p.call(...next());
        const ms = 1_700_000_000_000 + j;
        p.zadd(seedKey, ms, `${ms}-${crypto.randomUUID()}`);
      }
      await p.exec();
    }
    const ours = Number(await redis.call("MEMORY", "USAGE", `bench:{${tag}}:t:r0`, "SAMPLES", "0"));
    const seed = Number(await redis.call("MEMORY", "USAGE", seedKey, "SAMPLES", "0"));
    rows.push({ entries, slidegateBytesPerEntry: round(ours / entries, 1), seedBytesPerEntry: round(seed / entries, 1), ratio: ratio(ours, seed) });
  }
  redis.disconnect();
  return rows;
}
