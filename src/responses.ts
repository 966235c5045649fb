import { rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import type { Decision } from "./limiter.ts";
import { problem } from "./problem.ts";

/** The gate's own answers, each a problem+json with a stable type. */

export const keyRequired = (header: string) =>
  problem(401, "api-key-required", "API Key Required", `Send your API key in the ${header} header.`);

export const forbidden = () => problem(403, "forbidden", "Forbidden", "This caller is on the deny list.");

export const blocked = (ms: number) =>
  problem(403, "blocked", "Blocked", "This caller is blocked by the operator for now.", Number.isFinite(ms) ? { "Retry-After": retryAfterSeconds(ms) } : {});

export const storeUnavailable = () =>
  problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store did not answer in time.", { "Retry-After": "1" });

export const badGateway = () => problem(502, "bad-gateway", "Bad Gateway", "The origin could not be reached.");

/** 429 for a decision `elapsedMs` old (from the block cache) or fresh. */
export function rateLimited(decision: Decision, elapsedMs = 0): Response {
  const limits = decision.limits.map((l) => ({ ...l, resetMs: Math.max(0, l.resetMs - elapsedMs) }));
  const headers = rateLimitHeaders({ ...decision, limits });
  const enforced = decision.limits.filter((l) => !l.shadow);
  const wait = retryAfterSeconds(decision.retryAfterMs - elapsedMs);
  headers.set("Retry-After", wait);
  const names = enforced.filter((l) => l.retryMs > 0).map((l) => `"${l.name}"`).join(", ");
  return problem(429, "rate-limited", "Too Many Requests", `Rate limit ${names} exceeded; retry in ${wait} s.`, headers);
}
