import { describe, expect, it } from "vitest";
import { parseRateLimits } from "./config.ts";

const errorsOf = (raw: unknown) => {
  const r = parseRateLimits(raw);
  if (r.ok) throw new Error("expected the configuration to be refused");
  return r.errors;
};

describe("parseRateLimits", () => {
  it("accepts the per-IP shape and normalises windows of every unit to ms", () => {
    const r = parseRateLimits({ rules: ["500ms", "10s", "2m", "1h", "1d", 250].map((window, i) => ({ name: `r${i}`, limit: 5, window })) });
    expect(r.ok && r.config.tiers.get("default")!.map((x) => x.windowMs)).toEqual([500, 10_000, 120_000, 3_600_000, 86_400_000, 250]);
  });

  it("accepts a JSON string as well as an object, with the documented defaults", () => {
    const r = parseRateLimits('{"rules":[{"name":"default","limit":5,"window":"10s"}]}');
    expect(r.ok && r.config).toMatchObject({ prefix: "sg", keyRequired: false, defaultTier: "default", blockCacheSize: 10_000, clock: "redis" });
    expect(r.ok && r.config.tiers.get("default")![0]).toMatchObject({ limit: 5, windowMs: 10_000, cost: 1, fail: "open", timeoutMs: 1000 });
  });

  it("accepts the tiered shape and resolves per-rule fail and timeout over the global ones", () => {
    const hash = "a".repeat(64);
    const r = parseRateLimits({
      identity: { header: "X-API-Key", required: true },
      defaultTier: "free",
      fail: "closed",
      timeout: 250,
      tiers: { free: { rules: [{ name: "minute", limit: 10, window: "60s" }] }, paid: { rules: [{ name: "minute", limit: 100, window: "60s", fail: "open", timeout: 900 }] } },
      keys: { [hash]: "paid" },
    });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.config.keyHeader).toBe("x-api-key");
    expect(r.config.keyTiers.get(hash)).toBe("paid");
    expect(r.config.tiers.get("free")![0]).toMatchObject({ fail: "closed", timeoutMs: 250 });
    expect(r.config.tiers.get("paid")![0]).toMatchObject({ fail: "open", timeoutMs: 900 });
  });

  it("compiles path globs and upper-cases methods", () => {
    const r = parseRateLimits({ rules: [{ name: "w", limit: 1, window: "1s", path: "/v1/*.json", methods: ["post"] }] });
    const rule = r.ok ? r.config.tiers.get("default")![0]! : undefined;
    expect(rule?.path?.test("/v1/a/b.json")).toBe(true);
    expect(rule?.path?.test("/v1/ajson")).toBe(false);
    expect(rule?.methods?.has("POST")).toBe(true);
  });

  it("names the field and the problem for each error", () => {
    expect(errorsOf({ rules: [{ name: "default", limit: 0, window: "10s" }] })).toEqual(["RATE_LIMITS.rules[0].limit: must be at least 1"]);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "10 sec" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.window: must be a duration/);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "10s", limt: 3 }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.limt: unknown field/);
    expect(errorsOf({ rules: [{ name: "has space", limit: 5, window: "1s" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.name: must be 1-32 characters/);
    expect(errorsOf({ rules: [{ name: "d", limit: 5, window: "1s", fail: "maybe" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.fail: must be "open" or "closed"/);
    expect(errorsOf({ rules: [{ name: "d", limit: 2, window: "1s", cost: 3 }] })).toEqual(["RATE_LIMITS.rules[0].cost: is larger than limit (2): every request would be denied"]);
    expect(errorsOf({ rules: [{ name: "d", limit: 2, window: "1s" }, { name: "d", limit: 3, window: "2s" }] })).toEqual(['RATE_LIMITS.rules[1].name: "d" is used twice']);
    expect(errorsOf({ rules: [{ name: "d", limit: 1, window: "367d" }] })[0]).toMatch(/^RATE_LIMITS\.rules\[0\]\.window: must be at most 366d/);
  });

  it("refuses shapes that contradict themselves", () => {
    const rules = [{ name: "m", limit: 1, window: "1s" }];
    expect(errorsOf({})).toEqual(['RATE_LIMITS: needs "rules" or "tiers"']);
    expect(errorsOf({ rules, tiers: { a: { rules } }, defaultTier: "a", identity: { header: "k" } })).toContain('RATE_LIMITS.rules: give either "rules" or "tiers", not both');
    expect(errorsOf({ tiers: { a: { rules } }, identity: { header: "k" } })).toEqual(["RATE_LIMITS.defaultTier: is required with tiers"]);
    expect(errorsOf({ tiers: { a: { rules } }, defaultTier: "b", identity: { header: "k" } })).toEqual(['RATE_LIMITS.defaultTier: "b" is not a tier']);
    expect(errorsOf({ tiers: { a: { rules } }, defaultTier: "a" })).toEqual(["RATE_LIMITS.identity.header: is required with tiers: tiers are chosen by API key"]);
    expect(errorsOf({ rules, identity: { required: true } })).toEqual(['RATE_LIMITS.identity.required: needs "identity.header" to name the API-key header']);
    expect(errorsOf({ rules, keys: { ["b".repeat(64)]: "gold" } })).toEqual([`RATE_LIMITS.keys.${"b".repeat(64)}: "gold" is not a tier`]);
    expect(errorsOf({ rules, keys: { "raw-key": "x" } })[0]).toMatch(/^RATE_LIMITS\.keys\.raw-key: must be the SHA-256 of an API key/);
  });

  it("refuses what is not a configuration at all", () => {
    expect(errorsOf(undefined)).toEqual(["RATE_LIMITS: is not set"]);
    expect(errorsOf("{nope")[0]).toMatch(/^RATE_LIMITS: is not valid JSON/);
    expect(errorsOf(5)).toEqual(["RATE_LIMITS: must be an object, not 5"]);
    expect(errorsOf([])[0]).toMatch(/^RATE_LIMITS: must be an object/);
  });
});
