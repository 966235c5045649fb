import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseRateLimits } from "../../src/config/rate-limits.ts";
import { canonicalPath } from "../../src/http/canonical.ts";

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

// names every JavaScript object already has ("toString", "__proto__", …) are refused: see the mistakes
const reserved = new Set([...Object.getOwnPropertyNames(Object.prototype), "prototype"]);
const name = fc.stringMatching(/^[A-Za-z0-9_-]{1,32}$/, { size: "max" }).filter((n) => !reserved.has(n));
const window = fc.oneof(
  fc.integer({ min: 1, max: 366 * UNIT_MS.d }).map((ms) => ({ raw: ms as number | string, ms })),
  fc
    .constantFrom(...(Object.keys(UNIT_MS) as (keyof typeof UNIT_MS)[]))
    .chain((unit) => fc.integer({ min: 1, max: Math.floor((366 * UNIT_MS.d) / UNIT_MS[unit]) }).map((n) => ({ raw: `${n}${unit}`, ms: n * UNIT_MS[unit] }))),
);
const rule = fc
  .record({
    limit: fc.integer({ min: 1, max: 1_000_000 }),
    window,
    costShare: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
    // a path the gate refuses in every request (an encoded slash or NUL) is refused in a rule too: not generated as valid
    path: fc.option(
      fc
        .webPath()
        .map((p) => (p.startsWith("/") ? p : `/${p}`))
        .filter((p) => canonicalPath(p).ok),
      { nil: undefined },
    ),
    methods: fc.option(fc.uniqueArray(fc.constantFrom("GET", "POST", "put", "DELETE"), { minLength: 1 }), { nil: undefined }),
    fail: fc.option(fc.constantFrom("open", "closed"), { nil: undefined }),
    timeout: fc.option(fc.integer({ min: 1, max: 30_000 }), { nil: undefined }),
  })
  // at most 1000 per millisecond of the window: more is refused
  .map((r) => ({ ...r, limit: Math.min(r.limit, r.window.ms * 1000) }))
  .map((r) => ({
    limit: r.limit,
    window: r.window.raw,
    windowMs: r.window.ms,
    ...(r.costShare !== undefined && { cost: Math.max(1, Math.floor(r.costShare * r.limit)) }),
    ...(r.path !== undefined && { path: r.path }),
    ...(r.methods !== undefined && { methods: r.methods }),
    ...(r.fail !== undefined && { fail: r.fail }),
    ...(r.timeout !== undefined && { timeout: r.timeout }),
  }));
const rules = fc.uniqueArray(name, { minLength: 1, maxLength: 5 }).chain((names) => fc.tuple(...names.map(() => rule)).map((rs) => rs.map((r, i) => ({ name: names[i]!, ...r }))));

const withoutMs = (list: { windowMs: number }[]) => list.map(({ windowMs: _, ...r }) => r);
const validConfig = fc.record({ rules, fail: fc.option(fc.constantFrom("open", "closed"), { nil: undefined }) });

// One mistake at a known place, and the words the error must use there.
const mistakes: [field: string, value: unknown][] = [
  ["limit", 0],
  ["limit", -3],
  ["limit", "5"],
  ["limit", 1.5],
  ["limit", 2_000_000],
  ["window", "10x"],
  ["window", 0],
  ["window", ""],
  ["window", "367d"],
  ["name", ""],
  ["name", "has space"],
  ["name", "x".repeat(33)],
  ["name", "toString"],
  ["name", "__proto__"],
  ["name", "constructor"],
  ["fail", "maybe"],
  ["timeout", 0],
  ["timeout", 40_000],
  ["methods", []],
  ["path", "no-slash"],
  ["path", "/a%2Fb"],
  ["path", "/a%5cb"],
  ["limt", 5],
];

describe("RATE_LIMITS validation (fast-check)", () => {
  it("accepts every valid configuration and keeps its numbers", () => {
    fc.assert(
      fc.property(validConfig, (c) => {
        const result = parseRateLimits(JSON.stringify({ ...c, rules: withoutMs(c.rules) }));
        expect(result.ok).toBe(true);
        if (result.ok) expect(result.config.tiers.get("default")!.map((r) => [r.limit, r.windowMs])).toEqual(c.rules.map((r) => [r.limit, r.windowMs]));
      }),
      { numRuns: 300 },
    );
  });

  it("rejects one wrong field and names it", () => {
    fc.assert(
      fc.property(validConfig, fc.nat(), fc.constantFrom(...mistakes), (c, pick, [field, value]) => {
        const list = withoutMs(c.rules) as Record<string, unknown>[];
        const at = pick % list.length;
        list[at] = { ...list[at], [field]: value };
        const result = parseRateLimits({ ...c, rules: list });
        expect(result.ok).toBe(false);
        if (!result.ok)
          expect(
            result.errors.some((e) => e.startsWith(`RATE_LIMITS.rules[${at}].${field}: `)),
            result.errors.join("\n"),
          ).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});
