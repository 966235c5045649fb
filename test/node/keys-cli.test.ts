import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// The README's "Managing keys" commands, run as written against the built Worker.
const ADMIN_TOKEN = "admin-token-for-the-keys-cli-0123456789";
const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
const section = readme.slice(readme.indexOf("### Managing keys"), readme.indexOf("### Metrics"));
const commands = /```sh\n([\s\S]*?)```/
  .exec(section.slice(section.indexOf("`npm run keys` does the same")))![1]!
  .trim()
  .split("\n");

let gate: Miniflare;
let url: string;
let dir: string;

beforeAll(async () => {
  gate = await startGateIsolate({
    ADMIN_TOKEN,
    RATE_LIMITS: rateLimits({
      identity: { header: "x-api-key" },
      defaultTier: "free",
      tiers: { free: { rules: [{ name: "minute", limit: 10, window: "60s" }] }, paid: { rules: [{ name: "minute", limit: 100, window: "60s" }] } },
    }),
  });
  url = (await gate.ready).href.replace(/\/$/, "");
  dir = mkdtempSync(join(tmpdir(), "slidegate-keys-"));
  // 2,500 customers: three batches of the admin API's 1,000
  const lines = ["hash,tier,label"];
  for (let i = 0; i < 2500; i++) lines.push(`${createHash("sha256").update(`customer-${i}`).digest("hex")},${i % 2 ? "paid" : "free"},Customer ${i}`);
  writeFileSync(join(dir, "customers.csv"), `${lines.join("\n")}\n`);
}, 60_000);

afterAll(async () => {
  await gate?.dispose();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A command line as a user types it in a checkout, with SLIDEGATE_URL and ADMIN_TOKEN exported. */
function run(line: string, env: Record<string, string | undefined> = {}) {
  const r = spawnSync("bash", ["-c", line.replaceAll("customers.csv", join(dir, "customers.csv"))], {
    cwd: new URL("../..", import.meta.url).pathname,
    encoding: "utf8",
    env: { ...process.env, SLIDEGATE_URL: url, ADMIN_TOKEN, npm_config_loglevel: "silent", ...env },
  });
  let json: Record<string, unknown> | undefined;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    json = undefined;
  }
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, json };
}

const policyOf = async (key: string) => (await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": key } })).headers.get("RateLimit-Policy");

describe("npm run keys, as the README shows it", () => {
  it("runs every command of the README, each changing what the gate decides", async () => {
    expect(commands).toHaveLength(10);
    const results = [];
    for (const line of commands) {
      const r = run(line);
      expect(r.code, `${line}\n${r.stderr}`).toBe(0);
      results.push(r);
      // what each step changed, seen by the gate itself
      if (line.includes("set sk-live-acme --tier paid")) expect(await policyOf("sk-live-acme")).toBe('"minute";q=100;w=60');
      if (line.includes("--limit 500")) expect(await policyOf("sk-live-acme")).toBe('"minute";q=500;w=60');
      if (line.includes("tier sk-live-acme free")) expect(await policyOf("sk-live-acme")).toBe('"minute";q=500;w=60'); // the override stays
      if (line.includes("--clear")) expect(await policyOf("sk-live-acme")).toBe('"minute";q=10;w=60');
      if (line.includes("disable")) expect((await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": "sk-live-acme" } })).status).toBe(403);
      if (line.includes("enable sk-live-acme") && !line.includes("disable"))
        expect((await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": "sk-live-acme" } })).status).toBe(200);
    }
    const shown = results[2]!.json!;
    expect(shown).toMatchObject({ tier: "paid", label: "Acme Corp", disabled: false, overrides: { minute: { limit: 500, windowMs: 60_000 } } });
    expect(shown.hash).toBe(createHash("sha256").update("sk-live-acme").digest("hex"));
    const imported = results[7]!;
    expect(imported.json).toEqual({ imported: 2500 });
    expect(imported.stderr).toMatch(/imported 1000 of 2500\nimported 2000 of 2500\nimported 2500 of 2500/);
    // the list holds the 2,500 customers and the key set by hand, each once
    expect(results[8]!.json).toMatchObject({ count: 2501 });
    expect(await policyOf("customer-7")).toBe('"minute";q=100;w=60');
    expect(results[9]!.json).toEqual({ deleted: true });
  }, 120_000);

  it("exits 2 for a wrong command line and 1 when the gate refuses, saying why", () => {
    expect(run("npm run keys -- frobnicate").code).toBe(2);
    expect(run("npm run keys -- show").code).toBe(2);
    const noToken = run("npm run keys -- show sk-x", { ADMIN_TOKEN: "" });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toMatch(/ADMIN_TOKEN is not set/);
    const wrongTier = run("npm run keys -- set sk-x --tier platinum");
    expect(wrongTier.code).toBe(1);
    expect(wrongTier.stderr).toMatch(/400 Bad Request: .*"platinum" is not a tier/);
    const missing = run("npm run keys -- show sk-nobody");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/404/);
    writeFileSync(join(dir, "bad.csv"), "hash,tier\nnot-a-hash,free\n");
    const bad = run(`npm run keys -- import ${join(dir, "bad.csv")}`);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/entries 1–1 \(0 imported before them, none after\): 400 .*"hash" must be the SHA-256/);
  }, 60_000);
});
