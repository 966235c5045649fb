import autocannon from "autocannon";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import type { Miniflare } from "miniflare";
import { buildWorker } from "../lib/build-worker.ts";
import { freshRateLimits, startIsolate } from "../lib/fleet.ts";
import type { LocalStack } from "../lib/stack.ts";
import { ratio, round } from "./stats.ts";

export interface LoadResult {
  target: string;
  load: "admitted" | "denied" | "origin";
  p50: number;
  p99: number;
  rps: number;
  statuses: Record<string, number>;
}

async function load(target: string, kind: LoadResult["load"], url: string, seconds: number): Promise<LoadResult> {
  const result = await autocannon({ url, connections: 10, duration: seconds, headers: { "cf-connecting-ip": "198.51.100.200" } });
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([code, s]) => [code, (s as { count: number }).count]));
  return { target, load: kind, p50: result.latency.p50, p99: result.latency.p99, rps: round(result.requests.average, 0), statuses };
}

/** Total gzip size of a built Worker's modules. */
function gzipBytes(dir: string): number {
  return readdirSync(dir).filter((f) => /\.(js|mjs|lua)$/.test(f)).reduce((sum, f) => sum + gzipSync(readFileSync(join(dir, f)), { level: 9 }).length, 0);
}

async function shimRequests(stack: LocalStack): Promise<number> {
  const res = await fetch(`${stack.shim.url}/__shim/stats`, { headers: { authorization: `Bearer ${stack.token}` } });
  return ((await res.json()) as { result: { requests: number } }).result.requests;
}

/**
 * The three targets under a real HTTP load generator: the origin alone, slidegate in front
 * of it, and @upstash/ratelimit's slidingWindow in a Worker in front of it — both gates in
 * workerd, on the same shim and Redis. Then round trips per decision and bundle sizes.
 */
export async function measureGateway(stack: LocalStack, seconds: number, progress: (s: string) => void) {
  progress("building slidegate and the peer Worker");
  const ours = buildWorker();
  const peer = buildWorker({ entry: "scripts/bench/peer-worker.ts", name: "peer" });
  const started: Miniflare[] = [];
  const isolate = async (dir: string, bindings: Record<string, string>) => {
    const mf = await startIsolate(dir, { ...stack.bindings, ...bindings });
    started.push(mf);
    return (await mf.ready).href.replace(/\/$/, "");
  };
  try {
    const gates = {
      slidegate: (limit: number) => isolate(ours, { RATE_LIMITS: freshRateLimits({ rules: [{ name: "bench", limit, window: "1h" }] }) }),
      "@upstash/ratelimit": (limit: number) => isolate(peer, { LIMIT: String(limit), PREFIX: `bench${crypto.randomUUID().slice(0, 8)}` }),
    };
    const results: LoadResult[] = [];
    progress("origin alone");
    results.push(await load("origin", "origin", `${stack.origin.url}/v1/echo`, seconds));
    for (const [name, start] of Object.entries(gates)) {
      progress(`${name}, admitted load`);
      results.push(await load(name, "admitted", `${await start(1e6)}/v1/echo`, seconds));
      progress(`${name}, denied load`);
      const denied = await start(1);
      await fetch(`${denied}/v1/echo`, { headers: { "cf-connecting-ip": "198.51.100.200" } }).then((r) => r.arrayBuffer());
      results.push(await load(name, "denied", `${denied}/v1/echo`, seconds));
    }
    const origin = results[0]!;
    const added = (r: LoadResult) => ({ p50: round(r.p50 - origin.p50, 3), p99: round(r.p99 - origin.p99, 3) });
    const find = (target: string, kind: string) => results.find((r) => r.target === target && r.load === kind)!;
    const addedLatency = Object.fromEntries(["slidegate", "@upstash/ratelimit"].map((t) => [t, { admitted: added(find(t, "admitted")), denied: added(find(t, "denied")) }]));
    const vsPeer = (kind: string, p: "p50" | "p99") => {
      const peerAdded = find("@upstash/ratelimit", kind)[p] - origin[p];
      return peerAdded > 0 ? ratio(find("slidegate", kind)[p] - origin[p], peerAdded) : null;
    };

    progress("round trips per decision, counted at the shim");
    const counted = await gates.slidegate(20);
    let before = await shimRequests(stack);
    for (let i = 0; i < 20; i++) await fetch(`${counted}/`, { headers: { "cf-connecting-ip": "198.51.100.201" } }).then((r) => r.arrayBuffer());
    const admittedTrips = (await shimRequests(stack)) - before;
    await fetch(`${counted}/`, { headers: { "cf-connecting-ip": "198.51.100.201" } }).then((r) => r.arrayBuffer()); // the denial that fills the block cache
    before = await shimRequests(stack);
    for (let i = 0; i < 20; i++) await fetch(`${counted}/`, { headers: { "cf-connecting-ip": "198.51.100.201" } }).then((r) => r.arrayBuffer());
    const blockedTrips = (await shimRequests(stack)) - before;

    return {
      load: results,
      addedLatency,
      slidegateVsPeerAdded: { admittedP50: vsPeer("admitted", "p50"), admittedP99: vsPeer("admitted", "p99"), deniedP50: vsPeer("denied", "p50"), deniedP99: vsPeer("denied", "p99") },
      roundTrips: { perAdmittedDecision: admittedTrips / 20, perBlockedDecision: blockedTrips / 20 },
      bundleGzipBytes: { slidegate: gzipBytes(ours), "@upstash/ratelimit": gzipBytes(peer), ratio: ratio(gzipBytes(ours), gzipBytes(peer)) },
    };
  } finally {
    await Promise.all(started.map((mf) => mf.dispose()));
  }
}
