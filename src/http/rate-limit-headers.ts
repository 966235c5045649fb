import type { Decision, LimitState } from "../script/limiter.ts";

const seconds = (ms: number) => Math.ceil(Math.max(ms, 0) / 1000);

/** The limit a client should watch: least remaining; on a tie, the one that resets last. */
function tightest(limits: readonly LimitState[]): LimitState {
  return limits.reduce((a, b) => (b.remaining < a.remaining || (b.remaining === a.remaining && b.resetMs > a.resetMs) ? b : a));
}

const items = (limits: readonly LimitState[]) => limits.map((l) => `"${l.name}";r=${l.remaining};t=${seconds(l.resetMs)}`).join(", ");

/**
 * Rate-limit headers for a decision: the de-facto `X-RateLimit-*` trio for the tightest
 * enforced limit, and the IETF draft-11 structured fields with one item per enforced limit.
 * Shadow limits are reported apart, in `X-Slidegate-Shadow`, so clients never throttle on them.
 *
 * @example
 * rateLimitHeaders(decision).get("RateLimit"); // '"minute";r=9;t=60'
 */
export function rateLimitHeaders(decision: Decision): Headers {
  const headers = new Headers();
  const enforced = decision.limits.filter((l) => !l.shadow);
  const shadow = decision.limits.filter((l) => l.shadow);
  if (shadow.length) headers.set("X-Slidegate-Shadow", items(shadow));
  // "would have been denied" only means something on a request that was admitted
  if (decision.admitted && decision.wouldDeny.length) headers.set("X-Slidegate-Shadow-Denied", decision.wouldDeny.join(", "));
  if (enforced.length === 0) return headers;
  const t = tightest(enforced);
  headers.set("X-RateLimit-Limit", String(t.limit));
  headers.set("X-RateLimit-Remaining", String(t.remaining));
  headers.set("X-RateLimit-Reset", String(seconds(t.resetMs)));
  headers.set("RateLimit-Policy", enforced.map((l) => `"${l.name}";q=${l.limit};w=${seconds(l.windowMs)}`).join(", "));
  headers.set("RateLimit", items(enforced));
  return headers;
}

/** Whole seconds to wait, rounded up and never below 1 (a 0 invites an instant retry storm). */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, seconds(ms)));
}
