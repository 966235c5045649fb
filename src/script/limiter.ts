import type { Redis } from "@upstash/redis/cloudflare";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "./sliding-window.ts";
import { storeClient, within } from "./store-client.ts";

/** One limit to check: at most `limit` units of cost per `windowMs`. */
export interface Limit {
  name: string;
  limit: number;
  windowMs: number;
  /** what this request weighs against the limit: a whole number from 1 to `limit` (default 1) */
  cost?: number;
  /** decided and reported, never enforced */
  shadow?: boolean;
  /** the scope of this limit's log, when it is not the call's (the address floor's, say) */
  scope?: string;
  /**
   * the name of the log it counts in (default: its own name). Limits of one call that name
   * the same log must see the same requests at the same cost: the log is kept for the longest
   * of their windows and records a request once.
   */
  log?: string;
}

export interface LimitState {
  name: string;
  /** the limit and window that decided: the rule's, or an API key's own overrides of them */
  limit: number;
  windowMs: number;
  shadow: boolean;
  remaining: number;
  /** ms until the oldest entry leaves the window */
  resetMs: number;
  /** ms until this request would fit; 0 when it fits */
  retryMs: number;
}

export interface Decision {
  admitted: boolean;
  limits: LimitState[];
  /** the longest wait among the enforced limits that denied; 0 when admitted */
  retryAfterMs: number;
  /** shadow limits that would have denied this request */
  wouldDeny: string[];
}

/** How the registry is read for an API key: its tier when the registry holds no entry ("" for a key nobody configured). */
export interface KeyLookup {
  fallback: string;
  /**
   * when the decision this call is part of began (Date.now()): a key the registry moves to
   * another tier is asked again, and every ask must end within the budget counted from here
   */
  startedAt?: number;
}

/** What one call of the script came to. */
export type Reply =
  | { kind: "decided"; decision: Decision }
  /** an operator's block: ms left, Infinity for a block without end */
  | { kind: "blocked"; ms: number }
  /** an API key the registry does not know, with no configured tier */
  | { kind: "unknown-key" }
  | { kind: "disabled-key" }
  /** the registry puts the key in another tier: ask again with that tier's limits */
  | { kind: "other-tier"; tier: string };

export interface LimiterOptions {
  url: string;
  token: string;
  /** key prefix in Redis */
  prefix: string;
  /** "redis": Redis TIME decides (default); "edge": `now()` is sent instead */
  clock?: "redis" | "edge";
  now?: () => number;
}

/**
 * ms an operator block has left, as the script reads it: the key holds when the block ends
 * (µs, the script's clock, in decimal digits as the admin API writes it); any other value is a
 * hand-made block that lasts its TTL, to its last millisecond. 0: no block; null: a block
 * without end.
 *
 * @example
 * blockLeft("1700000005000000", 4000, 1700000000000000); // 5000
 */
export function blockLeft(value: string | null, ttlMs: number, nowUs: number): number | null {
  if (value === null) return 0;
  const ends = Number(value);
  if (/^\d+$/.test(value) && Number.isFinite(ends)) return ends > nowUs ? Math.ceil((ends - nowUs) / 1000) : 0;
  if (ttlMs === -1) return null;
  return ttlMs >= 0 ? Math.max(ttlMs, 1) : 0;
}

/**
 * Redis's refusal of a script that may write, from a Redis that takes no writes but still
 * answers reads: at `maxmemory` under `noeviction` (OOM), a replica (READONLY: a primary a
 * failover demoted, with the shim still on it), a snapshot that failed under
 * `stop-writes-on-bgsave-error` (MISCONF), fewer replicas than `min-replicas-to-write`
 * (NOREPLICAS). The start of the store's error, as the rest quotes the command, whose keys and
 * arguments hold the prefix, tier and rule names (any of which may be "OOM").
 */
const WRITES_REFUSED = /^(OOM|READONLY|MISCONF|NOREPLICAS) /;

/** Redis's refusal of a command on a key of another type than the command's (written by hand): its start, as for `WRITES_REFUSED`. */
const WRONG_TYPE = /^WRONGTYPE /;

/** A block's value when the key holds another type than a string: no time, so its TTL says how long it holds, as the script reads it. */
const OTHER_TYPE = "(another type)";

/** Redis's answer to an EVALSHA of a script it has lost, which alone calls for the EVAL: its start, as for `WRITES_REFUSED`. */
const NO_SCRIPT = /^NOSCRIPT /;

/** Anything that kept the limiter from a decision: timeout, unreachable store, odd reply. */
export class LimiterError extends Error {
  override name = "LimiterError";
  /**
   * The store refused the script but answered the reads of what refuses a caller whatever the
   * rules (a Redis that takes no writes: full, a replica, …): the operator's block and, for an
   * API key, its registry entry were read and refuse nothing. Only the rules' counts went undecided.
   */
  refusalsRead = false;
}

/** Whether the limiter failed because the store takes no writes (full, a replica, …) and refused the script, which may write. */
export const refusesWrites = (error: unknown) => error instanceof LimiterError && error.cause instanceof Error && WRITES_REFUSED.test(error.cause.message);

/** `startedAt`: when the decision this call is part of began (Date.now()), for a call that asks no registry (for one that does, `key.startedAt`) */
export type CheckLimits = (tag: string, scope: string, limits: readonly Limit[], timeoutMs: number, key?: KeyLookup, startedAt?: number) => Promise<Reply>;

/** The Redis keys of one identity: its operator block, its registry entry (API keys), and per scope a log per limit (or per limits sharing one). */
export const redisKeys = {
  block: (prefix: string, tag: string) => `${prefix}:{${tag}}:block`,
  entry: (prefix: string, tag: string) => `${prefix}:{${tag}}:key`,
  log: (prefix: string, tag: string, scope: string, limit: string) => `${prefix}:{${tag}}:${scope}:${limit}`,
};

/**
 * Checked before anything reaches Redis: a cost outside 1..limit (0, negative, fractional,
 * NaN, more than the whole limit) is the caller's mistake, reported as such — never a store
 * failure, so it can neither fail open nor write half a decision. (For an API key, whose
 * limits the registry may override, the pipeline reads the bound from the script's answer.)
 */
export function assertCost(cost: unknown, limit?: Pick<Limit, "name" | "limit">): asserts cost is number {
  if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 1 || cost > (limit?.limit ?? MAX_LIMIT)) {
    const range = limit ? `from 1 to ${limit.limit} (the limit of "${limit.name}")` : `from 1 to ${MAX_LIMIT} (the largest limit a rule can have)`;
    throw new CostError(`slidegate: cost must be a whole number ${range}, not ${shown(cost)}`);
  }
}

/** The most of a refused string an error quotes: it may be a client's text, of any length. */
const SHOWN_MAX = 64;

/**
 * A refused cost as what it is: the string "3" or a Promise (from a JavaScript caller) must
 * not read as the number 3 or "[object Promise]". A long string is quoted in part, with its
 * length: a cost read from the request and never made a number is the client's text, which
 * an app that answers its errors' messages would hand back whole, and its log keep.
 *
 * @example
 * shown("3"); // '"3"'
 * shown("9".repeat(100)); // '"9999…9999"… (100 characters)', 64 nines quoted
 */
export function shown(value: unknown): string {
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return value.length > SHOWN_MAX ? `${JSON.stringify(value.slice(0, SHOWN_MAX))}… (${value.length} characters)` : JSON.stringify(value);
  if (value !== null && typeof value === "object")
    return typeof (value as PromiseLike<unknown>).then === "function" ? "a Promise" : `an ${value.constructor?.name ?? "object"}`.replace(/^an ([^AEIOU])/, "a $1");
  return value === null || value === undefined ? String(value) : `a ${typeof value}`;
}

/** A name as the configuration takes it (a rule's, a tier's, the prefix): part of Redis keys, so short and free of the key separator. */
export const NAME_PATTERN = /^[A-Za-z0-9_-]{1,32}$/;

/** The largest limit a rule, or an API key's own override of one, can have: no request weighs more. */
export const MAX_LIMIT = 1_000_000;

/** A cost the caller should not have asked for: see {@link assertCost}. */
export class CostError extends TypeError {
  override name = "CostError";
}

/**
 * One REST round trip per decision: EVALSHA of the sliding-window script, EVAL only when
 * Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH). For an API key (`key` given), the
 * same call reads the key's registry entry.
 *
 * @example
 * const check = createLimiter({ url, token, prefix: "sg" });
 * const r = await check("kAbc…", "free", [{ name: "minute", limit: 10, windowMs: 60_000 }], 1000, { fallback: "free" });
 * r.kind === "decided" && r.decision.admitted; // true for the first ten calls in any 60 s
 */
export function createLimiter(options: LimiterOptions): CheckLimits {
  const clients = new Map<number, Redis>();
  // One client per timeout budget, so that even a call that missed `within`'s signal keeps its
  // budget. The script answers numbers and names from the configuration: plain JSON carries them.
  const client = (timeoutMs: number) => {
    let c = clients.get(timeoutMs);
    if (!c) {
      c = storeClient({ url: options.url, token: options.token, timeoutMs, plainJson: true });
      clients.set(timeoutMs, c);
    }
    return c;
  };
  const edgeNow = options.clock === "edge" ? (options.now ?? Date.now) : undefined;

  return async (tag, scope, limits, timeoutMs, key, startedAt) => {
    const keys: string[] = [redisKeys.block(options.prefix, tag), redisKeys.entry(options.prefix, tag)];
    const args: (string | number)[] = [edgeNow ? Math.round(edgeNow() * 1000) : "", scope, key ? key.fallback : "-"];
    for (const l of limits) {
      // an API key's registry entry may give a rule a limit of its own: the script, which reads
      // it, answers a cost above it (retry -1), so only the cost's shape is checked here
      assertCost(l.cost ?? 1, key ? undefined : l);
      keys.push(redisKeys.log(options.prefix, tag, l.scope ?? scope, l.log ?? l.name));
      args.push(l.name, l.limit, l.windowMs, l.cost ?? 1, l.shadow ? 1 : 0);
    }
    const redis = client(timeoutMs);
    // one budget for the decision: the EVAL after a NOSCRIPT gets what the EVALSHA left of it,
    // an ask again after a tier move what the asks before it left, and so does a call that
    // waited on another (a key nobody knows, asked about again as its address)
    const deadline = (key?.startedAt ?? startedAt ?? Date.now()) + timeoutMs;
    let reply: unknown;
    try {
      /** what is left of the budget, or the failure of having none */
      const left = () => {
        const ms = deadline - Date.now();
        if (ms < 1) throw new Error(`Timed out: the decision's ${timeoutMs} ms were spent before this call to the store.`);
        return ms;
      };
      reply = await within(left(), () => redis.evalsha(SLIDING_WINDOW_SHA1, keys, args)).catch((e: unknown) => {
        if (!(e instanceof Error && NO_SCRIPT.test(e.message))) throw e;
        return within(left(), () => redis.eval(SLIDING_WINDOW_SCRIPT, keys, args));
      });
    } catch (e) {
      // a Redis that takes no writes (full, a replica, …) refuses the script, which may write,
      // but still answers reads: an operator's block holds even then, whatever the rules' fail mode
      let refusalsRead = false;
      if (e instanceof Error && WRITES_REFUSED.test(e.message)) {
        const refused = await refusalWhenFull(redis, keys, scope, key, deadline, edgeNow).catch(() => undefined);
        if (refused) return refused;
        refusalsRead = refused === null;
      }
      const error = new LimiterError(`rate-limit store failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
      error.refusalsRead = refusalsRead;
      throw error;
    }
    return toReply(reply, limits, key);
  };
}

/**
 * What refuses a caller whatever the rules' fail mode, read without the script (which a Redis
 * that takes no writes refuses), within what is left of the budget: an operator's block (see `blockLeft`),
 * and for an API key, its registry entry disabling it or, for a key nobody configured, its
 * absence (or an entry naming no tier). For an API key asked about in another tier than its
 * own (`tier`), that tier, as the script would answer it: the fail mode is its rules'. A key of
 * another type is read as the script reads it: a block by its TTL, a registry entry as none. Null:
 * all that was read, and nothing refuses (the rules' fail mode decides); undefined: it could
 * not be read in time.
 */
async function refusalWhenFull(
  redis: Redis,
  keys: readonly string[],
  tier: string,
  key: KeyLookup | undefined,
  deadline: number,
  edgeNow: (() => number) | undefined,
): Promise<Reply | null | undefined> {
  const left = deadline - Date.now();
  if (left < 1) return undefined;
  const [block, entry] = keys as [string, string];
  const p = redis.pipeline();
  p.get(block);
  p.pttl(block);
  // the edge's clock when it decides: it is the clock of stores that refuse TIME
  if (!edgeNow) p.time();
  if (key) {
    p.hget(entry, "disabled");
    p.hget(entry, "tier");
  }
  // each reply on its own: a key of another type (written by hand) answers WRONGTYPE, which the
  // script reads as a block held by its TTL, or as no registry entry, never as a failure
  const replies = await within(left, () => p.exec({ keepErrors: true }));
  const read = replies.map(({ error, result }, i) => {
    if (error === undefined) return result;
    if (WRONG_TYPE.test(error) && (i === 0 || i >= (edgeNow ? 2 : 3))) return i === 0 ? OTHER_TYPE : null;
    throw new Error(`the store refused a read of what refuses a caller: ${error}`);
  });
  if (edgeNow) read.splice(2, 0, ["0", "0"]); // TIME's place, never read: the edge's clock decides
  const [value, ttl, time, disabled, entryTier] = read as [unknown, unknown, unknown, unknown, unknown];
  // replies of the types Redis gives these commands, or none of it is read: a refusal (a block
  // for good, a disabled key) made of a nonsense reply would stand whatever the rules' fail mode
  const text = (v: unknown): v is string | null => v === null || typeof v === "string";
  const whole = (v: unknown) => Number.isSafeInteger(v) || (typeof v === "string" && /^\d{1,15}$/.test(v));
  const clock = Array.isArray(time) && time.length === 2 && time.every(whole);
  if (!text(value) || !Number.isSafeInteger(ttl) || !clock || (key && (!text(disabled) || !text(entryTier))))
    throw new Error(`the store's reply to the read of what refuses a caller is none Redis gives: ${JSON.stringify(replies)?.slice(0, 200)}`);
  const [seconds, micros] = time as [string | number, string | number];
  const nowUs = edgeNow ? Math.round(edgeNow() * 1000) : Number(seconds) * 1_000_000 + Number(micros);
  const ms = blockLeft(value, ttl as number, nowUs);
  if (ms !== 0) return { kind: "blocked", ms: ms ?? Number.POSITIVE_INFINITY };
  if (!key) return null;
  if (disabled === "1") return { kind: "disabled-key" };
  // the tier whose rules the key answers to, as the script reads it (a tier field that is no
  // name is none): a key the registry moved to a tier that fails closed must not fail open by
  // the rules of the tier an isolate assumed
  const held = (entryTier as string | null | undefined) ?? undefined;
  const own = held !== undefined && NAME_PATTERN.test(held) ? held : key.fallback;
  if (own === "") return { kind: "unknown-key" };
  if (own !== tier) return { kind: "other-tier", tier: own };
  return null;
}

/** The decision of a reply that must be one (a call for an address, on limits of the gate's own). */
export function decisionOf(reply: Reply): Decision {
  if (reply.kind !== "decided") throw new LimiterError(`expected a decision, the store answered ${reply.kind}`);
  return reply.decision;
}

/** The longest window a rule, or an API key's override of one, can have (366 days, in ms). */
const MAX_WINDOW_MS = 366 * 86_400_000;

/**
 * A reply as the script can give it, or a LimiterError (a store failure, handled by the rules'
 * fail mode): a store that answers well-typed nonsense must neither deny, nor admit with
 * headers made of it, nor reach code that expects another kind of call's answer. `key`: how
 * the call asked the registry about an API key, undefined for a call that asked no registry.
 *
 * @example
 * toReply([1, 4, 60000, 0, 5, 60000], [{ name: "minute", limit: 5, windowMs: 60_000 }], undefined).kind; // "decided"
 */
export function toReply(reply: unknown, limits: readonly Limit[], key: Pick<KeyLookup, "fallback"> | undefined): Reply {
  const malformed = () => new LimiterError(`rate-limit store sent an unexpected reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  const keyLookup = key !== undefined;
  if (!Array.isArray(reply)) throw malformed();
  const [kind, arg] = reply as unknown[];
  // the registry's answers come only to a call that asked the registry
  // and name a tier as a configuration can (the registry writes only those): any other text
  // would go on as the caller's tier into the isolate's cache, the log and the data points
  if (keyLookup && kind === 5 && reply.length === 2 && typeof arg === "string" && NAME_PATTERN.test(arg)) return { kind: "other-tier", tier: arg };
  if (kind === 2 && reply.length === 2 && typeof arg === "number" && Number.isInteger(arg)) {
    // -1 means a block without end, and so does one too long to count (a hand-made block of
    // "9999999999999999999" µs, or longer, which Redis's cast to an integer wraps to -2^63);
    // never 0, so a block in its last millisecond still reads as one
    if (arg === -1 || !Number.isSafeInteger(arg)) return { kind: "blocked", ms: Number.POSITIVE_INFINITY };
    // any other negative length is no block the script gives: an endless block made of it
    // would refuse the caller whatever the rules' fail mode
    if (arg >= 0) return { kind: "blocked", ms: Math.max(1, arg) };
  }
  if (!reply.every(Number.isSafeInteger)) throw malformed();
  // unknown only to a call for a key without a tier of its own: a key with one (configured in
  // `keys`, or every key with unknownKeys "defaultTier") is never unknown to the script, and
  // an isolate would refuse it, and keep refusing it, whatever the rules' fail mode
  if (keyLookup && kind === 3 && reply.length === 1 && key.fallback === "") return { kind: "unknown-key" };
  if (keyLookup && kind === 4 && reply.length === 1) return { kind: "disabled-key" };
  if (reply.length !== 1 + 5 * limits.length || (kind !== 0 && kind !== 1)) throw malformed();
  const n = reply as number[];
  const states = limits.map(
    (l, i): LimitState => ({
      name: l.name,
      shadow: l.shadow ?? false,
      remaining: n[1 + 5 * i]!,
      resetMs: n[2 + 5 * i]!,
      retryMs: n[3 + 5 * i]!,
      limit: n[4 + 5 * i]!,
      windowMs: n[5 + 5 * i]!,
    }),
  );
  // a log's newest entry may stand up to its longest window ahead of the clock asking
  const ahead = Math.max(0, ...states.map((s) => s.windowMs));
  for (const [i, s] of states.entries()) {
    // a limit and window of the rule's own, or (a key's call) of an override within the bounds
    // of any rule; waits within the rule's window past the furthest an entry can stand ahead
    const own = keyLookup ? s.limit <= MAX_LIMIT && s.windowMs <= MAX_WINDOW_MS : s.limit === limits[i]!.limit && s.windowMs === limits[i]!.windowMs;
    const waits = s.windowMs + ahead;
    // -1 (never fits) exactly when the request weighs more than the limit: a store's -1 under a
    // limit the cost fits would deny the request as one that can never be admitted
    const cost = limits[i]!.cost ?? 1;
    const never = cost > s.limit;
    if (!own || s.limit < 1 || s.windowMs < 1 || s.remaining < 0 || s.remaining > s.limit || s.resetMs < 0 || s.resetMs > waits || s.retryMs < -1 || s.retryMs > waits)
      throw malformed();
    if ((s.retryMs === -1) !== never) throw malformed();
    // a rule's numbers agree with the verdict: an admission fits every enforced rule and is
    // counted by each rule it fits (its cost taken from what is left); a denial is counted by
    // none, so a rule that fits has room for it; a rule that waits has no room. (Not the reset:
    // on a log it did not write, the script's float arithmetic may round it to 0.)
    const fits = s.retryMs === 0;
    if (kind === 1 && !fits && !s.shadow) throw malformed();
    if (fits ? (kind === 1 ? s.remaining > s.limit - cost : s.remaining < cost) : s.remaining >= cost) throw malformed();
  }
  const enforced = states.filter((s) => !s.shadow);
  // a denial names an enforced limit it waits for: shadow limits never deny
  if (kind === 0 && !enforced.some((s) => s.retryMs !== 0)) throw malformed();
  return {
    kind: "decided",
    decision: {
      admitted: kind === 1,
      limits: states,
      retryAfterMs: Math.max(0, ...enforced.map((s) => s.retryMs)),
      wouldDeny: states.filter((s) => s.shadow && s.retryMs !== 0).map((s) => s.name),
    },
  };
}
