/**
 * slidegate as Hono middleware: limits each request, sets the rate-limit headers on the
 * response, and answers 429/403/503 problem+json itself when the request may not pass.
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit } from "slidegate/hono";
 * const app = new Hono<{ Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string } }>();
 * app.use("/api/*", rateLimit({ rules: [{ name: "default", limit: 5, window: "10s" }] }));
 */
import type { Context, MiddlewareHandler } from "hono";
import { CostError, createRateLimiter, type RateLimiter, type RateLimiterOptions } from "./lib.ts";
import { problem } from "./problem.ts";

export interface RateLimitMiddlewareOptions extends Omit<RateLimiterOptions, "url" | "token"> {
  /** default: c.env.UPSTASH_REDIS_REST_URL */
  url?: string;
  /** default: c.env.UPSTASH_REDIS_REST_TOKEN */
  token?: string;
  /** an identity of your own (a user id, say); default: the API key or client IP of the request */
  identify?: (c: Context) => string | undefined;
  /** what a request weighs, a whole number from 1 to the rules' limits (else the request gets 400); default: each rule's own cost */
  cost?: (c: Context) => number | undefined;
}

export function rateLimit(options: RateLimitMiddlewareOptions): MiddlewareHandler {
  // Built on the first request, when the bindings are known, then kept for the isolate.
  let limiter: RateLimiter | undefined;
  return async (c, next) => {
    const env = (c.env ?? {}) as Record<string, string | undefined>;
    limiter ??= createRateLimiter({ ...options, url: options.url ?? env.UPSTASH_REDIS_REST_URL ?? "", token: options.token ?? env.UPSTASH_REDIS_REST_TOKEN ?? "" });
    let result;
    try {
      result = await limiter.limit(options.identify?.(c) ?? c.req.raw, { cost: options.cost?.(c) });
    } catch (e) {
      // a cost computed from the request (`?tokens=-5`) is the request's fault: answer it, record nothing
      if (e instanceof CostError) return problem(400, "invalid-cost", "Bad Request", e.message.replace(/^slidegate: /, "This request's "));
      throw e;
    }
    if (!result.success) return result.response();
    await next();
    result.headers.forEach((value, name) => c.res.headers.set(name, value));
  };
}
