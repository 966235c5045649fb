import { canonicalPath } from "./canonical.ts";
import type { GateConfig, Rule } from "./config.ts";

/** The tier of an API key's SHA-256 hex, or the default tier for unknown keys and IPs. */
export function tierOf(config: GateConfig, keyHash: string | undefined): string {
  return (keyHash && config.keyTiers.get(keyHash)) || config.defaultTier;
}

/**
 * The rules of `tier` that apply to a request handled as any of `methods`, at any of `paths`
 * (the forms of its canonical path): a rule without methods or path applies to all, and a
 * rule applies when any pair matches — covering more, never less.
 *
 * @example
 * rulesFor(config, "default", ["HEAD", "GET"], ["/V1/users"]); // the GET rules on "/v1/*"
 */
export function rulesFor(config: GateConfig, tier: string, methods: readonly string[], paths: readonly string[]): Rule[] {
  const rules = config.tiers.get(tier) ?? [];
  return rules.filter((r) => (!r.methods || methods.some((m) => r.methods!.has(m))) && (!r.path || paths.some((p) => r.path!.test(p))));
}

/**
 * The rules of `tier` for a method and a raw path: the path is made canonical first, and HEAD
 * counts as GET. A path the gate would refuse (an encoded slash, say) is matched by every
 * rule of its method.
 */
export function matchRules(config: GateConfig, tier: string, method: string, path: string): Rule[] {
  const upper = method.toUpperCase();
  const methods = upper === "HEAD" ? [upper, "GET"] : [upper];
  const canonical = canonicalPath(path);
  if (!canonical.ok) return (config.tiers.get(tier) ?? []).filter((r) => !r.methods || methods.some((m) => r.methods!.has(m)));
  return rulesFor(config, tier, methods, canonical.matchOn);
}
