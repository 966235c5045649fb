import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";
import { parseRateLimits } from "../../src/config/rate-limits.ts";

// The examples users copy must stay valid. Placeholders for key hashes get a real hash.
const fillPlaceholders = (toml: string) => toml.replace(/<sha256 hex of [^>]+>/g, () => crypto.randomUUID().replace(/-/g, "").repeat(2));
const rateLimitsIn = (toml: string) => (parse(fillPlaceholders(toml)) as { vars: { RATE_LIMITS: unknown } }).vars.RATE_LIMITS;

describe("documented configuration examples", () => {
  it("every RATE_LIMITS example in the README is valid", () => {
    const blocks = [...readFileSync("README.md", "utf8").matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).filter((b) => b.includes("RATE_LIMITS"));
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    for (const block of blocks) expect(parseRateLimits(rateLimitsIn(block)), block).toMatchObject({ ok: true });
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
