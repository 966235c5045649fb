import type { GateConfig, Rule } from "../config/rate-limits.ts";
import { assertCost } from "../script/limiter.ts";
import { createDecider, type DeciderOptions, type Verdict } from "./decide.ts";
import { clientAddress, identify, readApiKey, UNKNOWN_CLIENT, type ClientAddress, type Identity } from "./identity.ts";
import { rulesFor, tierOf } from "./rules.ts";

/** Who is calling, as every later step sees it. */
export interface Caller {
  identity: Identity;
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
  | { kind: "no-rule"; caller: Caller }
  | { kind: "decided"; caller: Caller; rules: readonly Rule[]; verdict: Verdict };

/** How a request is matched against rules: the methods it counts as, and the forms of its canonical path. */
export interface Match {
  methods: readonly string[];
  /** undefined: a path with no canonical form, which every rule of its methods covers */
  paths: readonly string[] | undefined;
}

export interface RunOptions {
  /** what the request weighs against every rule it is checked against (default: each rule's own cost) */
  cost?: number;
  /** the client address, when the caller has read it already (see `clientAddress`) */
  client?: ClientAddress;
}

export interface Pipeline {
  /** The whole pipeline for a request: caller, lists, key policy, rules, one decision. */
  run(request: Request, match: Match, options?: RunOptions): Promise<Step>;
  /** One decision for an identity of the embedding application's own, over every rule of the default tier. */
  decideFor(identity: Identity, cost?: number): Promise<Step>;
  /** Forgets this isolate's cached denials of an identity (after an operator's reset or unblock). */
  forget(tag: string): void;
}

const ABSENT = { kind: "absent" } as const;

/**
 * The one request pipeline, shared by the gateway and the library: who is calling (the API
 * key, or the canonical client address), what the allow and deny lists say (before "key
 * required": a listed caller is settled either way), which rules of the caller's tier cover
 * the request, and one decision over them (the denial cache, else one Redis call). A cost
 * outside 1..limit throws before anything is asked or recorded.
 *
 * @example
 * const pipeline = createPipeline({ config, redisUrl, redisToken });
 * const step = await pipeline.run(request, { methods: ["GET"], paths: ["/v1/users"] });
 * if (step.kind === "decided") answer(step.verdict);
 */
export function createPipeline(options: DeciderOptions): Pipeline {
  const config: GateConfig = options.config;
  const decide = createDecider(options);
  const defaultRules = config.tiers.get(config.defaultTier) ?? [];

  const decideOver = async (caller: Caller, rules: readonly Rule[], cost: number | undefined): Promise<Step> => {
    if (rules.length === 0) return { kind: "no-rule", caller };
    if (cost !== undefined) for (const rule of rules) assertCost(cost, rule);
    return { kind: "decided", caller, rules, verdict: await decide(caller.identity, caller.tier, rules, cost) };
  };

  return {
    async run(request, match, { cost, client = clientAddress(request, config.ipv6Prefix) } = {}) {
      // the shape first, whatever rules match: a bad cost is a bug even where no rule applies
      if (cost !== undefined) assertCost(cost);
      const key = config.keyHeader ? readApiKey(request, config.keyHeader) : ABSENT;
      const identity = key.kind === "key" ? await identify("k", key.key) : await identify("i", client.bucket);
      const caller: Caller = { identity, tier: tierOf(config, identity.keyHash), client };
      const listed = config.access(client.address, identity.keyHash);
      if (listed === "deny") return { kind: "denylisted", caller };
      if (key.kind === "ambiguous") return { kind: "ambiguous-key", caller };
      if (listed === "allow") return { kind: "allowlisted", caller };
      if (key.kind !== "key" && config.keyRequired) return { kind: "key-required", caller };
      return decideOver(caller, rulesFor(config, caller.tier, match.methods, match.paths), cost);
    },
    async decideFor(identity, cost) {
      if (cost !== undefined) assertCost(cost);
      return decideOver({ identity, tier: config.defaultTier, client: { bucket: UNKNOWN_CLIENT } }, defaultRules, cost);
    },
    forget: decide.forget,
  };
}
