/**
 * slidegate as a library: the gateway's request pipeline inside your own Worker. Same script,
 * same semantics, same answers, one Redis round trip per decision.
 *
 * @example
 * import { createRateLimiter } from "slidegate";
 * const limiter = createRateLimiter({ url, token, rules: [{ name: "default", limit: 5, window: "10s" }] });
 * const result = await limiter.limit(request);            // or limiter.limit("user-42", { cost: 3 })
 * if (!result.success) return result.response();          // 400/401/403/429/503 problem+json, headers set
 * const response = await handle(request);
 * result.headers.forEach((v, k) => response.headers.set(k, v));
 */

import { assertIdentityConfiguration, assertOptionsObject, assertStore, limiterFor, parseLimits, type RateLimiter, type RateLimiterOptions } from "./shared.ts";

export type { RateLimits } from "../config/rate-limits.ts";
export type { Reason } from "../http/answers.ts";
export type { Decision, LimitState } from "../script/limiter.ts";
export { CostError } from "../script/limiter.ts";

export type { LimitOptions, LimitResult, RateLimiter, RateLimiterOptions } from "./shared.ts";

/**
 * The Hono middleware's options that the limiter takes per call: "unknown field" alone would
 * leave a user moving from `rateLimit` to look for where they went.
 */
const PER_CALL: Record<string, string> = {
  cost: "is given with each call, what that request weighs: limiter.limit(request, { cost })",
  identify: "is rateLimit()'s (slidegate/hono); the limiter takes an identity of your own with each call: limiter.limit(request, { identity })",
  clientIp: "is given with each call, the address your runtime read: limiter.limit(request, { clientIp })",
};

/** Validates `options` once (throwing an error that names the bad field) and returns the limiter. */
export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  assertOptionsObject(options, "createRateLimiter()");
  const { url, token, ...limits } = options;
  // the store first: without one nothing else matters
  assertStore(url, token, Object.keys(limits));
  for (const [field, why] of Object.entries(PER_CALL)) {
    if (Object.hasOwn(limits, field)) throw new Error(`slidegate: invalid options: options.${field}: ${why}`);
  }
  assertIdentityConfiguration(limits, "an identity of your own goes with each call: limiter.limit(request, { identity })");
  return limiterFor(parseLimits(limits), url, token);
}
