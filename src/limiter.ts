import { Redis } from "@upstash/redis/cloudflare";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "./script.ts";

/** One limit to check: at most `limit` units of cost per `windowMs`. */
export interface Limit {
  name: string;
  limit: number;
  windowMs: number;
  /** what this request weighs against the limit (default 1) */
  cost?: number;
}

export interface LimitState {
  name: string;
  limit: number;
  windowMs: number;
  remaining: number;
  /** ms until the oldest entry leaves the window */
  resetMs: number;
  /** ms until this request would fit; 0 when it fits, -1 when its cost exceeds the limit */
  retryMs: number;
}

export interface Decision {
  admitted: boolean;
  limits: LimitState[];
  /** the longest wait among the limits that denied; 0 when admitted */
  retryAfterMs: number;
  /** the request's cost exceeds a limit outright: no wait will make it fit */
  neverFits: boolean;
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

function requestId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_");
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
    const keys: string[] = [];
    const args: (string | number)[] = [edgeNow ? Math.round(edgeNow() * 1000) : "", requestId()];
    for (const l of limits) {
      const log = `${options.prefix}:{${tag}}:${scope}:${l.name}`;
      keys.push(log, `${log}:w`);
      args.push(l.limit, l.windowMs, l.cost ?? 1);
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
  if (!Array.isArray(reply) || reply.length !== 1 + 3 * limits.length || !reply.every(Number.isInteger)) {
    throw new LimiterError(`rate-limit store sent an unexpected reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  }
  const states = limits.map((l, i): LimitState => ({
    name: l.name,
    limit: l.limit,
    windowMs: l.windowMs,
    remaining: reply[1 + 3 * i],
    resetMs: reply[2 + 3 * i],
    retryMs: reply[3 + 3 * i],
  }));
  return {
    admitted: reply[0] === 1,
    limits: states,
    retryAfterMs: Math.max(0, ...states.map((s) => s.retryMs)),
    neverFits: states.some((s) => s.retryMs < 0),
  };
}
