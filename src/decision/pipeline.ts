import type { GateConfig, Rule } from "../config/rate-limits.ts";
import { assertCost, CostError, type Decision, LimiterError } from "../script/limiter.ts";
import { type Budget, budgetMs, createDecider, type DeciderOptions, failedVerdict, failsClosed, type Verdict } from "./decide.ts";
import { createExpiringCache } from "./expiring-cache.ts";
import { type ClientAddress, clientAddress, type Identity, identify, readApiKey, UNKNOWN_CLIENT } from "./identity.ts";
import { matching, rulesFor, tierOf } from "./rules.ts";

/** Who is calling, as every later step sees it. */
export interface Caller {
  identity: Identity;
  /** the tier that decided (for an API key, the registry's when it has one) */
  tier: string;
  /** the client address in canonical form, and the bucket it counts in */
  client: ClientAddress;
}

/** Where a request stands after the pipeline: settled before any rule, or decided over the rules that cover it. */
export type Step =
  | { kind: "ambiguous-key"; caller: Caller }
  | { kind: "denylisted"; caller: Caller }
  | { kind: "allowlisted"; caller: Caller }
  | { kind: "key-required"; caller: Caller }
  /** `address`: the client address's identity, which the refusal is counted as (a made-up key names nobody) */
  | { kind: "unknown-key"; caller: Caller; address: Identity; addressFailure?: RefusedBeside }
  | { kind: "disabled-key"; caller: Caller; addressFailure?: RefusedBeside }
  | { kind: "no-rule"; caller: Caller }
  | { kind: "decided"; caller: Caller; rules: readonly Rule[]; verdict: Verdict };

/**
 * The store failure of the address rules' call beside a key's request that the key's own call
 * refused (a key nobody knows, a disabled key): the refusal stands whatever the store did, and
 * the failure is logged and counted all the same, or an outage would go unseen under a flood of
 * made-up keys.
 */
export interface RefusedBeside {
  error: LimiterError;
  rules: readonly Rule[];
}

/** How a request is matched against rules: the methods it counts as, and the forms of its canonical path. */
export interface Match {
  methods: readonly string[];
  /** undefined: a path with no canonical form, or one whose query routes it to a path with none (src/http/query-routes.ts), which every rule of its methods covers */
  paths: readonly string[] | undefined;
}

export interface RunOptions {
  /** what the request weighs against every rule it is checked against (default: each rule's own cost) */
  cost?: number;
  /** the client address, when the caller has read it already (see `clientAddress`) */
  client?: ClientAddress;
  /**
   * an identity of the application's own (a user id) to count the request against instead of
   * its API key or address; the rules that cover the request, the lists and the address rules
   * (by its client address) apply as they do to any request
   */
  identity?: string;
}

export interface Pipeline {
  /** The whole pipeline for a request: caller, lists, key policy, rules, one decision. */
  run(request: Request, match: Match, options?: RunOptions): Promise<Step>;
  /** One decision for an identity of the embedding application's own, over every rule of the default tier. */
  decideFor(identity: Identity, cost?: number): Promise<Step>;
  /** Forgets what this isolate cached of an identity: its denials, its registry tier (after an operator's change). */
  forget(tag: string): void;
}

const ABSENT = { kind: "absent" } as const;
/** The scope (in Redis keys) of the rules a request answers to per client address, whatever its key. */
export const ADDRESS_SCOPE = "@address";
/** How often the registry may move a key between tiers within one decision before the store counts as failing. */
const TIER_MOVES = 2;

/** `decision` as it stands `ms` later: its waits and resets less that time. */
export function aged(decision: Decision, ms: number): Decision {
  if (ms <= 0) return decision;
  return { ...decision, retryAfterMs: Math.max(0, decision.retryAfterMs - ms), limits: decision.limits.map((l) => ({ ...l, resetMs: Math.max(0, l.resetMs - ms) })) };
}

/** A verdict's decision as of now: a cached denial's waits and resets, less the time it has been held. */
const current = (verdict: Extract<Verdict, { decision: Decision }>) => aged(verdict.decision, verdict.kind === "denied" ? verdict.elapsedMs : 0);

/** The key's decision and its address's as one: admitted only when both are. */
const joined = (k: Decision, a: Decision): Decision => ({
  admitted: k.admitted && a.admitted,
  limits: [...k.limits, ...a.limits],
  retryAfterMs: Math.max(k.retryAfterMs, a.retryAfterMs),
  wouldDeny: [...k.wouldDeny, ...a.wouldDeny],
});

type CachedDenial = Extract<Verdict, { kind: "denied" }>;

/**
 * Joined denials of a key's and its address's cached decisions, held by the key's decision (so
 * they go when the cache lets it go): a caller over both limits repeats the same two decisions
 * request after request, and the 429's headers and body are worked out once per decision
 * (src/http/answers.ts), which a decision joined afresh each time never reused.
 */
const joins = new WeakMap<Decision, { address: Decision; apart: number; decision: Decision }>();

/** Both sides' cached denials as one, joined as of the later of the two and aged from there, as one cached denial is. */
function joinedDenial(key: CachedDenial, address: CachedDenial): Verdict {
  const elapsedMs = Math.min(key.elapsedMs, address.elapsedMs);
  const apart = key.elapsedMs - address.elapsedMs;
  let join = joins.get(key.decision);
  if (join?.address !== address.decision || join.apart !== apart) {
    join = { address: address.decision, apart, decision: joined(aged(key.decision, key.elapsedMs - elapsedMs), aged(address.decision, address.elapsedMs - elapsedMs)) };
    joins.set(key.decision, join);
  }
  return { kind: "denied", decision: join.decision, redisMs: 0, elapsedMs, fromCache: true };
}

/**
 * A verdict of the address's rules, named as the address's when it refuses: the logs and
 * figures count a refusal against the identity that earned it, so a caller who rotates keys
 * from one address is one caller there too, not one per key.
 */
function fromAddress(verdict: Verdict, address: Identity): Verdict {
  if (verdict.kind === "denied" || verdict.kind === "blocked") return { ...verdict, by: address };
  // an address rule rolled out in shadow is logged per identity too: a key per request must not make it a line per request
  if (verdict.kind === "admitted" && verdict.decision.wouldDeny.length) return { ...verdict, by: address };
  return verdict;
}

/**
 * One verdict from the key's decision and its address's (decided as `addressIdentity`): an
 * operator's block first, then a denial (the request is refused), then a failure, then an
 * admission (the fail-open mark kept). Each call recorded what it admitted on its own: a
 * request refused by one side is still counted by the other. A refusal is the key's when the
 * key's side refused, else the address's; so is a shadow denial. A side decided over shadow
 * rules alone (and no registry entry) whose call failed (`shadowOnly`) is no outcome: the
 * other side's verdict stands, unmarked, as a shadow rule's failure in the same call leaves
 * it, with the failure kept for the log (`shadowFailure`).
 */
function combine(key: Verdict, address: Verdict, addressIdentity: Identity): Verdict {
  if (address.kind === "failed" && address.shadowOnly && key.kind !== "failed") return { ...key, shadowFailure: { error: address.error, address: true } };
  if (key.kind === "failed" && key.shadowOnly && address.kind !== "failed")
    return { ...(fromAddress(address, addressIdentity) as Exclude<Verdict, { kind: "failed" }>), shadowFailure: { error: key.error, address: false } };
  const either = (kind: Verdict["kind"]) => (key.kind === kind ? key : address.kind === kind ? fromAddress(address, addressIdentity) : undefined);
  const blocked = either("blocked");
  if (blocked) return blocked;
  if (key.kind === "admitted" || key.kind === "denied") {
    // both from the isolate's caches (a refusal the key's, as both sides refused): the flood's path
    if (key.kind === "denied" && key.fromCache && address.kind === "denied" && address.fromCache) return joinedDenial(key, address);
    if (address.kind === "admitted" || address.kind === "denied") {
      // each side as of now: a denial from the cache has aged by its own elapsedMs, a fresh one not
      const [k, a] = [current(key), current(address)];
      const decision = joined(k, a);
      const redisMs = Math.max(key.redisMs, address.redisMs);
      if (decision.admitted) return { kind: "admitted", decision, redisMs, ...(k.wouldDeny.length === 0 && a.wouldDeny.length ? { by: addressIdentity } : {}) };
      return { kind: "denied", decision, redisMs, elapsedMs: 0, fromCache: false, ...(k.admitted ? { by: addressIdentity } : {}) };
    }
  }
  const denied = either("denied");
  if (denied) return denied;
  if (key.kind === "failed" && address.kind === "failed") {
    // a side of shadow rules alone fails open, unmarked: the other's failure is the decision's
    if (key.shadowOnly !== address.shadowOnly) return key.shadowOnly ? address : key;
    return { ...key, closed: key.closed || address.closed };
  }
  return either("failed") ?? key;
}

/**
 * `verdict`, or the failure of a call over `rules` (an address's: no registry) still
 * unanswered at `deadline`: for a call that was given a longer budget than its decision has
 * (an address's call sent beside a key's first, with its own rules' budget, before the
 * registry said the key's tier). The call itself runs on to its own budget; the decision
 * does not wait.
 */
function until(verdict: Promise<Verdict>, deadline: number, timeoutMs: number, rules: readonly Rule[], config: GateConfig): Promise<Verdict> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<Verdict>((resolve) => {
    timer = setTimeout(
      () => {
        const error = new LimiterError(`rate-limit store failed: Timed out: the decision's ${timeoutMs} ms were spent before the store answered.`);
        resolve(failedVerdict(rules, config, error, false));
      },
      Math.max(0, deadline - Date.now()),
    );
  });
  return Promise.race([verdict, late]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}

/**
 * The one request pipeline, shared by the gateway and the library: who is calling (the API
 * key, or the canonical client address), what the allow and deny lists say (before "key
 * required": a listed caller is settled either way), which rules of the caller's tier cover
 * the request, and one decision over them (the denial cache, else one Redis call, which for an
 * API key also reads its registry entry). A cost outside 1..limit throws before anything is
 * asked or recorded; for an API key the limit is the key's own (its registry entry may
 * override it), read by the key's call, which records nothing for a cost above it.
 *
 * An API key's tier is the registry's when it has an entry, else `keys`', else the default
 * tier — or, for a key nobody knows, what `identity.unknownKeys` says. Each isolate remembers
 * a key's registry tier for `denialCacheMaxAge` to send the right rules at once; when the
 * registry has moved the key, the script says so and the decision is asked again (one more
 * round trip, after a change only). `addressRules` are decided per client address in a call
 * of their own beside an API key's (the two keys live under different hash tags), or in the
 * same call for a caller known by address — which a key nobody knows is, with `unknownKeys:
 * "ip"`: the default tier's rules and the address rules in one call, all-or-nothing, after the
 * key's call has found no registry entry. A key without a configured tier that this isolate
 * has not seen the registry hold within `denialCacheMaxAge` therefore costs one round trip
 * more: its address rules' call waits for the key's (on the key's first request in an
 * isolate, and its first after going unused there for `denialCacheMaxAge`).
 *
 * @example
 * const pipeline = createPipeline({ config, redisUrl, redisToken });
 * const step = await pipeline.run(request, { methods: ["GET"], paths: ["/v1/users"] });
 * const answered = answer(step, config.keyHeader); // src/http/answers.ts
 */
export function createPipeline(options: DeciderOptions): Pipeline {
  const config: GateConfig = options.config;
  const decide = createDecider(options);
  const clock = options.now ?? Date.now;
  const defaultRules = config.tiers.get(config.defaultTier) ?? [];
  // key tag → the tier the registry last put it in (a hint: the script checks it on every call)
  const registryTiers = createExpiringCache<string>(config.denialCacheSize);
  // operators' changes served here so far: a registry answer asked for before one is not
  // remembered after it (it may tell of an entry the change has just removed or moved)
  let forgets = 0;
  const addressRules = config.addressRules.map((r) => ({ ...r, scope: ADDRESS_SCOPE }));

  const checkCost = (cost: number | undefined, rules: readonly Rule[]) => {
    if (cost !== undefined) for (const rule of rules) assertCost(cost, rule);
  };

  /**
   * A key's own limit below the caller's cost: the script denied the request without
   * recording it (retry -1: it can never fit), and it is the caller's mistake, as a cost above
   * a configured limit is.
   */
  const refuseOverweight = (cost: number, decision: Decision) => {
    const over = decision.limits.find((l) => !l.shadow && l.retryMs < 0);
    if (over) throw new CostError(`slidegate: cost must be a whole number from 1 to ${over.limit} (the limit of "${over.name}" for this key), not ${cost}`);
  };

  /** The caller's address identity, or undefined when no address rule applies to the request. */
  const addressIdentity = async (client: ClientAddress, rules: readonly Rule[]) => (rules.length ? identify("i", client.bucket) : undefined);

  /** A caller known by address: its tier's rules and the address rules, in one call. */
  async function decideAddress(caller: Caller, match: Match, cost: number | undefined, budget?: Budget): Promise<Step> {
    const rules = [...rulesFor(config, caller.tier, match.methods, match.paths), ...matching(addressRules, match.methods, match.paths)];
    if (rules.length === 0) return { kind: "no-rule", caller };
    checkCost(cost, rules);
    return { kind: "decided", caller, rules, verdict: await decide(caller.identity, caller.tier, rules, cost, undefined, budget) };
  }

  /**
   * A caller known by API key: the registry and the key's rules in one call, its address rules
   * beside it — at once for a key this isolate knows, after the key's call for one it may find
   * unknown under `unknownKeys: "ip"`, which is then decided as its address (`decideAddress`).
   */
  async function decideKey(caller: Caller, match: Match, cost: number | undefined): Promise<Step> {
    const hash = caller.identity.keyHash!;
    const configured = config.keyTiers.get(hash);
    const fallback = configured ?? (config.unknownKeys === "defaultTier" ? config.defaultTier : "");
    const remembered = registryTiers.get(caller.identity.tag, clock());
    const forgetsBefore = forgets;
    /** the registry's tier for the key, kept for `denialCacheMaxAge` unless an operator's change came since the decision began */
    const remember = (t: string) => {
      if (forgets !== forgetsBefore) return;
      const now = clock();
      registryTiers.set(caller.identity.tag, now + config.denialCacheMaxAgeMs, t, now);
    };
    let tier = remembered?.value ?? configured ?? config.defaultTier;
    // (a tier the registry names but this configuration lacks: the default tier's rules)
    const rulesOf = (t: string) => rulesFor(config, t, match.methods, match.paths);
    let rules = rulesOf(tier);
    const visited = [rules];
    const onAddressRules = matching(addressRules, match.methods, match.paths);
    checkCost(cost, onAddressRules);
    // A key the script may answer as unknown, with unknownKeys "ip": one without a configured
    // tier that this isolate has not seen the registry hold within denialCacheMaxAge. Such a key
    // is decided as its address, as a caller without a key is: the default tier's rules and the
    // address rules in one call, all-or-nothing. Its address rules are therefore not asked
    // beside the key's call (that call would record a request the other then refuses, and under
    // contention fewer than the limit would be admitted): the key's call goes first, and for a
    // key the registry does hold, the address rules' call follows it (one more round trip, for
    // the key's first request here and its first after a quiet denialCacheMaxAge: every answer
    // of the store's that the registry holds the key is remembered that long).
    const asAddressIfUnknown = config.unknownKeys === "ip" && configured === undefined;
    const mayBeUnknown = asAddressIfUnknown && remembered === undefined;
    // A cost of the caller's own is held to the key's own limits, which only the key's call
    // reads (its registry entry may override a rule's limit, or move it to another tier), or
    // to the default tier's, for a key nobody knows; to the configured limits of the key's
    // shadow rules, which must not change an outcome, so are checked before anything is
    // recorded; and to the configured limits when the key's call fails. The address's call
    // then waits for the key's, so a cost refused anywhere is recorded nowhere. Rules' own
    // costs fit every tier's rules (the configuration checks them): both calls go at once.
    const overShadow = () => (cost === undefined ? undefined : rules.find((r) => r.shadow && cost > r.limit));
    // One time budget for the decision, counted from its start, for every call of it: the key's
    // (however often the registry moves the key), its address's beside it, and the calls that
    // wait on the key's (its address's, for a cost of the caller's own or a key that may be
    // unknown; a key nobody knows, decided as its address). It is the shortest timeout among
    // the enforced rules of both calls (`budgetMs`): a key's rule that fails closed within
    // 200 ms is not kept waiting by an address rule's 3 s, nor the other way round.
    const lookup = { fallback, startedAt: Date.now() };
    /** the decision's budget, with the key's rules as they stand (`keyRules`) */
    const budgetWith = (keyRules: readonly Rule[]) => ({ startedAt: lookup.startedAt, timeoutMs: budgetMs([...keyRules, ...onAddressRules], config, true) });
    const address = await addressIdentity(caller.client, onAddressRules);
    // The address rules' call sent beside the key's first, before the registry has said the
    // key's tier: the budget the tier this isolate took the key for gives it may be shorter than
    // the one of the tier the registry moves it to, and a call cut short cannot be lengthened.
    // So it runs to its own rules' budget (or the decision's, when that is longer), and the
    // decision stops waiting for it at its own deadline, whichever tier it ends in (`until`).
    const eager = address && cost === undefined && !mayBeUnknown ? budgetWith(rules) : undefined;
    let askedWith = eager && { startedAt: eager.startedAt, timeoutMs: Math.max(eager.timeoutMs, budgetMs(onAddressRules, config)) };
    let onAddress = askedWith ? decide(address!, ADDRESS_SCOPE, onAddressRules, cost, undefined, askedWith) : undefined;
    /** the address rules' verdict, within the decision's budget as the key's rules (`keyRules`) leave it */
    const addressVerdict = (keyRules: readonly Rule[]) => {
      const current = budgetWith(keyRules);
      if (!onAddress || !askedWith) {
        askedWith = current;
        onAddress = decide(address!, ADDRESS_SCOPE, onAddressRules, cost, undefined, current);
        return onAddress;
      }
      // asked beside the key's first call, with the longer of its own rules' budget and the
      // decision's as it then stood: the decision, in whatever tier it ends, ends with its own
      return current.timeoutMs < askedWith.timeoutMs ? until(onAddress, current.startedAt + current.timeoutMs, current.timeoutMs, onAddressRules, config) : onAddress;
    };
    /** the address rules' verdict beside a refusal of the key's call: its failure, if it failed */
    const refusedBeside = async (keyRules: readonly Rule[]): Promise<RefusedBeside | undefined> => {
      if (!address) return undefined;
      const beside = await addressVerdict(keyRules);
      return beside.kind === "failed" ? { error: beside.error, rules: onAddressRules } : undefined;
    };
    /** the isolate has seen the registry hold the key: its next requests ask its address rules at once */
    const known = () => {
      if (asAddressIfUnknown) remember(tier);
    };
    for (let moves = 0; ; moves++) {
      // a shadow rule of the tier as this isolate knows it refuses the cost: first the key's
      // tier, from a call about its registry entry alone, which records nothing
      const over = overShadow();
      const verdict = await decide(caller.identity, tier, over ? [] : rules, cost, lookup, budgetWith(rules));
      if (verdict.kind === "other-tier" && moves < TIER_MOVES) {
        tier = verdict.tier;
        remember(tier);
        rules = rulesOf(tier);
        visited.push(rules);
        continue;
      }
      // an answer of the store's about the key's entry (a cached denial is as old as its decision)
      if (verdict.kind === "admitted" || (verdict.kind === "denied" && !verdict.fromCache)) known();
      // the tier is the key's: its shadow rule refuses the cost
      if (over && verdict.kind === "admitted") assertCost(cost, over);
      if (cost !== undefined && verdict.kind === "denied") refuseOverweight(cost, verdict.decision);
      // the key's own limits could not be read: its configured ones hold
      if (verdict.kind === "failed" || verdict.kind === "other-tier") checkCost(cost, rules);
      if (verdict.kind === "other-tier") {
        const error = new LimiterError("the registry moved the key between tiers while it was decided");
        // the rules of every tier the key was moved through say how a failure ends, not the global fail
        const failed: Verdict = { kind: "failed", closed: visited.some((r) => failsClosed(r, config)), error };
        const decided = { ...caller, tier };
        if (!address) return { kind: "decided", caller: decided, rules, verdict: failed };
        return {
          kind: "decided",
          caller: decided,
          rules: [...rules, ...onAddressRules],
          verdict: combine(failed, await addressVerdict(rules), address),
        };
      }
      if (verdict.kind === "unknown-key") {
        if (config.unknownKeys !== "ip") {
          // the address's own call has counted the request either way
          const addressFailure = await refusedBeside(rules);
          return { kind: "unknown-key", caller, address: address ?? (await identify("i", caller.client.bucket)), ...(addressFailure && { addressFailure }) };
        }
        const byAddress: Caller = { ...caller, identity: address ?? (await identify("i", caller.client.bucket)), tier: config.defaultTier };
        // as a caller without a key from that address: one call, all-or-nothing
        if (!onAddress || !address) return decideAddress(byAddress, match, cost, { startedAt: lookup.startedAt });
        // A key this isolate took for known (the registry held it within denialCacheMaxAge, and
        // has dropped it since): its address rules' call went beside the key's and has counted
        // the request, so the default tier's rules are decided as the address in a call of
        // their own, and a request refused by one of the two calls is still counted by the
        // other. Only until this isolate learns it (here): the next ones are decided as the
        // address in one call.
        registryTiers.forget(caller.identity.tag);
        const tierRules = rulesFor(config, config.defaultTier, match.methods, match.paths);
        if (tierRules.length === 0) return { kind: "decided", caller: byAddress, rules: onAddressRules, verdict: await addressVerdict(tierRules) };
        checkCost(cost, tierRules);
        const [asAddress, floor] = await Promise.all([
          decide(byAddress.identity, config.defaultTier, tierRules, cost, undefined, budgetWith(tierRules)),
          addressVerdict(tierRules),
        ]);
        return { kind: "decided", caller: byAddress, rules: [...tierRules, ...onAddressRules], verdict: combine(asAddress, floor, address) };
      }
      if (verdict.kind === "disabled-key") {
        const addressFailure = await refusedBeside(rules);
        return { kind: "disabled-key", caller, ...(addressFailure && { addressFailure }) };
      }
      const decided = { ...caller, tier };
      if (!address) return rules.length || verdict.kind !== "admitted" ? { kind: "decided", caller: decided, rules, verdict } : { kind: "no-rule", caller: decided };
      return {
        kind: "decided",
        caller: decided,
        rules: [...rules, ...onAddressRules],
        verdict: combine(verdict, await addressVerdict(rules), address),
      };
    }
  }

  /** A request counted against an identity of the application's own, in the default tier; its address rules beside it. */
  async function decideOwn(own: Identity, request: Request, client: ClientAddress, match: Match, cost: number | undefined): Promise<Step> {
    const caller: Caller = { identity: own, tier: config.defaultTier, client };
    // the lists hold the API key the request carries, whoever the application counts it as: a
    // key on the deny list is not let through by a session's user id, nor by being sent twice
    const key = config.keyHeader ? readApiKey(request, config.keyHeader) : ABSENT;
    const listed = config.access(client.address, key.kind === "key" ? (await identify("k", key.key)).keyHash : undefined);
    if (listed === "deny") return { kind: "denylisted", caller };
    if (key.kind === "ambiguous") return { kind: "ambiguous-key", caller };
    if (listed === "allow") return { kind: "allowlisted", caller };
    const rules = rulesFor(config, config.defaultTier, match.methods, match.paths);
    const onAddress = matching(addressRules, match.methods, match.paths);
    checkCost(cost, rules);
    checkCost(cost, onAddress);
    const address = await addressIdentity(client, onAddress);
    if (!address) return rules.length ? { kind: "decided", caller, rules, verdict: await decide(own, config.defaultTier, rules, cost) } : { kind: "no-rule", caller };
    if (rules.length === 0) return { kind: "decided", caller, rules: onAddress, verdict: fromAddress(await decide(address, ADDRESS_SCOPE, onAddress, cost), address) };
    // two calls, one budget: the shortest timeout among the enforced rules of both
    const budget = { startedAt: Date.now(), timeoutMs: budgetMs([...rules, ...onAddress], config) };
    const [mine, floor] = await Promise.all([decide(own, config.defaultTier, rules, cost, undefined, budget), decide(address, ADDRESS_SCOPE, onAddress, cost, undefined, budget)]);
    return { kind: "decided", caller, rules: [...rules, ...onAddress], verdict: combine(mine, floor, address) };
  }

  return {
    async run(request, match, { cost, client = clientAddress(request, config.ipv6Prefix), identity: own } = {}) {
      // the shape first, whatever rules match: a bad cost is a bug even where no rule applies
      if (cost !== undefined) assertCost(cost);
      if (own !== undefined) return decideOwn(await identify("u", own), request, client, match, cost);
      const key = config.keyHeader ? readApiKey(request, config.keyHeader) : ABSENT;
      const identity = key.kind === "key" ? await identify("k", key.key) : await identify("i", client.bucket);
      const caller: Caller = { identity, tier: tierOf(config, identity.keyHash), client };
      const listed = config.access(client.address, identity.keyHash);
      if (listed === "deny") return { kind: "denylisted", caller };
      if (key.kind === "ambiguous") return { kind: "ambiguous-key", caller };
      if (listed === "allow") return { kind: "allowlisted", caller };
      if (key.kind !== "key" && config.keyRequired) return { kind: "key-required", caller };
      return key.kind === "key" ? decideKey(caller, match, cost) : decideAddress(caller, match, cost);
    },
    async decideFor(identity, cost) {
      if (cost !== undefined) assertCost(cost);
      const caller: Caller = { identity, tier: config.defaultTier, client: { bucket: UNKNOWN_CLIENT } };
      if (defaultRules.length === 0) return { kind: "no-rule", caller };
      checkCost(cost, defaultRules);
      return { kind: "decided", caller, rules: defaultRules, verdict: await decide(identity, config.defaultTier, defaultRules, cost) };
    },
    forget(tag) {
      forgets++;
      decide.forget(tag);
      registryTiers.forget(tag);
    },
  };
}
