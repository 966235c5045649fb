import { parseRateLimits } from "../../src/config/rate-limits.ts";
import { canonicalPath } from "../../src/http/canonical.ts";

/**
 * A path crafted for many match forms (encoded twice: ASP.NET session data, a script's
 * segment, a ? and # and ; to cut at, spaces and dots to trim, a format) around a long run of
 * İ, which a case-insensitive rule reads as i, worked out and matched against a hundred such
 * rules: every form is tested against every rule. Run in Node and in workerd alike, whose
 * regular-expression engines differ.
 *
 * @example
 * const { matched, ms } = matchCraftedPath();
 * expect(matched).toEqual([]);
 * expect(ms).toBeLessThan(2000);
 */
export function matchCraftedPath(): { matched: string[]; ms: number } {
  const path = `/%2528S%2528x%2529%2529/a.php/x/${"%C4%B0".repeat(10_000)}/y%2520/%2523;p/b.json.`;
  const many = Array.from({ length: 100 }, (_, i) => ({ name: `r${i}`, limit: 1, window: "1s", path: i % 2 ? `/a/*/b${i}/*/c/*.php` : `/x${i}/*/i/*/y` }));
  const config = parseRateLimits({ rules: many, denialCacheSize: 1000 });
  if (!config.ok) throw new Error(config.errors.join("\n"));
  const rules = config.config.tiers.get("default")!;
  const started = performance.now();
  const c = canonicalPath(path);
  if (!c.ok) throw new Error(c.refused);
  const matched = rules.filter((rule) => c.matchOn.some((form) => rule.path!.test(form))).map((rule) => rule.name);
  return { matched, ms: performance.now() - started };
}
