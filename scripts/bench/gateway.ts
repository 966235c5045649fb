import { readdirSync, readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import type { Miniflare } from "miniflare";
import { buildWorker } from "../lib/build-worker.ts";
import { freshRateLimits, startIsolate } from "../lib/fleet.ts";
import type { LocalStack } from "../lib/stack.ts";
import { type LoadRun, pool, type Slice, startLoadClient } from "./load-client.ts";
import { ratio, round } from "./stats.ts";

export interface GatewayOptions {
  /** interleaved rounds; every target runs once in each */
  rounds: number;
  /** timed requests per target per round */
  requests: number;
  /** each round's requests to a target go in this many slices, the targets taking turns slice by slice */
  slices: number;
  /** concurrent callers, one keep-alive connection and one request in flight each */
  clients: number;
  /** untimed requests per target before the first round */
  warmup: number;
}

export const GATEWAY_FULL: GatewayOptions = { rounds: 7, requests: 1500, slices: 5, clients: 16, warmup: 500 };
export const GATEWAY_QUICK: GatewayOptions = { rounds: 1, requests: 160, slices: 1, clients: 16, warmup: 32 };

type Load = "admitted" | "denied";
export const TARGETS = {
  passThrough: "pass-through",
  slidegate: "slidegate",
  peer: "@upstash/ratelimit",
  oneCallFloor: "one-call floor",
  denyFloor: "constant-429 floor",
} as const;
type TargetName = (typeof TARGETS)[keyof typeof TARGETS];

/** A figure over the rounds: the median, and the lowest and highest round. */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

function spread(values: number[], digits = 3): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { median: round(median, digits), min: round(sorted[0]!, digits), max: round(sorted.at(-1)!, digits) };
}

export interface TargetResult {
  rps: Spread;
  p50: Spread;
  p99: Spread;
  /** responses by status over all timed rounds */
  statuses: Record<string, number>;
  /** lines the Worker logged per request it was sent (warm-up included) */
  logLinesPerRequest: number;
  rounds: LoadRun[];
}

/** A ratio taken within each round (both sides measured in the same round), over the rounds. */
export interface RatioResult extends Spread {
  what: string;
  target?: { op: ">=" | "<="; value: number };
  /** the median against the target */
  met?: boolean;
  /** how far the median is on the good side of the target, in %; negative: missed by that much */
  marginPct?: number;
}

const IP = "198.51.100.200";
const PATH = "/v1/echo";

/** Total gzip size of a built Worker's modules. */
function gzipBytes(dir: string): number {
  return readdirSync(dir)
    .filter((f) => /\.(js|mjs|lua)$/.test(f))
    .reduce((sum, f) => sum + gzipSync(readFileSync(join(dir, f)), { level: 9 }).length, 0);
}

async function shimRequests(stack: LocalStack): Promise<number> {
  const res = await fetch(`${stack.shim.url}/__shim/stats`, { headers: { authorization: `Bearer ${stack.token}` } });
  return ((await res.json()) as { result: { requests: number } }).result.requests;
}

const call = (url: string, ip = IP) => fetch(url, { headers: { "cf-connecting-ip": ip } }).then((r) => r.arrayBuffer());

/**
 * Section d: five Workers in workerd on the same shim, Redis and origin, under the bench's own
 * load client — a pass-through (the baseline), slidegate, a Worker with @upstash/ratelimit's
 * slidingWindow, and two floors no gate can beat on this stack: a constant 429 (denied) and one
 * trivial REST call before the same proxying (admitted). Each round interleaves the targets
 * slice by slice, in a rotated order, so a slow spell of a shared machine falls on all of them
 * alike, and every ratio is taken within a round. Then e, round trips per decision, and f,
 * bundle sizes.
 */
export async function measureGateway(stack: LocalStack, options: GatewayOptions, progress: (s: string) => void) {
  progress("building slidegate, the peer and the floor Workers");
  const built = {
    slidegate: buildWorker(),
    peer: buildWorker({ entry: "scripts/bench/peer-worker.ts", name: "peer" }),
    passThrough: buildWorker({ entry: "scripts/bench/pass-through-worker.ts", name: "pass-through" }),
    denyFloor: buildWorker({ entry: "scripts/bench/deny-floor-worker.ts", name: "deny-floor" }),
    oneCallFloor: buildWorker({ entry: "scripts/bench/one-call-worker.ts", name: "one-call-floor" }),
  };
  const started: Miniflare[] = [];
  const client = startLoadClient();
  const isolate = async (dir: string, bindings: Record<string, string> = {}) => {
    // lines the Worker logs, and requests sent to it (untimed ones included)
    const counts = { lines: 0, sent: 0 };
    const mf = await startIsolate(dir, { ...stack.bindings, ...bindings }, () => counts.lines++);
    started.push(mf);
    return { url: (await mf.ready).href.replace(/\/$/, "") + PATH, counts };
  };
  const slidegate = (limit: number) => isolate(built.slidegate, { RATE_LIMITS: freshRateLimits({ rules: [{ name: "bench", limit, window: "1h" }] }) });
  const peer = (limit: number) => isolate(built.peer, { LIMIT: String(limit), PREFIX: `bench${crypto.randomUUID().slice(0, 8)}` });
  try {
    progress("starting 7 isolates");
    const targets: { name: TargetName; load: Load; url: string; counts: { lines: number; sent: number } }[] = [
      { name: TARGETS.passThrough, load: "admitted", ...(await isolate(built.passThrough)) },
      { name: TARGETS.slidegate, load: "admitted", ...(await slidegate(1e6)) },
      { name: TARGETS.peer, load: "admitted", ...(await peer(1e6)) },
      { name: TARGETS.oneCallFloor, load: "admitted", ...(await isolate(built.oneCallFloor)) },
      { name: TARGETS.slidegate, load: "denied", ...(await slidegate(1)) },
      { name: TARGETS.peer, load: "denied", ...(await peer(1)) },
      { name: TARGETS.denyFloor, load: "denied", ...(await isolate(built.denyFloor)) },
    ];
    // The denied identity spends its limit of 1 here; the warm-up's first request is its first
    // denial, which fills the gates' isolate caches, so every timed denial is answered from there.
    for (const t of targets) {
      if (t.load !== "denied" || t.name === TARGETS.denyFloor) continue;
      await call(t.url);
      t.counts.sent++;
    }
    const { clients, requests } = options;
    const drive = (t: (typeof targets)[number], n: number) => {
      t.counts.sent += n + clients; // and one untimed request per client to open its connection
      return client.run(t.url, { headers: { "cf-connecting-ip": IP }, clients, requests: n, warmupPerClient: 1 });
    };

    // the machine's 1-minute load average around the rounds: how much else shared the cores
    const loadBefore = round(loadavg()[0]!, 2);
    progress(`warm-up, ${options.warmup} requests per target`);
    for (const t of targets) await drive(t, options.warmup);

    const runs = targets.map(() => [] as LoadRun[]);
    const perSlice = Math.ceil(requests / options.slices);
    for (let r = 0; r < options.rounds; r++) {
      progress(`round ${r + 1} of ${options.rounds}: ${targets.length} targets × ${requests} requests in ${options.slices} slices, ${clients} clients`);
      const slices = targets.map(() => [] as Slice[]);
      for (let s = 0; s < options.slices; s++) {
        for (let k = 0; k < targets.length; k++) {
          const i = (k + r + s) % targets.length; // each slice starts one target later
          const t = targets[i]!;
          const slice = await drive(t, Math.min(perSlice, requests - s * perSlice));
          const expected = t.load === "admitted" ? "200" : "429";
          if ((slice.statuses[expected] ?? 0) < slice.samples.length / 2)
            throw new Error(`${t.name} under ${t.load} load answered ${JSON.stringify(slice.statuses)}, not ${expected}s: the bench is not measuring what it says`);
          slices[i]!.push(slice);
        }
      }
      for (const [i, parts] of slices.entries()) runs[i]!.push(pool(parts));
    }

    const loadAfter = round(loadavg()[0]!, 2);

    const at = (name: TargetName, load: Load) => runs[targets.findIndex((t) => t.name === name && t.load === load)]!;
    const summarise = (load: Load) =>
      Object.fromEntries(
        targets.flatMap((t, i) => {
          if (t.load !== load) return [];
          const statuses: Record<string, number> = {};
          for (const run of runs[i]!) for (const [s, n] of Object.entries(run.statuses)) statuses[s] = (statuses[s] ?? 0) + n;
          const result: TargetResult = {
            rps: spread(
              runs[i]!.map((x) => x.rps),
              0,
            ),
            p50: spread(runs[i]!.map((x) => x.p50)),
            p99: spread(runs[i]!.map((x) => x.p99)),
            statuses,
            // counted at the end: workerd's output reaches this process a moment after the answers
            logLinesPerRequest: round(t.counts.lines / t.counts.sent, 3),
            rounds: runs[i]!,
          };
          return [[t.name, result]];
        }),
      ) as Record<TargetName, TargetResult>;

    // Paired by round: each figure against its baseline from the same round.
    const perRound = (f: (r: number) => number) => spread(Array.from({ length: options.rounds }, (_, r) => f(r)));
    const pass = at(TARGETS.passThrough, "admitted");
    const added = (name: TargetName, p: "p50" | "p99") => (r: number) => at(name, "admitted")[r]![p] - pass[r]![p];
    const addedOverPassThrough = Object.fromEntries(
      [TARGETS.slidegate, TARGETS.peer, TARGETS.oneCallFloor].map((name) => [name, { p50: perRound(added(name, "p50")), p99: perRound(added(name, "p99")) }]),
    );
    const judged = (what: string, f: (r: number) => number, target?: RatioResult["target"]): RatioResult => {
      const s = perRound(f);
      if (!target) return { what, ...s };
      const met = target.op === ">=" ? s.median >= target.value : s.median <= target.value;
      const marginPct = round((target.op === ">=" ? s.median / target.value - 1 : 1 - s.median / target.value) * 100, 1);
      return { what, ...s, target, met, marginPct };
    };
    const of = (name: TargetName, load: Load, p: keyof LoadRun) => (r: number) => at(name, load)[r]![p] as number;
    const div = (a: (r: number) => number, b: (r: number) => number) => (r: number) => ratio(a(r), b(r));
    const { slidegate: sg, peer: pr, denyFloor, oneCallFloor } = TARGETS;
    const ratios = {
      deniedRpsVsFloor: judged("denied req/s, slidegate ÷ constant-429 floor", div(of(sg, "denied", "rps"), of(denyFloor, "denied", "rps")), { op: ">=", value: 0.9 }),
      deniedRpsVsPeer: judged("denied req/s, slidegate ÷ peer", div(of(sg, "denied", "rps"), of(pr, "denied", "rps")), { op: ">=", value: 1.0 }),
      deniedP50VsFloor: judged("denied p50, slidegate ÷ constant-429 floor", div(of(sg, "denied", "p50"), of(denyFloor, "denied", "p50")), { op: "<=", value: 1.1 }),
      admittedAddedP50VsFloor: judged("admitted added p50, slidegate ÷ one-call floor", div(added(sg, "p50"), added(oneCallFloor, "p50")), { op: "<=", value: 1.1 }),
      admittedAddedP50VsPeer: judged("admitted added p50, slidegate ÷ peer", div(added(sg, "p50"), added(pr, "p50")), { op: "<=", value: 1.0 }),
      admittedP99VsPeer: judged("admitted p99, slidegate ÷ peer", div(of(sg, "admitted", "p99"), of(pr, "admitted", "p99")), { op: "<=", value: 1.0 }),
      // the peer against the same floors, for scale
      peerDeniedRpsVsFloor: judged("denied req/s, peer ÷ constant-429 floor", div(of(pr, "denied", "rps"), of(denyFloor, "denied", "rps"))),
      peerDeniedP50VsFloor: judged("denied p50, peer ÷ constant-429 floor", div(of(pr, "denied", "p50"), of(denyFloor, "denied", "p50"))),
      peerAdmittedAddedP50VsFloor: judged("admitted added p50, peer ÷ one-call floor", div(added(pr, "p50"), added(oneCallFloor, "p50"))),
    };

    progress("e. round trips per decision, counted at the shim");
    const counted = (await slidegate(20)).url;
    let before = await shimRequests(stack);
    for (let i = 0; i < 20; i++) await call(counted, "198.51.100.201");
    const admittedTrips = (await shimRequests(stack)) - before;
    await call(counted, "198.51.100.201"); // the denial that fills the denial cache
    before = await shimRequests(stack);
    for (let i = 0; i < 20; i++) await call(counted, "198.51.100.201");
    const blockedTrips = (await shimRequests(stack)) - before;

    const admitted = summarise("admitted");
    const denied = summarise("denied");
    const bundle = { slidegate: gzipBytes(built.slidegate), peer: gzipBytes(built.peer) };
    return {
      method: {
        client: "node:http keep-alive Agent in a worker thread; each request timed with performance.now() from write to last byte",
        ...options,
        identity: "one client IP for every request",
        admitted: "a limit of 1,000,000 per hour, never reached",
        denied: "a limit of 1 per hour, spent before the warm-up; every timed denial answered from the gate's isolate cache",
        loadAverage1m: { before: loadBefore, after: loadAfter, cores: cpus().length },
      },
      admitted,
      denied,
      addedOverPassThrough,
      ratios,
      roundTrips: { perAdmittedDecision: admittedTrips / 20, perBlockedDecision: blockedTrips / 20 },
      bundleGzipBytes: { slidegate: bundle.slidegate, "@upstash/ratelimit": bundle.peer, ratio: ratio(bundle.slidegate, bundle.peer) },
    };
  } finally {
    await client.close();
    await Promise.all(started.map((mf) => mf.dispose()));
  }
}
