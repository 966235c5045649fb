import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";
import { configurationWarnings, parseRateLimits } from "../../src/config/rate-limits.ts";
import { keyHeaderWarnings } from "../../src/gateway/proxy.ts";

// The examples users copy must stay valid. Placeholders for key hashes get a real hash.
const fillPlaceholders = (toml: string) => toml.replace(/<sha256 hex of [^>]+>/g, () => crypto.randomUUID().replace(/-/g, "").repeat(2));
const rateLimitsIn = (toml: string) => (parse(fillPlaceholders(toml)) as { vars: { RATE_LIMITS: unknown } }).vars.RATE_LIMITS;

describe("documented configuration examples", () => {
  it("every RATE_LIMITS example in the README is valid", () => {
    const blocks = [...readFileSync("README.md", "utf8").matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).filter((b) => b.includes("RATE_LIMITS"));
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    for (const block of blocks) expect(parseRateLimits(rateLimitsIn(block)), block).toMatchObject({ ok: true });
  });

  // what check-config prints after "valid": an example that draws a warning does not do what its
  // prose says (keys in an allow list that no identity.header reads match no request)
  it("every RATE_LIMITS example in the README draws no check-config warning, but the per-key and tier examples' made-up keys, which Managing keys discusses", () => {
    const blocks = [...readFileSync("README.md", "utf8").matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).filter((b) => b.includes("RATE_LIMITS"));
    const warned = blocks.flatMap((block) => {
      const parsed = parseRateLimits(rateLimitsIn(block));
      if (!parsed.ok) throw new Error(`${block}\n${parsed.errors.join("\n")}`);
      const warnings = [...configurationWarnings(parsed.config), ...keyHeaderWarnings(parsed.config)];
      return warnings.length ? [{ block, warnings }] : [];
    });
    // "With "defaultTier" and no addressRules, a client that makes up a new key for every request
    // gets the default tier's quota afresh each time …: so it is with the per-key and tier examples"
    expect(warned.map((w) => w.block)).toEqual([
      expect.stringContaining('RATE_LIMITS = { identity = { header = "x-api-key", required = true }, rules = [{ name = "minute", limit = 100'),
      expect.stringContaining('tiers.enterprise.rules = [{ name = "minute", limit = 1000'),
    ]);
    for (const { warnings } of warned) expect(warnings).toEqual([expect.stringMatching(/^identity\.unknownKeys is "defaultTier" and no addressRules rule covers every request/)]);
  });

  it("every commented example in wrangler.toml is valid once uncommented", () => {
    const scenarios = readFileSync("wrangler.toml", "utf8")
      .split(/^# Example \d.*$/m)
      .slice(1);
    expect(scenarios).toHaveLength(3);
    for (const scenario of scenarios) {
      const lines = scenario.split("\n").filter((l) => /^(# )?(RATE_LIMITS|\[vars|identity|defaultTier|tiers|keys)/.test(l));
      const toml = lines.map((l) => l.replace(/^# /, "")).join("\n");
      const withTable = toml.startsWith("[vars") ? toml : `[vars]\n${toml}`;
      expect(parseRateLimits(rateLimitsIn(withTable)), withTable).toMatchObject({ ok: true });
    }
  });
});
