import type { GateConfig, Rule } from "./config.ts";

/** The tier of an API key's SHA-256 hex, or the default tier for unknown keys and IPs. */
export function tierOf(config: GateConfig, keyHash: string | undefined): string {
  return (keyHash && config.keyTiers.get(keyHash)) || config.defaultTier;
}

/** The rules of `tier` that apply to this method and path (a rule without either applies to all). */
export function matchRules(config: GateConfig, tier: string, method: string, path: string): Rule[] {
  const rules = config.tiers.get(tier) ?? [];
  return rules.filter((r) => (!r.methods || r.methods.has(method)) && (!r.path || r.path.test(path)));
}
