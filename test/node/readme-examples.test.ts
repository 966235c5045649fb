import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative } from "node:path";
import { parseEnv } from "node:util";
import { parse } from "smol-toml";
import { describe, expect, it } from "vitest";
import { parseRateLimits } from "../../src/config/rate-limits.ts";

// The README's Worker examples import "slidegate", "slidegate/hono" and "slidegate/worker" as a
// user would; here those names map to the sources the package is built from, so the examples
// type-check as written without a build (test/node/package.test.ts checks them against the
// built package, installed as a user installs it).
describe("README TypeScript examples", () => {
  it("type-check against the package's exports", () => {
    const blocks = [...readFileSync("README.md", "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    const dir = mkdtempSync(join("test", ".readme-"));
    try {
      const files = blocks.map((code, i) => {
        const file = join(dir, `example-${i}.ts`);
        writeFileSync(file, code);
        return file;
      });
      writeFileSync(
        join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: relative(dir, "tsconfig.json"),
          compilerOptions: {
            noUnusedLocals: false,
            paths: {
              slidegate: [relative(dir, "src/adapters/library.ts")],
              "slidegate/hono": [relative(dir, "src/adapters/hono.ts")],
              "slidegate/worker": [relative(dir, "src/index.ts")],
            },
          },
          include: [...files.map((f) => relative(dir, f)), relative(dir, "src")],
        }),
      );
      const tsc = join(createRequire(import.meta.url).resolve("typescript/package.json"), "..", "bin", "tsc");
      const run = spawnSync(process.execPath, [tsc, "--noEmit", "-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
      expect(run.stdout + run.stderr).toBe("");
      expect(run.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("README shell examples", () => {
  // "Managing keys" has the reader paste its configuration into .dev.vars as JSON: that line must
  // be the TOML above it, and read as npm run dev reads .dev.vars (node:util's parseEnv).
  it("the .dev.vars line of Managing keys is the configuration above it, as npm run dev reads it", () => {
    const readme = readFileSync("README.md", "utf8");
    const section = readme.slice(readme.indexOf("### Managing keys"), readme.indexOf("### Metrics"));
    const toml = [...section.matchAll(/```toml\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes("addressRules"));
    const heredoc = /cat >> \.dev\.vars <<'EOF'\n([\s\S]*?)\nEOF\n/.exec(section)?.[1];
    expect(toml, "the TOML configuration of Managing keys").toBeDefined();
    expect(heredoc, "the .dev.vars heredoc of Managing keys").toBeDefined();
    const json = parseEnv(heredoc!).RATE_LIMITS;
    expect(json, "RATE_LIMITS in the heredoc").toBeDefined();
    expect(JSON.parse(json!)).toEqual((parse(toml!) as { vars: { RATE_LIMITS: unknown } }).vars.RATE_LIMITS);
    expect(parseRateLimits(json!)).toMatchObject({ ok: true });
  });
});
