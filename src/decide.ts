import { createBlockCache } from "./block-cache.ts";
import type { GateConfig, Rule } from "./config.ts";
import type { Identity } from "./identity.ts";
import { createLimiter, LimiterError, type Decision } from "./limiter.ts";

/** What one decision came to, before anyone turns it into a response. */
export type Verdict =
  | { kind: "admitted"; decision: Decision; redisMs: number }
  | { kind: "denied"; decision: Decision; redisMs: number; /** age of a decision served from the block cache */ elapsedMs: number }
  | { kind: "blocked"; ms: number; redisMs: number }
  | { kind: "failed"; closed: boolean; error: LimiterError };

export type Decide = (identity: Identity, tier: string, rules: readonly Rule[], cost?: number) => Promise<Verdict>;

export interface DeciderOptions {
  config: GateConfig;
  redisUrl: string;
  redisToken: string;
  /** the edge clock, used only with `clock: "edge"` */
  now?: () => number;
}

/**
 * The decision shared by the gateway and the library: the isolate's block cache first, then
 * one Redis call, with the rules' fail mode applied when the store does not answer.
 *
 * @example
 * const decide = createDecider({ config, redisUrl, redisToken });
 * const verdict = await decide(await identify("k", apiKey), "free", rules);
 */
export function createDecider(options: DeciderOptions): Decide {
  const { config } = options;
  const check = createLimiter({ url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now });
  const blocked = createBlockCache<{ decision: Decision; at: number }>(config.blockCacheSize);

  return async (identity, tier, rules, cost) => {
    const limits = cost === undefined ? rules : rules.map((r) => ({ ...r, cost }));
    const cacheKey = `${identity.tag}|${tier}|${limits.map((r) => `${r.name}*${r.cost}`).join(",")}`;
    const now = Date.now();
    const hit = blocked.get(cacheKey, now);
    if (hit) return { kind: "denied", decision: hit.value.decision, redisMs: 0, elapsedMs: now - hit.value.at };

    const asked = performance.now();
    let decision: Decision;
    try {
      decision = await check(identity.tag, tier, limits, Math.min(...limits.map((r) => r.timeoutMs)));
    } catch (error) {
      if (error instanceof LimiterError) return { kind: "failed", closed: limits.some((r) => r.fail === "closed"), error };
      throw error;
    }
    const redisMs = performance.now() - asked;
    if (decision.blockedMs > 0) return { kind: "blocked", ms: decision.blockedMs, redisMs };
    if (decision.admitted) return { kind: "admitted", decision, redisMs };
    if (decision.retryAfterMs > 0) blocked.set(cacheKey, now + decision.retryAfterMs, { decision, at: now });
    return { kind: "denied", decision, redisMs, elapsedMs: 0 };
  };
}
