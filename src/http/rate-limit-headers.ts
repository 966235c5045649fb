import type { Decision, LimitState } from "../script/limiter.ts";

const seconds = (ms: number) => Math.ceil(Math.max(ms, 0) / 1000);

/** The limit a client should watch: least remaining; on a tie, the one that resets last. */
function tightest(limits: readonly LimitState[]): LimitState {
  return limits.reduce((a, b) => (b.remaining < a.remaining || (b.remaining === a.remaining && b.resetMs > a.resetMs) ? b : a));
}

const items = (limits: readonly LimitState[]) => limits.map((l) => `"${l.name}";r=${l.remaining};t=${seconds(l.resetMs)}`).join(", ");

/** Header fields as [name, value] entries: what a `Headers` is built from, without building one. */
export type HeaderFields = [name: string, value: string][];

/**
 * Rate-limit header fields for a decision: the de-facto `X-RateLimit-*` trio for the tightest
 * enforced limit, and the IETF draft-11 structured fields with one item per enforced limit.
 * Shadow limits are reported apart, in `X-Slidegate-Shadow`, so clients never throttle on them.
 * Entries, not a `Headers`: an admitted request copies them onto the origin's answer once.
 *
 * @example
 * new Headers(rateLimitFields(decision)).get("RateLimit"); // '"minute";r=9;t=60'
 */
export function rateLimitFields(decision: Decision): HeaderFields {
  const fields: HeaderFields = [];
  const enforced = decision.limits.filter((l) => !l.shadow);
  const shadow = decision.limits.filter((l) => l.shadow);
  if (shadow.length) fields.push(["X-Slidegate-Shadow", items(shadow)]);
  // "would have been denied" only means something on a request that was admitted
  if (decision.admitted && decision.wouldDeny.length) fields.push(["X-Slidegate-Shadow-Denied", decision.wouldDeny.join(", ")]);
  if (enforced.length === 0) return fields;
  const t = enforced.length === 1 ? enforced[0]! : tightest(enforced);
  fields.push(
    ["X-RateLimit-Limit", String(t.limit)],
    ["X-RateLimit-Remaining", String(t.remaining)],
    ["X-RateLimit-Reset", String(seconds(t.resetMs))],
    ["RateLimit-Policy", enforced.map((l) => `"${l.name}";q=${l.limit};w=${seconds(l.windowMs)}`).join(", ")],
    ["RateLimit", items(enforced)],
  );
  return fields;
}

/** Whole seconds to wait, rounded up and never below 1 (a 0 invites an instant retry storm). */
export function retryAfterSeconds(ms: number): string {
  return String(Math.max(1, seconds(ms)));
}
