import { Redis } from "@upstash/redis/cloudflare";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "./sliding-window.ts";

/** One limit to check: at most `limit` units of cost per `windowMs`. */
export interface Limit {
  name: string;
  limit: number;
  windowMs: number;
  /** what this request weighs against the limit: a whole number from 1 to `limit` (default 1) */
  cost?: number;
  /** decided and reported, never enforced */
  shadow?: boolean;
}

export interface LimitState {
  name: string;
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
  /** ms left of an operator's block of this identity; 0 when not blocked */
  blockedMs: number;
}

export interface LimiterOptions {
  url: string;
  token: string;
  /** key prefix in Redis */
  prefix: string;
  /** "redis": Redis TIME decides (default); "edge": `now()` is sent instead */
  clock?: "redis" | "edge";
  now?: () => number;
}

/** Anything that kept the limiter from a decision: timeout, unreachable store, odd reply. */
export class LimiterError extends Error {
  override name = "LimiterError";
}

export type CheckLimits = (tag: string, scope: string, limits: readonly Limit[], timeoutMs: number) => Promise<Decision>;

/** The Redis keys of one identity: its operator block, and per scope and limit a log. */
export const redisKeys = {
  block: (prefix: string, tag: string) => `${prefix}:{${tag}}:block`,
  log: (prefix: string, tag: string, scope: string, limit: string) => `${prefix}:{${tag}}:${scope}:${limit}`,
};

/**
 * Checked before anything reaches Redis: a cost outside 1..limit (0, negative, fractional,
 * NaN, more than the whole limit) is the caller's mistake, reported as such — never a store
 * failure, so it can neither fail open nor write half a decision.
 */
export function assertCost(cost: unknown, limit?: Pick<Limit, "name" | "limit">): asserts cost is number {
  if (typeof cost !== "number" || !Number.isInteger(cost) || cost < 1 || cost > (limit?.limit ?? Number.MAX_SAFE_INTEGER)) {
    const range = limit ? `from 1 to ${limit.limit} (the limit of "${limit.name}")` : "of at least 1";
    throw new CostError(`slidegate: cost must be a whole number ${range}, not ${String(cost)}`);
  }
}

/** A cost the caller should not have asked for: see {@link assertCost}. */
export class CostError extends TypeError {
  override name = "CostError";
}

/**
 * One REST round trip per decision: EVALSHA of the sliding-window script, EVAL only when
 * Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH).
 *
 * @example
 * const check = createLimiter({ url, token, prefix: "sg" });
 * const d = await check("kAbc…", "free", [{ name: "minute", limit: 10, windowMs: 60_000 }], 1000);
 * d.admitted; // true for the first ten calls in any 60 s
 */
export function createLimiter(options: LimiterOptions): CheckLimits {
  const clients = new Map<number, Redis>();
  // One client per timeout budget: the signal function is the only per-call hook the client has.
  // A function (not an AbortSignal) makes an abort throw instead of posing as a reply,
  // and retries are off so the budget is the whole budget.
  const client = (timeoutMs: number) => {
    let c = clients.get(timeoutMs);
    if (!c) {
      c = new Redis({
        url: options.url,
        token: options.token,
        retry: { retries: 0 },
        signal: () => AbortSignal.timeout(timeoutMs),
        enableAutoPipelining: false,
        enableTelemetry: false,
      });
      clients.set(timeoutMs, c);
    }
    return c;
  };
  const edgeNow = options.clock === "edge" ? (options.now ?? Date.now) : undefined;

  return async (tag, scope, limits, timeoutMs) => {
    const keys: string[] = [redisKeys.block(options.prefix, tag)];
    const args: (string | number)[] = [edgeNow ? Math.round(edgeNow() * 1000) : ""];
    for (const l of limits) {
      assertCost(l.cost ?? 1, l);
      keys.push(redisKeys.log(options.prefix, tag, scope, l.name));
      args.push(l.limit, l.windowMs, l.cost ?? 1, l.shadow ? 1 : 0);
    }
    const redis = client(timeoutMs);
    let reply: unknown;
    try {
      reply = await redis.evalsha(SLIDING_WINDOW_SHA1, keys, args).catch((e: unknown) => {
        if (e instanceof Error && e.message.includes("NOSCRIPT")) return redis.eval(SLIDING_WINDOW_SCRIPT, keys, args);
        throw e;
      });
    } catch (e) {
      throw new LimiterError(`rate-limit store failed: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    }
    return toDecision(reply, limits);
  };
}

function toDecision(reply: unknown, limits: readonly Limit[]): Decision {
  const malformed = () => new LimiterError(`rate-limit store sent an unexpected reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  if (!Array.isArray(reply) || !reply.every(Number.isInteger)) throw malformed();
  if (reply[0] === 2 && reply.length === 2) {
    // blocked by an operator: -1 means a block without end; never 0, so "blocked" never reads as "not blocked"
    const blockedMs = reply[1] < 0 ? Number.POSITIVE_INFINITY : Math.max(1, reply[1]);
    return { admitted: false, limits: [], retryAfterMs: blockedMs, wouldDeny: [], blockedMs };
  }
  if (reply.length !== 1 + 3 * limits.length || (reply[0] !== 0 && reply[0] !== 1)) throw malformed();
  const states = limits.map((l, i): LimitState => ({
    name: l.name,
    limit: l.limit,
    windowMs: l.windowMs,
    shadow: l.shadow ?? false,
    remaining: reply[1 + 3 * i],
    resetMs: reply[2 + 3 * i],
    retryMs: reply[3 + 3 * i],
  }));
  const enforced = states.filter((s) => !s.shadow);
  return {
    admitted: reply[0] === 1,
    limits: states,
    retryAfterMs: Math.max(0, ...enforced.map((s) => s.retryMs)),
    wouldDeny: states.filter((s) => s.shadow && s.retryMs !== 0).map((s) => s.name),
    blockedMs: 0,
  };
}
