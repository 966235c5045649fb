import { errors, type Redis } from "@upstash/redis/cloudflare";
import type { Registry } from "../admin/registry.ts";
import type { GateConfig } from "../config/rate-limits.ts";
import { keyIdentity } from "../decision/identity.ts";
import { tierOf } from "../decision/rules.ts";
import { FIGURES_DEFAULTS, field, figureKeys, LATENCY_BUCKETS_MS } from "../gateway/live-figures.ts";
import type { Outcome } from "../gateway/metrics.ts";

/**
 * The console's view of the live figures (src/gateway/live-figures.ts): every isolate's
 * counts, summed per minute over the last `minutes`, the store latency's p50 and p99 from the
 * merged histograms, and the identities refused most in the last `TOP_MINUTES` with their
 * registry entry where they have one. Two pipelined calls: the minutes, then the entries.
 *
 * @example
 * const report = await readFigures({ redis, registry, config, now: Date.now() }, 60);
 * report.totals.decisions.admitted; // every admitted request of the last hour, fleet-wide
 */

const OUTCOMES = [
  "admitted",
  "denied",
  "shadow-denied",
  "blocked",
  "failed-open",
  "failed-closed",
  "failed-shadow",
  "allowlisted",
  "denylisted",
  "unknown-key",
  "disabled-key",
  "ambiguous-key",
  "key-required",
] as const satisfies readonly Outcome[];
// an outcome the gate records that the console would not count: a compile error here
true satisfies [Exclude<Outcome, (typeof OUTCOMES)[number]>] extends [never] ? true : never;
/** How far back "refused now" looks. */
export const TOP_MINUTES = 10;
const TOP_LISTED = 20;
const MINUTE_MS = 60_000;
const KEY_HASH = /^[0-9a-f]{64}$/;

/**
 * The `q` quantile of a latency histogram (counts per bucket of `LATENCY_BUCKETS_MS`): the
 * upper bound of the bucket that holds the ⌈q·n⌉-th smallest latency, so the true value is at
 * most it (and above the bucket before). null without any count.
 *
 * @example
 * quantile([0, 3, 1], 0.5); // 2: the 2nd of 4 latencies is in the "≤ 2 ms" bucket
 */
export function quantile(counts: readonly number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return LATENCY_BUCKETS_MS[Math.min(i, LATENCY_BUCKETS_MS.length - 1)]!;
  }
  return LATENCY_BUCKETS_MS.at(-1)!;
}

export interface Latency {
  /** decisions that waited on the store */
  count: number;
  /** upper bounds (ms) of the buckets holding the median and the 99th percentile */
  p50: number | null;
  p99: number | null;
}

export interface MinuteFigures {
  at: string;
  decisions: Record<(typeof OUTCOMES)[number], number>;
  /** decisions in which a store call failed, counted beside their outcome (see `totals.storeFailures`) */
  storeFailures: number;
  storeLatencyMs: Latency;
}

export interface Figures {
  generatedAt: string;
  minutes: MinuteFigures[];
  totals: {
    decisions: Record<(typeof OUTCOMES)[number], number>;
    all: number;
    storeLatencyMs: Latency;
    byTier: { outcome: string; tier: string; count: number }[];
    byRule: { outcome: string; tier: string; rule: string; count: number }[];
    /**
     * decisions in which a store call failed, whatever their outcome: besides the failed-*
     * ones, a decision a call for shadow rules alone failed in while another call answered
     * (admitted, denied, blocked). Not an outcome: `all` is the sum of `decisions` without it.
     */
    storeFailures: number;
    /** flush calls that reached Redis */
    flushes: number;
    /** decisions an isolate counted and could not deliver */
    lost: number;
    /** refusals counted but not named, in minutes with more refused callers than an isolate names */
    untracked: number;
  };
  top: {
    minutes: number;
    identities: {
      tag: string;
      kind: "key" | "ip" | "user";
      /** an API key's SHA-256 (the admin API takes it as "hash") */
      hash?: string;
      refused: number;
      tier: string;
      label?: string;
      registered: boolean;
    }[];
  };
  latencyBucketsMs: readonly number[];
}

const zeros = () => Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<(typeof OUTCOMES)[number], number>;

/** HGETALL's answer as numbers, whether the client hands it over as pairs or as an object. */
function countsFrom(raw: unknown): Map<string, number> {
  const out = new Map<string, number>();
  if (Array.isArray(raw)) for (let i = 0; i + 1 < raw.length; i += 2) out.set(String(raw[i]), Number(raw[i + 1]));
  else if (raw && typeof raw === "object") for (const [k, v] of Object.entries(raw)) out.set(k, Number(v));
  return out;
}

function latencyOf(histogram: readonly number[]): Latency {
  return { count: histogram.reduce((a, b) => a + b, 0), p50: quantile(histogram, 0.5), p99: quantile(histogram, 0.99) };
}

export async function readFigures({ redis, registry, config, now }: { redis: Redis; registry: Registry; config: GateConfig; now: number }, minutes: number): Promise<Figures> {
  const { prefix } = config;
  const current = Math.floor(now / MINUTE_MS);
  const span = Array.from({ length: minutes }, (_, i) => current - minutes + 1 + i);
  const recent = span.slice(-TOP_MINUTES);
  const scratch = figureKeys.scratch(prefix, crypto.randomUUID());

  const p = redis.pipeline();
  for (const minute of span) p.hgetall(figureKeys.minute(prefix, minute));
  p.zunionstore(
    scratch,
    recent.length,
    recent.map((m) => figureKeys.top(prefix, m)),
  );
  p.expire(scratch, 60); // gone by itself should the DEL below never run
  p.zrange(scratch, 0, TOP_LISTED - 1, { rev: true, withScores: true });
  p.del(scratch);
  // each reply on its own: a minute's hash or a refused-callers list that holds another type
  // (written by hand) is read as none, as the script reads a key of another type, so one such
  // key does not take the whole health view down until an operator finds it by redis-cli
  const replies = (await p.exec({ keepErrors: true })).map(({ error, result }, i) => {
    if (error === undefined) return result;
    if (/^WRONGTYPE /.test(error) && i <= span.length) return null;
    throw new errors.UpstashError(error);
  });

  const totals = zeros();
  const histogram = LATENCY_BUCKETS_MS.map(() => 0);
  const byTier = new Map<string, number>();
  const byRule = new Map<string, number>();
  const extra = { storeFailures: 0, flushes: 0, lost: 0, untracked: 0 };
  const perMinute = span.map((minute, i): MinuteFigures => {
    const decisions = zeros();
    const own = LATENCY_BUCKETS_MS.map(() => 0);
    // absent from a minute without one, and from one an earlier build counted: 0
    let storeFailures = 0;
    for (const [f, n] of countsFrom(replies[i])) {
      const [kind, a = "", b = "", c = ""] = f.split("|");
      if (kind === "d" && a in decisions) {
        decisions[a as keyof typeof decisions] += n;
        byTier.set(`${a}|${b}`, (byTier.get(`${a}|${b}`) ?? 0) + n);
      } else if (kind === "r") byRule.set(`${a}|${b}|${c}`, (byRule.get(`${a}|${b}|${c}`) ?? 0) + n);
      else if (kind === "l" && Number(a) in own) own[Number(a)]! += n;
      else if (f === field.storeFailures) storeFailures += n;
      else if (f === field.flushes) extra.flushes += n;
      else if (f === field.lost) extra.lost += n;
      else if (f === field.untracked) extra.untracked += n;
    }
    for (const o of OUTCOMES) totals[o] += decisions[o];
    for (const [b, n] of own.entries()) histogram[b]! += n;
    extra.storeFailures += storeFailures;
    return { at: new Date(minute * MINUTE_MS).toISOString(), decisions, storeFailures, storeLatencyMs: latencyOf(own) };
  });

  const ranked = replies[span.length + 2] as unknown[];
  const top: { member: string; refused: number }[] = [];
  for (let i = 0; i + 1 < ranked.length; i += 2) top.push({ member: String(ranked[i]), refused: Number(ranked[i + 1]) });
  const keys = top.filter((t) => KEY_HASH.test(t.member)).map((t) => keyIdentity(t.member));
  const entries = new Map((await registry.getMany(keys)).map((entry, i) => [keys[i]!.keyHash!, entry]));

  return {
    generatedAt: new Date(now).toISOString(),
    minutes: perMinute,
    totals: {
      decisions: totals,
      all: OUTCOMES.reduce((sum, o) => sum + totals[o], 0),
      storeLatencyMs: latencyOf(histogram),
      byTier: [...byTier].map(([k, count]) => {
        const [outcome = "", tier = ""] = k.split("|");
        return { outcome, tier, count };
      }),
      byRule: [...byRule].map(([k, count]) => {
        const [outcome = "", tier = "", rule = ""] = k.split("|");
        return { outcome, tier, rule, count };
      }),
      ...extra,
    },
    top: {
      minutes: recent.length,
      identities: top.map(({ member, refused }) => {
        if (!KEY_HASH.test(member))
          return { tag: member, kind: member.startsWith("u") ? ("user" as const) : ("ip" as const), refused, tier: tierOf(config, undefined), registered: false };
        const entry = entries.get(member);
        return {
          tag: keyIdentity(member).tag,
          kind: "key" as const,
          hash: member,
          refused,
          tier: entry?.tier || tierOf(config, member),
          ...(entry?.label !== undefined && { label: entry.label }),
          registered: entry !== undefined,
        };
      }),
    },
    latencyBucketsMs: LATENCY_BUCKETS_MS,
  };
}

/** The longest span one figures call reads: a day (Redis keeps `FIGURES_DEFAULTS.retainMinutes`). */
export const MAX_FIGURE_MINUTES = Math.min(1440, FIGURES_DEFAULTS.retainMinutes);
