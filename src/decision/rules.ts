import type { GateConfig, Rule } from "../config/rate-limits.ts";
import { ANY_METHOD } from "../http/canonical.ts";

/** The tier of an API key's SHA-256 hex, or the default tier for unknown keys and IPs. */
export function tierOf(config: GateConfig, keyHash: string | undefined): string {
  return (keyHash && config.keyTiers.get(keyHash)) || config.defaultTier;
}

/**
 * The rules of `tier` that apply to a request handled as any of `methods`, at any of `paths`
 * (the forms of its canonical path; undefined for a path that has none, which every rule
 * covers): a rule without methods or path applies to all, and a rule applies when any pair
 * matches — covering more, never less.
 *
 * @example
 * rulesFor(config, "default", ["HEAD", "GET"], ["/V1/users"]); // the GET rules on "/v1/*"
 */
export function rulesFor(config: GateConfig, tier: string, methods: readonly string[], paths: readonly string[] | undefined): Rule[] {
  return matching(tierRules(config, tier), methods, paths);
}

/** The rules of `tier`: a tier the registry names but this configuration lacks is limited by the default tier's. */
export function tierRules(config: GateConfig, tier: string): readonly Rule[] {
  return config.tiers.get(tier) ?? config.tiers.get(config.defaultTier) ?? [];
}

/** Of `rules`, those that apply to a request handled as any of `methods` (`ANY_METHOD`: any at all), at any of `paths` (as for `rulesFor`). */
export function matching<R extends Rule>(rules: readonly R[], methods: readonly string[], paths: readonly string[] | undefined): R[] {
  return rules.filter((r) => (!r.methods || methods.some((m) => m === ANY_METHOD || r.methods!.has(m))) && (!r.path || !paths || paths.some((p) => r.path!.test(p))));
}
