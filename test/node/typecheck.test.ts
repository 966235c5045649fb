import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = new URL("../..", import.meta.url).pathname;
const bin = (name: string) => join(root, "node_modules", ".bin", name);

describe("the Worker's TypeScript project", () => {
  it("refuses Node globals in Worker code: Buffer and process do not exist at the edge", () => {
    const dir = mkdtempSync(join(tmpdir(), "slidegate-tsc-"));
    try {
      // the runtime's types as `npm run types:runtime` generates them, then tsconfig.worker.json over a probe beside src/
      const types = spawnSync(bin("wrangler"), ["types", join(dir, "runtime.d.ts"), "--include-env=false"], { cwd: root, encoding: "utf8" });
      expect(types.status, types.stderr).toBe(0);
      writeFileSync(join(dir, "probe.ts"), 'export const bytes = Buffer.from("x");\nexport const home = process.env.HOME;\nexport const ok: Response = new Response("x");\n');
      writeFileSync(
        join(dir, "tsconfig.json"),
        JSON.stringify({
          extends: join(root, "tsconfig.worker.json"),
          include: [join(root, "src"), join(dir, "probe.ts"), join(dir, "runtime.d.ts")],
          exclude: [join(root, "src/**/*.test.ts")],
        }),
      );
      const tsc = spawnSync(bin("tsc"), ["--noEmit", "-p", join(dir, "tsconfig.json")], { encoding: "utf8" });
      expect(tsc.status).not.toBe(0);
      const errors = tsc.stdout.split("\n").filter((l) => l.includes("error"));
      expect(errors).toEqual([
        expect.stringMatching(/probe\.ts\(1,\d+\): error TS2591: Cannot find name 'Buffer'/),
        expect.stringMatching(/probe\.ts\(2,\d+\): error TS2591: Cannot find name 'process'/),
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
