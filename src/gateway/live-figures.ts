import { storeFailureOf } from "../decision/decide.ts";
import type { Identity } from "../decision/identity.ts";
import type { Step } from "../decision/pipeline.ts";
import { storeClient } from "../script/store-client.ts";
import type { Outcome } from "./metrics.ts";

/**
 * Live figures for the console: each isolate counts its decisions in memory, per minute —
 * outcome × tier (and × rule), a store-latency histogram with fixed buckets, the decisions a
 * store call failed in (beside their outcomes: one outcome per decision), and the identities
 * refused most — and adds them to Redis in one REST call at most every `intervalMs`, in the
 * background of a request (`ctx.waitUntil`). A request never waits for the figures and never
 * makes a Redis call for them.
 *
 * Exact counts: a flush takes its batch out of memory before the call. The call is one script
 * run that applies the batch once, marked by the batch's id: a batch whose reply was lost is
 * sent again as it was and, having been applied, changes nothing; a batch that never arrived
 * is applied then. A batch the store has refused for `retryForMs` is dropped, and the
 * decisions it held are counted in the `lost` field (the console reports it), so a sum never
 * silently runs short. Counts an isolate holds when the runtime evicts it are gone with it:
 * a flush follows every decision within `intervalMs` while the request that made it lasts.
 *
 * In Redis, under one hash tag (one slot in a cluster): per minute a hash of counts
 * (`<prefix>:{figures}:m:<minute>`) and a sorted set of refused identities
 * (`<prefix>:{figures}:t:<minute>`, the `topKept` highest), expiring `retainMinutes` and
 * `topRetainMinutes` after their last write; plus one short-lived marker per batch. Identities appear as their
 * hashed tag, or an API key's SHA-256 (so the console can look its registry entry up) — never
 * a raw key or address.
 *
 * @example
 * const figures = createLiveFigures({ redisUrl, redisToken, prefix: "sg" });
 * figures.record(step);      // after each decision
 * figures.schedule(ctx);     // after each response: arms a flush if none is armed
 */

/** Upper bounds (ms) of the store-latency buckets; a latency above the last one counts in the last. */
export const LATENCY_BUCKETS_MS = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 30000] as const;

export const FIGURES_DEFAULTS = {
  /** the least time between two flushes of an isolate */
  intervalMs: 5000,
  /** how long a minute's counts are kept after their last write: 3 days */
  retainMinutes: 3 * 24 * 60,
  /**
   * how long a minute's refused identities are kept after their last write: a little longer
   * than the console's "refused now" reads back (src/console/figures.ts, 10 minutes). Any caller
   * can fill a minute's set with made-up keys; kept for days, a thousand names a minute would
   * hold most of a gigabyte of a store the limits need.
   */
  topRetainMinutes: 15,
  /** refused identities counted by name per minute in an isolate (the rest: `untracked`) */
  trackedPerMinute: 1000,
  /** refused identities sent per minute in one flush, the most refused first */
  topPerFlush: 200,
  /** refused identities kept per minute in Redis, the most refused */
  topKept: 1000,
  /** how long a failed batch is offered again before its decisions count as lost */
  retryForMs: 5 * 60_000,
  /** minutes held in memory while nothing flushes (a gate called without a context) */
  maxPendingMinutes: 60,
} as const;

/** The Redis keys of the figures: one hash tag, so one script call may touch them all. */
export const figureKeys = {
  minute: (prefix: string, minute: number) => `${prefix}:{figures}:m:${minute}`,
  top: (prefix: string, minute: number) => `${prefix}:{figures}:t:${minute}`,
  batch: (prefix: string, id: string) => `${prefix}:{figures}:b:${id}`,
  scratch: (prefix: string, id: string) => `${prefix}:{figures}:u:${id}`,
};

/**
 * Fields of a minute's hash. `|` never appears in an outcome, tier or rule name.
 *   d|<outcome>|<tier>         decisions
 *   r|<outcome>|<tier>|<rule>  decisions per rule (a decision over two rules counts in both)
 *   l|<bucket index>           decisions that waited on the store, per latency bucket
 *   x|store-failures           decisions in which a store call failed, whatever their outcome
 *   x|flushes, x|lost, x|untracked, x|rules-untracked   (see `FiguresTotals`)
 * A field an isolate never wrote (a minute counted by an earlier build, say) reads as 0.
 */
export const field = {
  decisions: (outcome: string, tier: string) => `d|${outcome}|${tier}`,
  rule: (outcome: string, tier: string, rule: string) => `r|${outcome}|${tier}|${rule}`,
  latency: (bucket: number) => `l|${bucket}`,
  storeFailures: "x|store-failures",
  flushes: "x|flushes",
  lost: "x|lost",
  untracked: "x|untracked",
  rulesUntracked: "x|rules-untracked",
} as const;

/** Rule fields per minute in an isolate: outcomes × tiers × rules of one configuration stay far below it. */
const MAX_RULE_FIELDS = 2000;
const MINUTE_MS = 60_000;
/** flush rounds one request's background runs at most: within the runtime's limit on waitUntil */
const ROUNDS = 3;

/**
 * Applies one batch once. KEYS[1] is the batch's marker; KEYS[2..] the figures' keys. ARGV: the
 * marker's TTL (s), the counts' TTL (s), the refused identities' TTL (s), the identities kept
 * per minute, then per change the operation ("h" HINCRBY a field, "z" ZINCRBY a member), the
 * key's index, the field or member and the amount. Returns 1 when applied, 0 when the batch
 * was applied before.
 */
export const FLUSH_SCRIPT = `
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local sets = {}
for i = 5, #ARGV, 4 do
  local k = tonumber(ARGV[i + 1])
  if ARGV[i] == 'h' then
    redis.call('HINCRBY', KEYS[k], ARGV[i + 2], ARGV[i + 3])
  else
    redis.call('ZINCRBY', KEYS[k], ARGV[i + 3], ARGV[i + 2])
    sets[k] = true
  end
end
for k = 2, #KEYS do
  if sets[k] then
    redis.call('EXPIRE', KEYS[k], ARGV[3])
    redis.call('ZREMRANGEBYRANK', KEYS[k], 0, -(tonumber(ARGV[4]) + 1))
  else
    redis.call('EXPIRE', KEYS[k], ARGV[2])
  end
end
return 1
`;

/** What one decision adds to the figures, or undefined for a step that decided nothing. */
export interface Counted {
  outcome: Outcome;
  tier: string;
  rules: readonly string[];
  /** the store's latency, for a decision that waited on it */
  storeMs?: number;
  /** for a refused caller (denied or blocked): its key's SHA-256, or its tag */
  refused?: string;
  /**
   * a store call of the decision failed: one that fixed its outcome (failed-open, -closed,
   * -shadow) or one for shadow rules beside a call that answered, whose outcome is the other
   * call's and would otherwise hide the outage
   */
  storeFailure?: true;
}

const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);

/** The figures of one pipeline step: the same outcomes the metrics write. */
function countedOf(step: Step): Counted | undefined {
  const { tier, identity } = step.caller;
  const who = identity.keyHash ?? identity.tag;
  switch (step.kind) {
    case "unknown-key":
    case "disabled-key":
      return { outcome: step.kind, tier, rules: [], ...(step.addressFailure && { storeFailure: true as const }) };
    case "denylisted":
    case "allowlisted":
    case "ambiguous-key":
    case "key-required":
      return { outcome: step.kind, tier, rules: [] };
    case "decided":
      break;
    default:
      return undefined;
  }
  const counted = decidedCounted(step, who);
  // the same failures the gateway logs as slidegate.store_failure: at most one per decision,
  // though both of its calls failed
  return storeFailureOf(step.verdict, step.rules) ? { ...counted, storeFailure: true } : counted;
}

function decidedCounted({ caller: { tier }, verdict, rules }: Extract<Step, { kind: "decided" }>, who: string): Counted {
  // a refusal by the address's rules is the address's, whatever key the request carried
  const refused = (by: Identity | undefined) => (by ? (by.keyHash ?? by.tag) : who);
  switch (verdict.kind) {
    case "failed":
      // shadow rules alone admit whatever the store does: not failed-open, but the outage shows (no latency: no answer came)
      return { outcome: verdict.shadowOnly ? "failed-shadow" : verdict.closed ? "failed-closed" : "failed-open", tier, rules: names(rules) };
    case "blocked":
      return { outcome: "blocked", tier, rules: [], storeMs: verdict.fromCache ? undefined : verdict.redisMs, refused: refused(verdict.by) };
    case "denied": {
      const deniedBy = verdict.decision.limits.filter((l) => !l.shadow && l.retryMs !== 0);
      // a denial the isolate answered from its cache waited on nothing
      return { outcome: "denied", tier, rules: names(deniedBy), storeMs: verdict.fromCache ? undefined : verdict.redisMs, refused: refused(verdict.by) };
    }
    case "admitted": {
      const shadow = verdict.decision.wouldDeny;
      return shadow.length
        ? { outcome: "shadow-denied", tier, rules: shadow, storeMs: verdict.redisMs }
        : { outcome: "admitted", tier, rules: names(rules), storeMs: verdict.redisMs };
    }
  }
}

/** The latency bucket of a duration: the first whose upper bound holds it. */
export function latencyBucket(ms: number): number {
  const i = LATENCY_BUCKETS_MS.findIndex((bound) => ms <= bound);
  return i === -1 ? LATENCY_BUCKETS_MS.length - 1 : i;
}

interface MinuteCounts {
  fields: Map<string, number>;
  /** refused identity (key hash or tag) → refusals */
  top: Map<string, number>;
}

interface Batch {
  id: string;
  minutes: Map<number, MinuteCounts>;
  firstTriedAt: number;
}

export interface LiveFiguresOptions {
  redisUrl: string;
  redisToken: string;
  prefix: string;
  /** the isolate's clock, ms (default Date.now): it names the minutes */
  now?: () => number;
  intervalMs?: number;
  /** how long one flush call may take (default 5 s) */
  timeoutMs?: number;
  /** how long a failed batch is offered again (default `FIGURES_DEFAULTS.retryForMs`) */
  retryForMs?: number;
}

export interface LiveFigures {
  /** counts one pipeline step (one request's decision) */
  record(step: Step): void;
  /** arms a flush in the background of this request, unless one is armed or there is nothing to send */
  schedule(background: { waitUntil(promise: Promise<unknown>): void }): void;
  /** sends what is counted now (or the batch that failed before); never throws */
  flush(): Promise<void>;
  /** decisions counted and not yet known to be in Redis */
  readonly unsent: number;
}

const add = (map: Map<string, number>, key: string, n: number) => map.set(key, (map.get(key) ?? 0) + n);
const decisionsIn = (minutes: Map<number, MinuteCounts>) => {
  let n = 0;
  for (const m of minutes.values()) for (const [f, v] of m.fields) if (f.startsWith("d|")) n += v;
  return n;
};

export function createLiveFigures(options: LiveFiguresOptions): LiveFigures {
  const { prefix } = options;
  const now = options.now ?? Date.now;
  const intervalMs = options.intervalMs ?? FIGURES_DEFAULTS.intervalMs;
  const ttlSeconds = FIGURES_DEFAULTS.retainMinutes * 60;
  const retryForMs = options.retryForMs ?? FIGURES_DEFAULTS.retryForMs;
  // the marker outlives every resend of its batch: a batch is never applied twice
  const markerSeconds = Math.ceil((retryForMs * 2) / 1000) + 60;
  const redis = storeClient({ url: options.redisUrl, token: options.redisToken, timeoutMs: options.timeoutMs ?? 5000 });

  let pending = new Map<number, MinuteCounts>();
  let retry: Batch | undefined;
  let inFlight: Promise<void> | undefined;
  /** the flush loop armed in some request's background, if any */
  let armed: object | undefined;
  // the first flush, too, waits an interval: an isolate's first decisions go out together
  let lastFlushAt = now();

  const minuteOf = (minute: number) => {
    let m = pending.get(minute);
    if (!m) {
      m = { fields: new Map(), top: new Map() };
      pending.set(minute, m);
      // nothing flushing (no context to flush in): the oldest minute goes, counted as lost
      if (pending.size > FIGURES_DEFAULTS.maxPendingMinutes) {
        const oldest = Math.min(...pending.keys());
        const dropped = decisionsIn(new Map([[oldest, pending.get(oldest)!]]));
        pending.delete(oldest);
        add(m.fields, field.lost, dropped);
      }
    }
    return m;
  };

  /**
   * Room for one more refused identity in a minute: the half refused least so far (the older
   * first among equals) is counted without a name, so callers refused once each cannot crowd
   * out the one refused most.
   */
  function makeRoom(m: MinuteCounts) {
    const ranked = [...m.top].sort((a, b) => a[1] - b[1]);
    const dropped = ranked.slice(0, Math.floor(ranked.length / 2));
    for (const [who, n] of dropped) {
      m.top.delete(who);
      add(m.fields, field.untracked, n);
    }
  }

  function record(step: Step) {
    const c = countedOf(step);
    if (!c) return;
    const m = minuteOf(Math.floor(now() / MINUTE_MS));
    add(m.fields, field.decisions(c.outcome, c.tier), 1);
    for (const rule of c.rules) {
      const f = field.rule(c.outcome, c.tier, rule);
      if (m.fields.has(f) || m.fields.size < MAX_RULE_FIELDS) add(m.fields, f, 1);
      else add(m.fields, field.rulesUntracked, 1);
    }
    if (c.storeMs !== undefined) add(m.fields, field.latency(latencyBucket(c.storeMs)), 1);
    if (c.storeFailure) add(m.fields, field.storeFailures, 1);
    if (c.refused !== undefined) {
      if (!m.top.has(c.refused) && m.top.size >= FIGURES_DEFAULTS.trackedPerMinute) makeRoom(m);
      add(m.top, c.refused, 1);
    }
  }

  /** The script's keys and arguments for a batch; the batch's flush is counted in its last minute. */
  function encode(batch: Batch): { keys: string[]; args: string[] } {
    const keys = [figureKeys.batch(prefix, batch.id)];
    const args = [String(markerSeconds), String(ttlSeconds), String(FIGURES_DEFAULTS.topRetainMinutes * 60), String(FIGURES_DEFAULTS.topKept)];
    const last = Math.max(...batch.minutes.keys());
    for (const [minute, m] of batch.minutes) {
      const fields = minute === last ? new Map([...m.fields, [field.flushes, (m.fields.get(field.flushes) ?? 0) + 1]]) : m.fields;
      keys.push(figureKeys.minute(prefix, minute));
      const h = String(keys.length);
      for (const [f, n] of fields) args.push("h", h, f, String(n));
      if (m.top.size === 0) continue;
      // the most refused first; the rest of a crowded minute is counted, not named
      const ranked = [...m.top].sort((a, b) => b[1] - a[1]);
      const named = ranked.slice(0, FIGURES_DEFAULTS.topPerFlush);
      const unnamed = ranked.slice(FIGURES_DEFAULTS.topPerFlush).reduce((sum, [, n]) => sum + n, 0);
      if (unnamed) args.push("h", h, field.untracked, String(unnamed));
      keys.push(figureKeys.top(prefix, minute));
      const z = String(keys.length);
      for (const [member, n] of named) args.push("z", z, member, String(n));
    }
    return { keys, args };
  }

  async function send(): Promise<void> {
    lastFlushAt = now();
    if (retry && lastFlushAt - retry.firstTriedAt > retryForMs) {
      // offered long enough: its decisions are reported as lost rather than risked twice
      add(minuteOf(Math.floor(lastFlushAt / MINUTE_MS)).fields, field.lost, decisionsIn(retry.minutes));
      retry = undefined;
    }
    let batch = retry;
    if (!batch) {
      if (pending.size === 0) return;
      // taken out before the call: what is counted from here on waits for the next batch
      batch = { id: crypto.randomUUID(), minutes: pending, firstTriedAt: lastFlushAt };
      pending = new Map();
    }
    const { keys, args } = encode(batch);
    try {
      const reply = await redis.eval(FLUSH_SCRIPT, keys, args);
      // only the script's own 1 or 0 says the batch is in Redis: a store (or a proxy in front
      // of it) answering anything else did not run it, and a batch dropped on its word would
      // leave the figures short with nothing counted lost
      if (reply !== 1 && reply !== 0) throw new Error(`the figures' flush got a reply its script never gives: ${JSON.stringify(reply)?.slice(0, 100)}`);
      retry = undefined;
    } catch {
      // kept as it is, id and all: sent again, it is applied once whether or not this one was
      retry = batch;
    }
  }

  const flush = () =>
    (inFlight ??= send()
      .catch(() => {})
      .finally(() => (inFlight = undefined)));

  return {
    record,
    flush,
    schedule(background) {
      if (armed || (!retry && pending.size === 0)) return;
      const loop = {};
      armed = loop;
      background.waitUntil(
        (async () => {
          try {
            // a few rounds, so a batch that failed or counts that came meanwhile go out too
            for (let round = 1; retry || pending.size > 0; round++) {
              await new Promise((resolve) => setTimeout(resolve, Math.min(intervalMs, Math.max(0, lastFlushAt + intervalMs - now()))));
              // before the last call: a decision counted while it is in flight arms a flush of its own
              if (round === ROUNDS) armed = undefined;
              await flush();
              if (round === ROUNDS) return;
            }
          } finally {
            if (armed === loop) armed = undefined;
          }
        })(),
      );
    },
    get unsent() {
      return decisionsIn(pending) + (retry ? decisionsIn(retry.minutes) : 0);
    },
  };
}
