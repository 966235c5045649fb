/**
 * slidegate as a library: the gate's limiter inside your own Worker. Same script, same
 * semantics, one Redis round trip per decision.
 *
 * @example
 * import { createRateLimiter } from "slidegate";
 * const limiter = createRateLimiter({ url, token, rules: [{ name: "default", limit: 5, window: "10s" }] });
 * const result = await limiter.limit(request);            // or limiter.limit("user-42", { cost: 3 })
 * if (!result.success) return result.response();          // 429/403/503 problem+json, headers set
 * const response = await handle(request);
 * result.headers.forEach((v, k) => response.headers.set(k, v));
 */
import { parseRateLimits, type GateConfig, type Rule } from "./config.ts";
import { createDecider, type Verdict } from "./decide.ts";
import { rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import { apiKey, clientIp, identify } from "./identity.ts";
import { assertCost, type Decision } from "./limiter.ts";
import { blocked, rateLimited, storeUnavailable } from "./responses.ts";
import { matchRules, tierOf } from "./rules.ts";

export { CostError } from "./limiter.ts";
export type { Decision, LimitState } from "./limiter.ts";

export interface RateLimiterOptions {
  /** the Upstash REST URL (or the slidegate shim's) */
  url: string;
  token: string;
  /** the same rules as RATE_LIMITS: `{ name, limit, window, cost?, path?, methods?, fail?, timeout?, shadow? }` */
  rules: Record<string, unknown>[];
  /** for Request input: the API-key header; without it (or without the header) the client IP */
  keyHeader?: string;
  prefix?: string;
  fail?: "open" | "closed";
  timeout?: number;
  blockCacheSize?: number;
}

export type Reason = "admitted" | "rate-limited" | "blocked" | "failed-open" | "failed-closed" | "no-rule";

export interface LimitResult {
  /** go ahead: admitted, failed open, or no rule applied */
  success: boolean;
  reason: Reason;
  /** the rate-limit headers to put on your response (X-RateLimit-*, RateLimit, RateLimit-Policy, Retry-After when denied) */
  headers: Headers;
  /** whole seconds to wait, when denied or blocked */
  retryAfter?: number;
  decision?: Decision;
  /** the answer slidegate would give: 429 / 403 / 503 problem+json, with the headers */
  response(): Response;
}

export interface LimitOptions {
  /**
   * What this call weighs against every rule it is checked against: a whole number from 1 to
   * the smallest of their limits (default: each rule's own cost). Anything else throws a
   * {@link CostError} (a TypeError) before Redis is asked.
   */
  cost?: number;
}

export interface RateLimiter {
  /** A Request (identity from `keyHeader` or CF-Connecting-IP; rules matched by its path and method) or an identity of your own. */
  limit(input: Request | string, options?: LimitOptions): Promise<LimitResult>;
}

function toConfig(options: RateLimiterOptions): GateConfig {
  const parsed = parseRateLimits({
    rules: options.rules,
    ...(options.keyHeader && { identity: { header: options.keyHeader } }),
    ...(options.prefix && { prefix: options.prefix }),
    ...(options.fail && { fail: options.fail }),
    ...(options.timeout && { timeout: options.timeout }),
    ...(options.blockCacheSize !== undefined && { blockCacheSize: options.blockCacheSize }),
  });
  if (!parsed.ok) throw new Error(`slidegate: invalid options: ${parsed.errors.join("; ").replaceAll("RATE_LIMITS", "options")}`);
  return parsed.config;
}

function toResult(verdict: Verdict): LimitResult {
  switch (verdict.kind) {
    case "admitted":
      return { success: true, reason: "admitted", decision: verdict.decision, headers: rateLimitHeaders(verdict.decision), response: () => new Response(null, { status: 204 }) };
    case "denied": {
      const response = () => rateLimited(verdict.decision, verdict.elapsedMs);
      const headers = response().headers;
      headers.delete("Content-Type");
      headers.delete("Cache-Control");
      const retryAfter = Number(retryAfterSeconds(verdict.decision.retryAfterMs - verdict.elapsedMs));
      return { success: false, reason: "rate-limited", decision: verdict.decision, headers, retryAfter, response };
    }
    case "blocked":
      return { success: false, reason: "blocked", headers: new Headers(), retryAfter: Number.isFinite(verdict.ms) ? Number(retryAfterSeconds(verdict.ms)) : undefined, response: () => blocked(verdict.ms) };
    case "failed":
      return verdict.closed
        ? { success: false, reason: "failed-closed", headers: new Headers({ "Retry-After": "1" }), retryAfter: 1, response: storeUnavailable }
        : { success: true, reason: "failed-open", headers: new Headers({ "X-Slidegate-Fail-Open": "store-unavailable" }), response: () => new Response(null, { status: 204 }) };
  }
}

/** Validates `options` once (throwing an error that names the bad field) and returns the limiter. */
export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  if (!options.url || !options.token) {
    throw new Error("slidegate: options.url and options.token are required (the UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN of your database)");
  }
  const config = toConfig(options);
  const decide = createDecider({ config, redisUrl: options.url, redisToken: options.token });
  const allRules: readonly Rule[] = config.tiers.get(config.defaultTier) ?? [];
  return {
    async limit(input, limitOptions = {}) {
      const { cost } = limitOptions;
      // the shape first, whatever rules match: a bad cost is a bug even where no rule applies
      if (cost !== undefined) assertCost(cost);
      let identity;
      let rules = allRules;
      if (typeof input === "string") {
        identity = await identify("k", input);
      } else {
        const key = config.keyHeader ? apiKey(input, config.keyHeader) : undefined;
        identity = key ? await identify("k", key) : await identify("i", clientIp(input));
        rules = matchRules(config, tierOf(config, undefined), input.method, new URL(input.url).pathname);
      }
      if (rules.length === 0) return { success: true, reason: "no-rule", headers: new Headers(), response: () => new Response(null, { status: 204 }) };
      if (cost !== undefined) for (const rule of rules) assertCost(cost, rule);
      return toResult(await decide(identity, config.defaultTier, rules, cost));
    },
  };
}
