import type { TurnedAway } from "./denial-log.ts";

/**
 * What a decision came to. `failed-shadow`: admitted while the store failed, over shadow rules
 * alone, which admit whatever the store does: no fail-open (nothing enforced went unread), yet
 * an outage an operator rolling out shadow rules must see, or its shadow-denied counts would go
 * quiet for want of answers, not of callers over the limit.
 */
export type Outcome = "admitted" | "denied" | "shadow-denied" | "failed-open" | "failed-closed" | "failed-shadow" | "blocked" | "allowlisted" | TurnedAway;

export interface DataPoint {
  outcome: Outcome;
  tier: string;
  rules: readonly string[];
  tag: string;
  redisMs?: number;
  blockedForMs?: number;
  /** requests this point stands for (default 1): denials are written as counted summaries */
  count?: number;
}

export type WritePoint = (point: DataPoint) => void;

/** A tag's first letter names its identity's kind; a summary of many identities has no tag, and no kind. */
const KINDS: { [first: string]: string } = { k: "key", i: "ip", u: "user" };

/**
 * Workers Analytics Engine data points, when a dataset is bound (`SLIDEGATE_METRICS`): one per
 * admitted or failed decision, and refusals as the denial log counts them, one point per
 * summary weighted by its count. writeDataPoint queues the point and returns at once, so the
 * response is never held up by it.
 *
 * Columns: blob1 outcome, blob2 tier, blob3 rules (comma-separated), blob4 identity kind
 * ("key" | "ip" | "user"; "" for a summary of many); double1 Redis latency in ms (0 without a
 * Redis call), double2 what was left of a block in ms, double3 how many requests the point
 * stands for (1, or a summary's count); index1 the identity's hashed tag (never the raw key or IP).
 *
 * @example
 * const record = createMetrics(env.SLIDEGATE_METRICS);
 * record({ outcome: "admitted", tier: "free", rules: ["default"], tag, redisMs: 1.8 });
 */
export function createMetrics(dataset: AnalyticsEngineDataset | undefined): WritePoint {
  if (!dataset) return () => {};
  return (p) =>
    dataset.writeDataPoint({
      blobs: [p.outcome, p.tier, p.rules.join(","), KINDS[p.tag[0] ?? ""] ?? ""],
      doubles: [p.redisMs ?? 0, p.blockedForMs ?? 0, p.count ?? 1],
      indexes: [p.tag],
    });
}
