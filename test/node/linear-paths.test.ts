import { describe, expect, it } from "vitest";
import { parseRateLimits, pathPattern } from "../../src/config/rate-limits.ts";
import { canonicalPath } from "../../src/http/canonical.ts";

// The library runs the canonical request in Node as well as in workerd, whose regular
// expressions do not backtrack alike: a pattern that is linear in one can be quadratic in
// the other. The same inputs as the Worker-side tests, in Node.
describe("long crafted paths in Node", () => {
  it("are worked out in time linear in their length: runs of dots", () => {
    const started = performance.now();
    for (const p of [`/${".".repeat(65_536)}a`, `/${"a.".repeat(32_768)}!`, `/x${".".repeat(65_536)}/y`]) expect(canonicalPath(p).ok).toBe(true);
    expect(performance.now() - started).toBeLessThan(2000); // linear: a few ms; quadratic: seconds
  });

  it("are matched against a glob of several stars in time linear in their length", () => {
    const pattern = pathPattern("/a/*/b/*/b/*/c", false);
    const started = performance.now();
    expect(pattern.test(`/a/${"/b/".repeat(5000)}x`)).toBe(false);
    expect(pattern.test(`/a/${"/b/".repeat(5000)}/c`)).toBe(true);
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

// A path crafted for many match forms (encoded twice: ASP.NET session data, a script's
// segment, a ? and # and ; to cut at, spaces and dots to trim, a format) around a long run of
// İ, which a case-insensitive rule reads as i: every form is matched against every rule.
const MANY_FORMS_PATH = `/%2528S%2528x%2529%2529/a.php/x/${"%C4%B0".repeat(10_000)}/y%2520/%2523;p/b.json.`;
const MANY_RULES = Array.from({ length: 100 }, (_, i) => ({ name: `r${i}`, limit: 1, window: "1s", path: i % 2 ? `/a/*/b${i}/*/c/*.php` : `/x${i}/*/i/*/y` }));

describe("a long crafted path of many match forms in Node", () => {
  it("is matched against a hundred case-insensitive rules in time linear in its length", () => {
    const config = parseRateLimits({ rules: MANY_RULES, denialCacheSize: 1000 });
    if (!config.ok) throw new Error(config.errors.join("\n"));
    const rules = config.config.tiers.get("default")!;
    const started = performance.now();
    const c = canonicalPath(MANY_FORMS_PATH);
    if (!c.ok) throw new Error(c.refused);
    expect(rules.filter((rule) => c.matchOn.some((form) => rule.path!.test(form)))).toEqual([]);
    expect(performance.now() - started).toBeLessThan(2000); // linear: tens of ms; İ folded once per rule and form: seconds
  });
});
