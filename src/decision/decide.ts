import type { GateConfig, Rule } from "../config/rate-limits.ts";
import { createLimiter, type Decision, type KeyLookup, LimiterError, type Reply } from "../script/limiter.ts";
import { createExpiringCache } from "./expiring-cache.ts";
import type { Identity } from "./identity.ts";

/**
 * What one decision came to, before anyone turns it into a response. `shadowFailure`
 * (admitted, denied, blocked): the store failed on a call of the same decision made for shadow
 * rules alone (its address's, say), which changes nothing: the verdict stands, unmarked, and
 * the failure is logged as a store failure and counted in the console's store failures.
 */
export type Verdict =
  /** `by`: the identity whose shadow rules would have refused it, when it is not the caller's (its address's) */
  | { kind: "admitted"; decision: Decision; redisMs: number; by?: Identity; shadowFailure?: ShadowFailure }
  | {
      kind: "denied";
      decision: Decision;
      redisMs: number;
      /** age of a decision served from the denial cache */
      elapsedMs: number;
      /** answered from the denial cache, without waiting on the store */
      fromCache: boolean;
      /** the identity whose rules refused the request, when it is not the caller's: its address's */
      by?: Identity;
      shadowFailure?: ShadowFailure;
    }
  /** ms: what is left of the block (Infinity: no end); `by`: the identity blocked, when it is not the caller's */
  | { kind: "blocked"; ms: number; redisMs: number; fromCache: boolean; by?: Identity; shadowFailure?: ShadowFailure }
  /**
   * `shadowOnly`: the call was over shadow rules alone and read no registry entry, so its
   * failure is no outcome: the request is admitted, unmarked (never "failed-open": it would
   * have been admitted whatever the store did), and the failure only logged.
   */
  | { kind: "failed"; closed: boolean; error: LimiterError; shadowOnly?: true };

/** A store failure of a decision's call for shadow rules alone, beside a call that answered. */
export interface ShadowFailure {
  error: LimiterError;
  /** whether the failed call was the address rules' (else the caller's own rules') */
  address: boolean;
}

/**
 * The store failure a verdict reports over `rules` (the step's), how it ended — by the rules'
 * fail mode, or "shadow" (shadow rules alone failed: no outcome) — and the rules of the call
 * that failed: for "shadow" beside a call that answered, the shadow rules of the failed call
 * alone (an address rule is the one with a `scope`), not those the other call decided.
 *
 * @example
 * const failure = storeFailureOf(step.verdict, step.rules);
 * if (failure) failures.record({ fail: failure.fail, rules: failure.rules.map((r) => r.name), error: failure.error.message });
 */
export function storeFailureOf<R extends Pick<Rule, "shadow" | "scope">>(
  verdict: Verdict,
  rules: readonly R[],
): { fail: "open" | "closed" | "shadow"; error: LimiterError; rules: readonly R[] } | undefined {
  if (verdict.kind === "failed") {
    if (verdict.shadowOnly) return { fail: "shadow", error: verdict.error, rules: rules.filter((r) => r.shadow) };
    return { fail: verdict.closed ? "closed" : "open", error: verdict.error, rules };
  }
  const failed = verdict.shadowFailure;
  if (!failed) return undefined;
  return { fail: "shadow", error: failed.error, rules: rules.filter((r) => r.shadow && (r.scope !== undefined) === failed.address) };
}

/** When a decision began (Date.now()) and the time it has, for each of its calls to the store. */
export interface Budget {
  startedAt: number;
  /** default: the budget of the call's own rules (`budgetMs`) */
  timeoutMs?: number;
}

/** What the registry said instead of a verdict, for an API key. */
export type RegistryAnswer =
  /** a key it does not know, and no configured tier */
  | { kind: "unknown-key" }
  | { kind: "disabled-key" }
  /** the registry puts the key in another tier: decide again over that tier's rules */
  | { kind: "other-tier"; tier: string };

export interface Decide {
  /**
   * for an address, or an identity of the application's own; `budget`: the decision's, when the
   * call is one of two (each call of a decision ends within its one budget, counted from its start)
   */
  (identity: Identity, tier: string, rules: readonly Rule[], cost?: number, key?: undefined, budget?: Budget): Promise<Verdict>;
  /** for an API key: its registry entry is read in the same call */
  (identity: Identity, tier: string, rules: readonly Rule[], cost: number | undefined, key: KeyLookup, budget?: Budget): Promise<Verdict | RegistryAnswer>;
  /** forgets this isolate's cached denials, blocks and registry refusals of an identity (after an operator's reset, unblock or registry change) */
  forget(tag: string): void;
}

export interface DeciderOptions {
  config: GateConfig;
  redisUrl: string;
  redisToken: string;
  /** the edge clock: sent to Redis with `clock: "edge"`, and the denial cache's clock */
  now?: () => number;
}

/**
 * Whether a store failure refuses a request decided over `rules`: when an enforced rule fails
 * closed. Shadow rules never change an outcome: with no enforced rule (none at all, or shadow
 * ones alone) the configuration's own `fail` decides, as for an API key asked about for its
 * registry entry alone — a call over shadow rules alone that reads no registry entry is no
 * outcome at all, and never gets here (`failedVerdict`).
 *
 * @example
 * failsClosed([{ shadow: false, fail: "closed" }, { shadow: false, fail: "open" }], config); // true
 * failsClosed([{ shadow: true, fail: "closed" }], { fail: "open" }); // false: the configuration's
 */
export function failsClosed(rules: readonly Pick<Rule, "shadow" | "fail">[], config: Pick<GateConfig, "fail">): boolean {
  if (!rules.some((r) => !r.shadow)) return config.fail === "closed";
  return rules.some((r) => !r.shadow && r.fail === "closed");
}

/**
 * The time budget of a decision over `rules` (all the rules of all its calls): the shortest
 * `timeout` among the enforced ones. Shadow rules never set it, unless there are only shadow
 * rules and no registry entry is read (then theirs: there is no outcome to protect); with no
 * enforced rule for a call that reads an API key's registry entry (`registry`), and with no
 * rule at all, the configuration's own: the registry's answer is an outcome a shadow rule must
 * not shorten or lengthen the wait for.
 *
 * @example
 * budgetMs([{ shadow: false, timeoutMs: 200 }, { shadow: true, timeoutMs: 50 }], config); // 200
 * budgetMs([{ shadow: true, timeoutMs: 50 }], { timeoutMs: 1000 }, true); // 1000: an API key's call
 */
export function budgetMs(rules: readonly Pick<Rule, "shadow" | "timeoutMs">[], config: Pick<GateConfig, "timeoutMs">, registry = false): number {
  const enforced = rules.filter((r) => !r.shadow);
  const budget = enforced.length || registry ? enforced : rules;
  return budget.length ? Math.min(...budget.map((r) => r.timeoutMs)) : config.timeoutMs;
}

/**
 * The failure of a call over `rules`: refused when an enforced rule fails closed (`failsClosed`);
 * a call over shadow rules alone that left no registry entry unread (`registry` false) is no
 * outcome — nor is an API key's call over no enforced rule whose registry entry and block a
 * full store still answered (`error.refusalsRead`): they refuse nothing, and nothing else was
 * at stake.
 *
 * @example
 * failedVerdict([{ shadow: true, fail: "closed" }], config, error, false); // { kind: "failed", closed: false, error, shadowOnly: true }
 * failedVerdict([{ shadow: false, fail: "closed" }], config, error, false); // { kind: "failed", closed: true, error }
 */
export function failedVerdict(rules: readonly Pick<Rule, "shadow" | "fail">[], config: Pick<GateConfig, "fail">, error: LimiterError, registry: boolean): Verdict {
  const unread = registry && !error.refusalsRead;
  if (!unread && (rules.length > 0 || registry) && rules.every((r) => r.shadow)) return { kind: "failed", closed: false, error, shadowOnly: true };
  return { kind: "failed", closed: failsClosed(rules, config), error };
}

/** Whether two lists hold the same rule objects, in the same order. */
function sameRules(a: readonly Rule[], b: readonly Rule[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The decision shared by the gateway and the library: the isolate's denial cache first, then
 * one Redis call, with the rules' fail mode applied when the store does not answer. Only
 * enforced rules set the fail mode and the time budget: a shadow rule is never allowed to
 * change an outcome. A denial is cached until its Retry-After, an operator's block until it
 * ends, the registry's refusal of an API key (unknown, disabled) as it stands, but none longer
 * than `denialCacheMaxAgeMs`, so an operator's reset, unblock or registry change reaches every
 * isolate within that bound.
 *
 * @example
 * const decide = createDecider({ config, redisUrl, redisToken });
 * const verdict = await decide(await identify("k", apiKey), "free", rules);
 */
export function createDecider(options: DeciderOptions): Decide {
  const { config } = options;
  const check = createLimiter({ url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now });
  // what the store refused an identity with, held for the isolate: a denial, an operator's
  // block, or the registry's refusal of an API key (unknown, disabled)
  const denials = createExpiringCache<{ decision: Decision; at: number } | { blockedMs: number; at: number } | { registry: RegistryAnswer }>(config.denialCacheSize);
  const clock = options.now ?? Date.now;
  // how many times an operator's change made the isolate forget: a reply to a call that was in
  // flight meanwhile may tell the store as it stood before the change (a denial the reset has
  // since cleared, a block lifted), and is answered but not held
  let forgets = 0;
  // The last denial-cache key, and what it was made of: a flood from one caller asks for the same
  // key request after request, and the same string again is looked up without being built and
  // hashed again. The same identity (its digest is remembered: src/decision/identity.ts), tier
  // and rule objects make the same key.
  let last: { identity: Identity; tier: string; limits: readonly Rule[]; key: string } | undefined;
  const cacheKeyOf = (identity: Identity, tier: string, limits: readonly Rule[]): string => {
    if (last?.identity === identity && last.tier === tier && sameRules(last.limits, limits)) return last.key;
    // a rule's scope too: an address rule decided in the caller's own call may share a name with a
    // rule of its tier, and a denial of the one is no answer to a request only the other covers
    const key = `${identity.tag}|${tier}|${limits.map((r) => `${r.scope ? `${r.scope}/` : ""}${r.name}*${r.cost}`).join(",")}`;
    last = { identity, tier, limits, key };
    return key;
  };

  const decide = async (identity: Identity, tier: string, rules: readonly Rule[], cost?: number, key?: KeyLookup, budget?: Budget): Promise<Verdict | RegistryAnswer> => {
    const limits = cost === undefined ? rules : rules.map((r) => ({ ...r, cost }));
    const cacheKey = cacheKeyOf(identity, tier, limits);
    const now = clock();
    const hit = denials.get(cacheKey, now);
    if (hit) {
      const held = hit.value;
      if ("registry" in held) return held.registry;
      if ("blockedMs" in held) return { kind: "blocked", ms: held.blockedMs - (now - held.at), redisMs: 0, fromCache: true };
      return { kind: "denied", decision: held.decision, redisMs: 0, elapsedMs: now - held.at, fromCache: true };
    }

    // the decision's budget when it has two calls (the pipeline's), else this call's own (`budgetMs`)
    const asked = performance.now();
    const forgetsBefore = forgets;
    let reply: Reply;
    try {
      reply = await check(identity.tag, tier, limits, budget?.timeoutMs ?? budgetMs(limits, config, key !== undefined), key, budget?.startedAt);
    } catch (error) {
      if (error instanceof LimiterError) return failedVerdict(limits, config, error, key !== undefined);
      throw error;
    }
    const redisMs = performance.now() - asked;
    const hold: typeof denials.set = (...entry) => {
      if (forgets === forgetsBefore) denials.set(...entry);
    };
    if (reply.kind === "blocked") {
      // a blocked caller's flood is answered here too, as a denied one's is: an unblock reaches
      // this isolate at once (forget), the others within denialCacheMaxAgeMs
      hold(cacheKey, now + Math.min(reply.ms, config.denialCacheMaxAgeMs), { blockedMs: reply.ms, at: now }, now);
      return { kind: "blocked", ms: reply.ms, redisMs, fromCache: false };
    }
    if (reply.kind === "unknown-key" || reply.kind === "disabled-key") {
      // a flood of one made-up or disabled key costs no Redis call per request either; a key
      // registered or enabled meanwhile is known here at once (forget), elsewhere within denialCacheMaxAgeMs
      hold(cacheKey, now + config.denialCacheMaxAgeMs, { registry: reply }, now);
      return reply;
    }
    if (reply.kind !== "decided") return reply;
    const { decision } = reply;
    if (decision.admitted) return { kind: "admitted", decision, redisMs };
    if (decision.retryAfterMs > 0) hold(cacheKey, now + Math.min(decision.retryAfterMs, config.denialCacheMaxAgeMs), { decision, at: now }, now);
    return { kind: "denied", decision, redisMs, elapsedMs: 0, fromCache: false };
  };
  const forget = (tag: string) => {
    forgets++;
    denials.forget(`${tag}|`);
  };
  return Object.assign(decide, { forget }) as Decide;
}
