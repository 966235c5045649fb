import { describe, expect, it } from "vitest";
import { pathPattern } from "../../src/config/rate-limits.ts";
import { canonicalPath } from "../../src/http/canonical.ts";
import { matchCraftedPath } from "../helpers/crafted-paths.ts";

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

describe("a long crafted path of many match forms in Node", () => {
  it("is matched against a hundred case-insensitive rules in time linear in its length", () => {
    const { matched, ms } = matchCraftedPath();
    expect(matched).toEqual([]);
    expect(ms).toBeLessThan(2000); // linear: tens of ms; İ folded once per rule and form: seconds
  });
});
