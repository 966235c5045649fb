import { rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import type { Decision } from "./limiter.ts";
import { problem } from "./problem.ts";

/** The gate's own answers, each a problem+json with a stable type. None carries configuration or internal detail. */

export const keyRequired = (header: string) =>
  problem(401, "api-key-required", "API Key Required", `Send your API key in the ${header} header.`, { "WWW-Authenticate": 'Bearer realm="api"' });

export const ambiguousKey = (header: string) =>
  problem(400, "ambiguous-api-key", "Ambiguous API Key", `Send exactly one API key, once, in the ${header} header (a repeated or comma-separated header is refused).`);

export const invalidPath = (refused: string) =>
  problem(400, "invalid-path", "Invalid Path", `The path contains ${refused}, which this gateway does not accept.`);

export const forbidden = () => problem(403, "forbidden", "Forbidden", "This caller is on the deny list.");

export const blocked = (ms: number) =>
  problem(403, "blocked", "Blocked", "This caller is blocked by the operator for now.", Number.isFinite(ms) ? { "Retry-After": retryAfterSeconds(ms) } : {});

export const storeUnavailable = () =>
  problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store did not answer in time.", { "Retry-After": "1" });

export const badGateway = () => problem(502, "bad-gateway", "Bad Gateway", "The origin could not be reached.");

export const internalError = () => problem(500, "internal-error", "Internal Error", "The gateway failed on this request; the operator can find it in the logs.");

export const configurationError = () =>
  problem(500, "configuration-error", "Gateway Misconfigured", "The gateway is misconfigured; the operator can find the details in the logs and with `npm run check-config`.");

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
