import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import Redis from "ioredis";
import { fieldsOf } from "../../src/admin/registry.ts";
import { SLIDING_WINDOW_SCRIPT } from "../../src/script/sliding-window.ts";
import { rewriteShebang } from "../shim/lua-flags.ts";
import { ratio, round } from "./stats.ts";

// Stock Redis refuses Upstash's allow-key-locking flag; the shim rewrites it the same way.
const script = rewriteShebang(SLIDING_WINDOW_SCRIPT) ?? SLIDING_WINDOW_SCRIPT;
// @upstash/ratelimit ships its scripts inside its bundle; this is its single-region slidingWindow limit script.
const peerScript = /var slidingWindowLimitScript = `([\s\S]*?)`;/.exec(
  readFileSync(
    createRequire(import.meta.url)
      .resolve("@upstash/ratelimit")
      .replace(/index\.js$/, "index.mjs"),
    "utf8",
  ),
)![1]!;
// The exact sliding log of the first seed, as published: evict, count, add, expire.
const seedScript = `local key = KEYS[1]
local window = tonumber(ARGV[1]) -- window in seconds
local limit = tonumber(ARGV[2]) -- max requests per window
local now = tonumber(ARGV[3]) -- current timestamp (ms)
local window_start = now - window * 1000
redis.call('ZREMRANGEBYSCORE', key, '-inf', window_start)
local count = redis.call('ZCARD', key)
if count < limit then
 redis.call('ZADD', key, now, now)
 redis.call('EXPIRE', key, window)
 return 1
else
 return 0
end`;

// slidegate's Redis calls for one rule with none of its logic: a floor, not a limiter
const callsFloorScript = readFileSync(new URL("./calls-floor.lua", import.meta.url), "utf8");

type Command = [string, ...(string | number)[]];

/**
 * KEYS and ARGV as src/script/limiter.ts sends them: the block key, the registry entry, a log
 * per rule; now ("" = Redis TIME), the tier, the registry fallback ("-": an address, not
 * read), then name, limit, window ms, cost, shadow per rule. With `shared`, the rules see the
 * same requests, as rules without their own methods, path or cost do: they share the log of
 * the first, which has the longest window (the others: a half, a quarter, an eighth of it).
 */
function slidegateCall(sha: string, tag: string, rules: number, limit: number, windowMs: number, now: number | "" = "", fallback = "-", shared = false): Command {
  const keys = [`bench:{${tag}}:block`, `bench:{${tag}}:key`, ...Array.from({ length: rules }, (_, r) => `bench:{${tag}}:t:r${shared ? 0 : r}`)];
  const windowOf = (r: number) => (shared ? windowMs / 2 ** r : windowMs);
  // a limit is at most 1,000 per ms of its window (RATE_LIMITS refuses more, and so does the script)
  return [
    "EVALSHA",
    sha,
    keys.length,
    ...keys,
    now,
    "t",
    fallback,
    ...Array.from({ length: rules }, (_, r) => [`r${r}`, Math.min(limit, windowOf(r) * 1000), windowOf(r), 1, 0]).flat(),
  ];
}

/** Registers `count` API keys as the admin API does (an entry under each key's tag, and the index). */
async function register(redis: Redis, count: number): Promise<void> {
  for (let i = 0; i < count; i += 1000) {
    const p = redis.pipeline();
    for (let j = i; j < Math.min(count, i + 1000); j++) {
      const hash = createHash("sha256").update(`customer-${j}`).digest("hex");
      p.hset(`bench:{k${j}}:key`, fieldsOf({ tier: "t", disabled: false, overrides: {} }));
      p.zadd("bench:keys", 0, hash);
    }
    for (const [error] of (await p.exec()) ?? []) if (error) throw error;
  }
}

/** Keeps `connections` clients each with a pipeline of `depth` commands in flight for `ms`: Redis is the limit. */
async function drive(clients: Redis[], next: () => Command, ms: number, depth = 16): Promise<void> {
  const deadline = performance.now() + ms;
  await Promise.all(
    clients.map(async (c) => {
      while (performance.now() < deadline) {
        const p = c.pipeline();
        for (let i = 0; i < depth; i++) {
          const [name, ...args] = next();
          p.call(name, ...args);
        }
        for (const [error] of (await p.exec()) ?? []) if (error) throw error;
      }
    }),
  );
}

/** Redis's own µs per EVALSHA call (INFO commandstats) over one measured stretch. */
async function usecPerCall(admin: Redis, clients: Redis[], next: () => Command, ms: number): Promise<number> {
  await admin.config("RESETSTAT");
  await drive(clients, next, ms);
  const line = (await admin.info("commandstats")).split("\n").find((l) => l.startsWith("cmdstat_evalsha:"));
  return Number(/usec_per_call=([\d.]+)/.exec(line ?? "")?.[1]);
}

export interface ScriptCost {
  label: string;
  rules: number;
  /** median over rounds of Redis's µs per call */
  usecPerCall: number;
  /** min and max over rounds */
  spread: [number, number];
  /** median over rounds of the round's µs per call ÷ the seed script's in the same round */
  vsSeed: number;
  /** min and max of that ratio over rounds */
  vsSeedSpread: [number, number];
  /** (rows of several rules) median over rounds of what each rule past the first adds, ÷ the seed script's µs per call */
  extraRuleVsSeed?: number;
  /** min and max of that over rounds */
  extraRuleSpread?: [number, number];
  /** (the API-key row) median over rounds of what the registry read adds: (this row's µs − the 1-rule row's) ÷ the seed script's, all from the same round */
  registryReadVsSeed?: number;
  /** min and max of that over rounds */
  registryReadSpread?: [number, number];
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

/**
 * Redis time per decision, as Redis itself accounts it (INFO commandstats µs per call), so
 * neither client speed nor round trips can hide or inflate it: the seed 001 script, the
 * @upstash/ratelimit slidingWindow script and slidegate's script with 1, 2 and 4 rules (one
 * shared log, or a log each), each over 2,000 identities in steady state (a 2 s window, so
 * every log both fills and evicts), interleaved round by round on one redis-server; medians
 * of the rounds.
 */
export async function measureScriptCost(url: string, options: { rounds: number; ms: number; registered: number }, progress: (s: string) => void): Promise<ScriptCost[]> {
  const admin = new Redis(url, { protocol: 2 });
  const clients = Array.from({ length: 8 }, () => new Redis(url, { protocol: 2 }));
  const [sha, peerSha, seedSha, floorSha] = (await Promise.all(
    [script, peerScript, seedScript, callsFloorScript].map((s) => admin.script("LOAD", rewriteShebang(s) ?? s)),
  )) as string[];
  const identities = 2000;
  const windowMs = 2000;
  const variant = (label: string, rules: number, call: (id: number) => Command) => {
    let n = 0;
    return { label, rules, next: () => call(n++ % identities), samples: [] as number[] };
  };
  const variants = [
    variant("seed 001 script (ZREMRANGEBYSCORE, ZCARD, ZADD, EXPIRE)", 1, (id) => ["EVALSHA", seedSha!, 1, `bench:seed:${id}`, windowMs / 1000, 1e9, Date.now()]),
    variant("@upstash/ratelimit slidingWindow (approximate)", 1, (id) => {
      const now = Date.now();
      const bucket = Math.floor(now / windowMs);
      return ["EVALSHA", peerSha!, 2, `bench:peer:${id}:${bucket}`, `bench:peer:${id}:${bucket - 1}`, 1e9, now, windowMs, 1];
    }),
    // each variant its own identities: logs shared across variants would make one variant evict
    // what another recorded, and charge it for that
    variant("slidegate, 1 rule", 1, (id) => slidegateCall(sha!, `r1i${id}`, 1, 1e6, windowMs)),
    // where the 1-rule figure comes from: the same script on the edge clock (no Redis TIME), and
    // its Redis calls alone, with no logic, on either clock
    variant("slidegate, 1 rule, edge clock", 1, (id) => slidegateCall(sha!, `e1i${id}`, 1, 1e6, windowMs, Date.now() * 1000)),
    variant("floor: slidegate's Redis calls for 1 rule, no logic", 1, (id) => slidegateCall(floorSha!, `f1i${id}`, 1, 1e6, windowMs)),
    variant("floor: the same calls, edge clock", 1, (id) => slidegateCall(floorSha!, `g1i${id}`, 1, 1e6, windowMs, Date.now() * 1000)),
    // rules that see the same requests (no methods, path or cost of their own) share one log
    ...[2, 4].map((rules) => variant(`slidegate, ${rules} rules, one shared log`, rules, (id) => slidegateCall(sha!, `s${rules}i${id}`, rules, 1e6, windowMs, "", "-", true))),
    // rules that see different requests keep a log each
    ...[2, 4].map((rules) => variant(`slidegate, ${rules} rules, a log each`, rules, (id) => slidegateCall(sha!, `r${rules}i${id}`, rules, 1e6, windowMs))),
    // an API key: the same call also reads the key's registry entry
    variant(`slidegate, 1 rule, an API key among ${options.registered.toLocaleString("en")} registered`, 1, (id) => slidegateCall(sha!, `k${id}`, 1, 1e6, windowMs, "", "t")),
  ];
  progress(`registering ${options.registered.toLocaleString("en")} keys`);
  await register(admin, options.registered);
  try {
    for (const v of variants) {
      progress(`warming up: ${v.label}`);
      await drive(clients, v.next, Math.max(options.ms, windowMs + 500));
    }
    for (let round = 1; round <= options.rounds; round++) {
      progress(`round ${round} of ${options.rounds}`);
      for (const v of variants) {
        await drive(clients, v.next, Math.min(300, options.ms)); // back to this variant's steady state
        v.samples.push(await usecPerCall(admin, clients, v.next, options.ms));
      }
    }
  } finally {
    for (const c of clients) c.disconnect();
    admin.disconnect();
  }
  // paired by round: a slow spell of the machine falls on both sides of each ratio
  const seed = variants[0]!.samples;
  const oneRule = variants.find((v) => v.label === "slidegate, 1 rule")!.samples;
  return variants.map((v) => {
    const ratios = v.samples.map((x, r) => x / seed[r]!);
    const extra = v.rules > 1 ? v.samples.map((x, r) => (x - oneRule[r]!) / (v.rules - 1) / seed[r]!) : undefined;
    // paired by round like the ratios: two medians taken apart, then subtracted, move with the
    // machine twice over (+0.16× and +0.29× in two runs of one build)
    const registryRead = v.label.includes("API key") ? v.samples.map((x, r) => (x - oneRule[r]!) / seed[r]!) : undefined;
    return {
      label: v.label,
      rules: v.rules,
      usecPerCall: round(median(v.samples), 2),
      spread: [Math.min(...v.samples), Math.max(...v.samples)],
      vsSeed: round(median(ratios), 2),
      vsSeedSpread: [round(Math.min(...ratios), 2), round(Math.max(...ratios), 2)],
      ...(extra && { extraRuleVsSeed: round(median(extra), 2), extraRuleSpread: [round(Math.min(...extra), 2), round(Math.max(...extra), 2)] as [number, number] }),
      ...(registryRead && {
        registryReadVsSeed: round(median(registryRead), 2),
        registryReadSpread: [round(Math.min(...registryRead), 2), round(Math.max(...registryRead), 2)] as [number, number],
      }),
    };
  });
}

export interface MemoryRow {
  entries: number;
  slidegateBytesPerEntry: number;
  seedBytesPerEntry: number;
  ratio: number;
}

/**
 * MEMORY USAGE per in-window request: slidegate's log against the seeds' "<ms>-<uuid>"
 * members. slidegate is driven through its edge-clock argument, so every call moves "now" on
 * by window/entries: the window holds exactly `entries` requests.
 */
export async function measureMemory(url: string, sizes: number[]): Promise<MemoryRow[]> {
  const redis = new Redis(url, { protocol: 2 });
  const sha = (await redis.script("LOAD", script)) as string;
  const rows: MemoryRow[] = [];
  const windowMs = 60_000;
  const t0 = 1_700_000_000_000_000;
  for (const entries of sizes) {
    const tag = `mem${entries}`;
    const seedKey = `bench:seed:${entries}`;
    const step = (windowMs * 1000) / entries;
    // two windows' worth: the log reaches its steady state, evicting as it records
    for (let i = 0; i < 2 * entries; i += 500) {
      const p = redis.pipeline();
      for (let j = i; j < Math.min(2 * entries, i + 500); j++) {
        const [, ...args] = slidegateCall(sha, tag, 1, entries + 1, windowMs, Math.round(t0 + j * step));
        p.call("EVALSHA", ...args);
        if (j < entries) {
          const ms = 1_700_000_000_000 + j;
          p.zadd(seedKey, ms, `${ms}-${crypto.randomUUID()}`);
        }
      }
      for (const [error] of (await p.exec()) ?? []) if (error) throw error;
    }
    const ours = Number(await redis.call("MEMORY", "USAGE", `bench:{${tag}}:t:r0`, "SAMPLES", "0"));
    const seed = Number(await redis.call("MEMORY", "USAGE", seedKey, "SAMPLES", "0"));
    rows.push({ entries, slidegateBytesPerEntry: round(ours / entries, 1), seedBytesPerEntry: round(seed / entries, 1), ratio: ratio(ours, seed) });
  }
  redis.disconnect();
  return rows;
}

export interface RegistryMemory {
  entries: number;
  /** MEMORY USAGE of an entry (a small hash: the key's tier), averaged over a sample */
  bytesPerEntry: number;
  /** the index's share per entry */
  indexBytesPerEntry: number;
}

/** Memory of the key registry once `count` keys are registered (measureScriptCost registers them). */
export async function measureRegistryMemory(url: string, count: number): Promise<RegistryMemory> {
  const redis = new Redis(url, { protocol: 2 });
  try {
    const sample = Array.from({ length: 200 }, (_, i) => Math.floor((i * count) / 200));
    let bytes = 0;
    for (const i of sample) bytes += Number(await redis.call("MEMORY", "USAGE", `bench:{k${i}}:key`, "SAMPLES", "0"));
    const index = Number(await redis.call("MEMORY", "USAGE", "bench:keys", "SAMPLES", "0"));
    return { entries: count, bytesPerEntry: round(bytes / sample.length, 1), indexBytesPerEntry: round(index / count, 1) };
  } finally {
    redis.disconnect();
  }
}
