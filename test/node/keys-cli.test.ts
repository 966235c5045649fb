import { spawn, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Redis from "ioredis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";
import { until } from "../helpers/until.ts";

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

// The README's "Managing keys" commands, run as written against the built Worker.
const ADMIN_TOKEN = "admin-token-for-the-keys-cli-0123456789";
const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
const section = readme.slice(readme.indexOf("### Managing keys"), readme.indexOf("### Metrics"));
const commands = /```sh\n([\s\S]*?)```/
  .exec(section.slice(section.indexOf("`npm run keys` does the same")))![1]!
  .trim()
  .split("\n");

const TIERS = {
  identity: { header: "x-api-key" },
  defaultTier: "free",
  tiers: { free: { rules: [{ name: "minute", limit: 10, window: "60s" }] }, paid: { rules: [{ name: "minute", limit: 100, window: "60s" }] } },
};
let gate: Miniflare;
let url: string;
let dir: string;

beforeAll(async () => {
  gate = await startGateIsolate({
    ADMIN_TOKEN,
    RATE_LIMITS: rateLimits(TIERS),
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
  const r = spawnSync("bash", ["-c", line.replaceAll("customers.csv", join(dir, "customers.csv")).replaceAll("backup.json", join(dir, "backup.json"))], {
    cwd: new URL("../..", import.meta.url).pathname,
    encoding: "utf8",
    env: { ...process.env, SLIDEGATE_URL: url, ADMIN_TOKEN, API_KEY: "sk-live-acme", ...env },
  });
  let json: Record<string, unknown> | undefined;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    json = undefined;
  }
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, json };
}

/**
 * The commands the test store ran (in lower case) while `commands` ran, once `last`, a text the
 * last of them writes, has been seen: the CLI runs while this process is blocked, so what the
 * store saw arrives after it.
 */
async function storeCommandsDuring(commands: () => void, last: string): Promise<string[]> {
  const redis = new Redis(services().redisUrl);
  const monitor = await redis.monitor();
  const seen: string[] = [];
  monitor.on("monitor", (_time: string, args: string[]) => seen.push(args.join(" ").toLowerCase()));
  try {
    commands();
    await until(`the store has been seen running ${last}`, () => seen.some((command) => command.includes(last)));
    return seen;
  } finally {
    monitor.disconnect();
    redis.disconnect();
  }
}

/**
 * The commands among `seen` that carry more of `hexKey` than its first 8 digits: 9 of them, or 8
 * characters of the base64url hash tag its first 16 bytes would make of an entry's key names.
 */
function carrying(seen: string[], hexKey: string): string[] {
  const tagged = Buffer.from(hexKey.slice(0, 32), "hex").toString("base64url").slice(0, 8).toLowerCase();
  return seen.filter((command) => command.includes(hexKey.slice(0, 9).toLowerCase()) || command.includes(tagged));
}

const policyOf = async (key: string) => (await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": key } })).headers.get("RateLimit-Policy");

// each CLI run is a whole npm process, spawned synchronously: on a loaded 2-core machine a
// test of several takes minutes, so the timeout only catches a hang
describe("npm run keys, as the README shows it", { timeout: 240_000 }, () => {
  it("runs every command of the README, each changing what the gate decides", async () => {
    expect(commands).toHaveLength(13);
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
    // the check of a long file, a call a batch before any is written, shows its progress too
    expect(imported.stderr).toMatch(/^checked 1000 of 2500\nchecked 2000 of 2500\nchecked 2500 of 2500\nimported 1000 of 2500\nimported 2000 of 2500\nimported 2500 of 2500\n$/);
    // the list holds the 2,500 customers and the key set by hand, each once
    expect(results[8]!.json).toMatchObject({ count: 2501 });
    expect(await policyOf("customer-7")).toBe('"minute";q=100;w=60');
    // the key from standard input: the same entry as by name
    expect(results[9]!.json).toMatchObject({ hash: shown.hash, tier: "free" });
    // the backup holds what the list printed; restored, the deleted key is back as it was
    expect(JSON.parse(readFileSync(join(dir, "backup.json"), "utf8"))).toMatchObject({ count: 2501 });
    expect(results[11]!.json).toEqual({ deleted: true });
    expect(results[12]!.json).toEqual({ imported: 2501 });
    expect(run("npm run --silent keys -- show sk-live-acme").json).toEqual(results[9]!.json);
    // --silent: stdout is the JSON alone, every time it is not sent to a file
    for (const r of results.filter((_, i) => i !== 10)) expect(r.json, r.stdout).toBeDefined();
  }, 120_000);

  it("checks a CSV whole before sending any of it, naming the bad line, and reads quoted cells and any case of the column names", async () => {
    const file = (name: string, text: string | Buffer) => {
      writeFileSync(join(dir, name), text);
      return run(`node scripts/keys.ts import ${join(dir, name)}`);
    };
    const refused: [string | Buffer, RegExp][] = [
      ["key,tier,disabled\nsk-csv-1,free,yes\n", /line 2: "disabled" must be true, false, 1 or 0/],
      // a name every JavaScript object has: read as one, the cell was dropped and the key imported enabled
      ["key,tier,disabled\nsk-csv-1,free,constructor\n", /line 2: "disabled" must be true, false, 1 or 0/],
      ["key,tier\nsk-csv-2,paid,extra\n", /line 2: 3 cells for 2 columns/],
      ["key,tier,tier\nsk-csv-3,paid,free\n", /column "tier" is named twice/],
      ["key,plan\nsk-csv-4,paid\n", /unknown column "plan"/],
      // a misspelt column is named with the one it most likely meant, as check-config names a field
      ["key,teir\nsk-csv-4,paid\n", /unknown column "teir" \(did you mean "tier"\?\)/],
      ["key,tier\nsk-csv-5,paid\n\nsk-csv-5,free\n", /line 4 names the same key as line 2/],
      ['key,tier\nsk-csv-5,paid\n"sk-csv-5 ",free\n', /line 3 names the same key as line 2/],
      // padded as an origin trims it (src/decision/api-key.ts): the gate reads it as the same key
      ['key,tier\nsk-csv-5,paid\n"sk-csv-5\u0085\u001f",free\n', /line 3 names the same key as line 2/],
      ['key,label\nsk-csv-6,"Acme\n', /Quote Not Closed|quote/i],
      // the parser's own words quote the cell, which may be a raw key: never echoed
      ['key,tier\nsk-csv-10"x,paid\n', /line 2: Invalid Opening Quote/],
      ['key,tier\n"sk-csv-11"x,paid\n', /line 2: Invalid Closing Quote/],
      // a file without its header line: the first line is a record, whose cells are no column names
      ["sk-csv-12,paid\nsk-csv-13,free\n", /line 1 names no column .*: a CSV starts with a header line/],
      // a spreadsheet's other exports: said as what they are, not as a file without its header line
      ["key\ttier\nsk-csv-14\tpaid\n", /line 1 separates its cells with tabs: a CSV separates them with commas/],
      ["key;tier\nsk-csv-15;paid\n", /line 1 separates its cells with semicolons: a CSV separates them with commas/],
      ["key,tier,\nsk-csv-16,paid,\n", /line 1 names an empty column \(a comma at the end of the line\?\)/],
      [Buffer.from("\uFEFFkey,tier\nsk-csv-17,paid\n", "utf16le"), /is not UTF-8 text \(UTF-16\?\): save it as CSV UTF-8/],
      // a botched export: no header line at all, said as such rather than as a header naming nothing
      ["", /is empty: a CSV starts with a header line naming its columns/],
      ["\uFEFF\r\n\r\n", /is empty: a CSV starts with a header line naming its columns/],
      // Excel's line naming the separator, of another than the comma
      ["sep=;\nkey;tier\nsk-csv-18;paid\n", /line 1 \(sep=\) separates its cells with semicolons: a CSV separates them with commas/],
      // after Excel's "sep=," line, a bad line is named by its own number in the file
      ["sep=,\nkey,disabled\nsk-csv-19,maybe\n", /line 3: "disabled" must be true, false, 1 or 0/],
      // a line of empty cells is skipped as a blank line is, not one without cells that matter
      ["key,tier\n,\n , paid\n", /\(line 3\): 400 .*"key" is blank/],
    ];
    for (const [text, message] of refused) {
      const r = file("refused.csv", text);
      expect([r.code, r.stderr], String(text)).toEqual([2, expect.stringMatching(message)]);
      expect(r.stderr).toMatch(/nothing was imported/i);
      expect(r.stderr, "a key is never echoed").not.toMatch(/sk-csv-/);
    }
    expect((await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": "sk-csv-1" } })).headers.get("RateLimit-Policy")).toBe('"minute";q=10;w=60');
    // a file of keys alone imports: each new key gets the default tier
    expect(file("keys-only.csv", "KEY\nsk-csv-9\n").json).toEqual({ imported: 1 });
    expect(run("node scripts/keys.ts show sk-csv-9").json).toMatchObject({ tier: "free", disabled: false });
    const good = file("good.csv", '\uFEFFKey,Tier,Label,Disabled\r\nsk-csv-7,paid,"Acme, Inc.",TRUE\r\nsk-csv-8, paid ,Plain,0\r\n');
    expect([good.code, good.json]).toEqual([0, { imported: 2 }]);
    expect(run("node scripts/keys.ts show sk-csv-7").json).toMatchObject({ tier: "paid", label: "Acme, Inc.", disabled: true });
    expect(run("node scripts/keys.ts show sk-csv-8").json).toMatchObject({ tier: "paid", label: "Plain", disabled: false });
    // as a spreadsheet saves it: Excel's "sep=," line, and rows of empty cells (formatted, never filled) at the end
    const excel = file("excel.csv", '\uFEFF"sep=,"\r\nKey,Tier,Label\r\nsk-csv-20,paid,Excel\r\n,,\r\n , ,\r\n,,\r\n');
    expect([excel.code, excel.json, excel.stderr]).toEqual([0, { imported: 1 }, "imported 1 of 1\n"]);
    expect(run("node scripts/keys.ts show sk-csv-20").json).toMatchObject({ tier: "paid", label: "Excel" });
  }, 60_000);

  it("refuses a key named twice in batches of its own, as the gate reads it from Authorization (Bearer <key> and <key>), and imports nothing", async () => {
    const bearer = await startGateIsolate({ ADMIN_TOKEN, RATE_LIMITS: rateLimits({ ...TIERS, identity: { header: "authorization" } }) });
    try {
      const at = { SLIDEGATE_URL: (await bearer.ready).href.replace(/\/$/, "") };
      // line 2 and line 1002: one key to the gate, a batch apart, so no batch holds both
      const lines = ["key,tier", "sk-bearer-twice,paid"];
      for (let i = 0; i < 999; i++) lines.push(`sk-bearer-${i},free`);
      lines.push("Bearer sk-bearer-twice,free");
      writeFileSync(join(dir, "bearer.csv"), `${lines.join("\n")}\n`);
      const r = run(`node scripts/keys.ts import ${join(dir, "bearer.csv")}`, at);
      expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/line 1002 names the same key as line 2; nothing was imported/)]);
      expect(r.stderr).not.toContain("sk-bearer");
      expect(run("node scripts/keys.ts show sk-bearer-twice", at).code).toBe(1);
      expect(run("node scripts/keys.ts show sk-bearer-0", at).code).toBe(1);
    } finally {
      await bearer.dispose();
    }
  }, 60_000);

  it("has the gate check every batch of a file before it imports any: a bad line after the first thousand imports nothing", async () => {
    const lines = ["key,tier"];
    for (let i = 0; i < 1000; i++) lines.push(`sk-checked-${i},paid`);
    lines.push("sk-checked-bad,platinum");
    writeFileSync(join(dir, "late-bad.csv"), `${lines.join("\n")}\n`);
    const r = run(`node scripts/keys.ts import ${join(dir, "late-bad.csv")}`);
    expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/late-bad\.csv \(line 1002\): 400 .*"platinum" is not a tier/)]);
    expect(r.stderr).not.toMatch(/^imported/m);
    expect(run("node scripts/keys.ts show sk-checked-0").code).toBe(1);
  }, 60_000);

  it("restores what list --all printed with import, losing nothing: tier, label, disabled and overrides", async () => {
    // a gate of its own, and another to restore into: each registry holds these entries alone
    const source = await startGateIsolate({ ADMIN_TOKEN, RATE_LIMITS: rateLimits(TIERS) });
    const target = await startGateIsolate({ ADMIN_TOKEN, RATE_LIMITS: rateLimits(TIERS) });
    try {
      const at = { SLIDEGATE_URL: (await source.ready).href.replace(/\/$/, "") };
      const into = { SLIDEGATE_URL: (await target.ready).href.replace(/\/$/, "") };
      for (const line of [
        'set sk-backup-1 --tier paid --label "Acme Corp"',
        "override sk-backup-1 minute --limit 500 --window 90s",
        "set sk-backup-2 --disabled",
        "override sk-backup-2 minute --window 2m",
        "set sk-backup-3",
      ]) {
        expect(run(`node scripts/keys.ts ${line}`, at).code, line).toBe(0);
      }
      const backup = join(dir, "saved.json");
      const listed = run(`node scripts/keys.ts list --all > ${backup}`, at);
      expect(listed.code, listed.stderr).toBe(0);
      const restored = run(`node scripts/keys.ts import ${backup}`, into);
      expect([restored.code, restored.stderr, restored.json]).toEqual([0, expect.any(String), { imported: 3 }]);
      expect(run("node scripts/keys.ts list --all", into).json).toEqual(JSON.parse(readFileSync(backup, "utf8")));
      expect(run("node scripts/keys.ts show sk-backup-1", into).json).toMatchObject({ tier: "paid", label: "Acme Corp", overrides: { minute: { limit: 500, windowMs: 90_000 } } });
      // one page of a longer list is not the whole registry: refused, naming why, rather than restored in part
      const page = join(dir, "page.json");
      expect(run(`node scripts/keys.ts list --limit 2 > ${page}`, at).code).toBe(0);
      const partial = run(`node scripts/keys.ts import ${page}`, into);
      expect([partial.code, partial.stderr]).toEqual([2, expect.stringMatching(/page\.json: holds one page of a list .*list --all.*nothing was imported/)]);
    } finally {
      await source.dispose();
      await target.dispose();
    }
  }, 60_000);

  it("names a JSON file it cannot read or parse without quoting it (it may hold raw keys)", () => {
    writeFileSync(join(dir, "broken.json"), '[{"key":"sk-json-secret","tier":"paid"},]');
    const broken = run(`node scripts/keys.ts import ${join(dir, "broken.json")}`);
    expect(broken.code).toBe(2);
    expect(broken.stderr).toMatch(/broken\.json: not valid JSON/);
    expect(broken.stderr).not.toContain("sk-json");
    writeFileSync(join(dir, "bom.JSON"), '\uFEFF[{"key":"sk-json-bom","tier":"paid"}]');
    expect(run(`node scripts/keys.ts import ${join(dir, "bom.JSON")}`).json).toEqual({ imported: 1 });
    const missing = run(`node scripts/keys.ts import ${join(dir, "nope.csv")}`);
    expect([missing.code, missing.stderr]).toEqual([2, expect.stringMatching(new RegExp(`cannot read .*nope\\.csv: no such file \\(looked for ${join(dir, "nope.csv")}\\)`))]);
  });

  it("says a file of no entries (a header line alone, or []) imports nothing, rather than a silent success", () => {
    writeFileSync(join(dir, "header-only.csv"), "key,tier\n");
    writeFileSync(join(dir, "empty.json"), "[]");
    for (const file of ["header-only.csv", "empty.json"]) {
      const r = run(`node scripts/keys.ts import ${join(dir, file)}`);
      expect([r.code, r.json, r.stderr], file).toEqual([0, { imported: 0 }, expect.stringContaining(`${file} holds no entries: nothing to import`)]);
    }
  });

  it("reads a file named relative to the directory npm run was typed in, where the shell writes list --all > backup.json", () => {
    // npm runs the script in the package's root: only INIT_CWD says where the user was
    const repo = new URL("../..", import.meta.url).pathname;
    writeFileSync(join(dir, "relative.csv"), "key,tier\nsk-relative-1,paid\n");
    const r = spawnSync("bash", ["-c", `cd ${dir} && npm --prefix ${repo} run --silent keys -- import relative.csv`], {
      encoding: "utf8",
      env: { ...process.env, SLIDEGATE_URL: url, ADMIN_TOKEN },
    });
    expect([r.status, r.stderr]).toEqual([0, expect.stringContaining("imported 1 of 1")]);
  });

  it("never echoes a JSON file's field that may be a raw key: a map of keys to tiers, or entries keyed by the key", () => {
    const cases: [string, RegExp][] = [
      // the shape of RATE_LIMITS' keys (hash → tier), with raw keys: no "entries" at all
      ['{"sk-map-secret-1":"paid","sk-map-secret-2":"free"}', /must hold a JSON array of entries/],
      ['[{"sk-map-secret-3":"paid"}]', /entry \[0\] has no "key" or "hash"/],
    ];
    for (const [text, message] of cases) {
      writeFileSync(join(dir, "map.json"), text);
      const r = run(`node scripts/keys.ts import ${join(dir, "map.json")}`);
      expect([r.code, r.stderr], text).toEqual([2, expect.stringMatching(message)]);
      expect(r.stderr, text).toContain("nothing was imported");
      expect(r.stderr, text).not.toContain("sk-map-secret");
    }
    // a field misspelt beside the ones a list holds is named, as a CSV's misspelt column is
    writeFileSync(join(dir, "misspelt.json"), '{"entries":[],"cursr":null}');
    expect(run(`node scripts/keys.ts import ${join(dir, "misspelt.json")}`).stderr).toMatch(/not a field "cursr"/);
  });

  it("refuses a list --all backup whose count is not the number of entries it holds (entries lost or cut since), importing nothing", () => {
    const entry = (i: number) => ({ hash: createHash("sha256").update(`sk-counted-${i}`).digest("hex"), tier: "free", disabled: false, overrides: {} });
    for (const [count, message] of [
      [3, /counted\.json: "count" is 3, but it holds 2 entries: .*nothing was imported/],
      ["2", /counted\.json: "count" must be the number of entries list --all printed, not a string \(not repeated here: a file's text may be a raw key\); nothing was imported/],
    ] as const) {
      writeFileSync(join(dir, "counted.json"), JSON.stringify({ entries: [entry(1), entry(2)], count }));
      const r = run(`node scripts/keys.ts import ${join(dir, "counted.json")}`);
      expect([r.code, r.stderr, r.stdout]).toEqual([2, expect.stringMatching(message), ""]);
    }
    writeFileSync(join(dir, "counted.json"), JSON.stringify({ entries: [entry(1), entry(2)], count: 2 }));
    expect(run(`node scripts/keys.ts import ${join(dir, "counted.json")}`).json).toEqual({ imported: 2 });
  });

  it("refuses command lines it would misread, without echoing a key, and changes only keys that exist", () => {
    const cases: [string, RegExp][] = [
      ["node scripts/keys.ts override sk-x minute --limit abc", /--limit takes a whole number/],
      ["node scripts/keys.ts override sk-x minute --window 90", /--window takes a duration with its unit/],
      ["node scripts/keys.ts delete sk-x extra", /delete takes 1 argument, not 2/],
      ["node scripts/keys.ts show sk-x --tier gold", /show does not take --tier/],
      [`node scripts/keys.ts tier sk-secret-x free --hash ${"ab".repeat(32)}`, /name the key once/],
      // a key that starts with "-" reads as an option node does not know, and node's message names it
      ["node scripts/keys.ts show --sk-secret-x", /an option it does not know .*show -- <key>/],
      // an option given twice: which one the operator meant is a guess (node would take the last)
      ["node scripts/keys.ts set sk-secret-twice --tier free --tier paid", /--tier is given twice: give it once/],
      ["node scripts/keys.ts set sk-secret-twice --label=a --tier paid --label b", /--label is given twice: give it once/],
      ["node scripts/keys.ts override sk-secret-twice minute --limit 5 --limit 50", /--limit is given twice: give it once/],
    ];
    for (const [line, message] of cases) {
      const r = run(line);
      expect([r.code, r.stderr], line).toEqual([2, expect.stringMatching(message)]);
      expect(r.stderr).not.toContain("sk-secret");
    }
    expect(run("node scripts/keys.ts show sk-secret-twice").code).toBe(1);
    const typo = run("node scripts/keys.ts tier sk-never-registered paid");
    expect([typo.code, typo.stderr]).toEqual([1, expect.stringMatching(/404/)]);
    expect(run("node scripts/keys.ts show sk-never-registered").code).toBe(1);
  });

  it("refuses a raw key that is the hash of an entry the registry holds (copied from list), naming --hash, and writes nothing", async () => {
    expect(run("node scripts/keys.ts set sk-hash-pasted --tier paid").code).toBe(0);
    const hash = createHash("sha256").update("sk-hash-pasted").digest("hex");
    const entries = () => run("node scripts/keys.ts list --all").json!.entries as { hash: string }[];
    const before = entries();
    // taken as a raw key, each made or changed another entry, or answered a 404 for a key the list shows
    for (const line of [
      `set ${hash} --tier free`,
      `set ${hash.toUpperCase()}`,
      `disable ${hash}`,
      `tier ${hash} free`,
      `show ${hash}`,
      `delete ${hash}`,
      `override ${hash} minute --clear`,
    ]) {
      const r = run(`node scripts/keys.ts ${line}`);
      expect([line, r.code, r.stderr]).toEqual([line, 2, expect.stringMatching(/64 hex digits: the hash of an entry the registry holds.*--hash/)]);
    }
    // a file's column of hashes named "key" (hashes copied from list): each would be a new entry
    writeFileSync(join(dir, "hashes-as-keys.csv"), `key,tier\nsk-not-hex,free\n${hash},free\n${"5e".repeat(32)},free\n`);
    const imported = run(`node scripts/keys.ts import ${join(dir, "hashes-as-keys.csv")}`);
    expect([imported.code, imported.stderr]).toEqual([
      2,
      expect.stringMatching(/line 3: its key is 64 hex digits: the hash of an entry the registry holds.*"hash" column.*nothing was imported/),
    ]);
    expect(entries()).toEqual(before);
    expect(run(`node scripts/keys.ts show --hash ${hash}`).json).toMatchObject({ tier: "paid", disabled: false });
    // a raw key of 64 hex digits (openssl rand -hex 32) that is no entry's hash is a raw key
    const hexKey = "5f".repeat(32);
    expect(run(`node scripts/keys.ts set ${hexKey} --tier paid`).json).toMatchObject({ hash: createHash("sha256").update(hexKey).digest("hex") });
    expect(run(`printf '%s\\n' ${hexKey} | node scripts/keys.ts disable -`).code).toBe(0);
    expect((await gate.dispatchFetch(`${url}/`, { headers: { "x-api-key": hexKey } })).status).toBe(403);
  });

  it("asks whether a raw key of 64 hex digits is an entry's hash with no more than its first 8 digits reaching the store, for set and import alike", async () => {
    const hexKey = randomBytes(32).toString("hex");
    // an entry listed just before it, and one just after, with the same first 8 digits: the
    // list is paged from there, and what sits around the key must not be taken for it
    const near = (last: string) => hexKey.slice(0, 8) + last.repeat(56);
    writeFileSync(join(dir, "near.csv"), `hash,tier\n${near("0").slice(0, 63)}1,free\n${near("f")},free\n`);
    expect(run(`node scripts/keys.ts import ${join(dir, "near.csv")}`).code).toBe(0);
    writeFileSync(join(dir, "hex-keys.csv"), `key,tier\n${hexKey.toUpperCase()},paid\n`);
    const seen = await storeCommandsDuring(() => {
      expect(run(`node scripts/keys.ts set ${hexKey} --tier paid`).json).toMatchObject({ hash: sha256(hexKey) });
      expect(run(`node scripts/keys.ts import ${join(dir, "hex-keys.csv")}`).code).toBe(0);
      // (the file's key, in capitals, is another raw key: its entry is written last)
    }, sha256(hexKey.toUpperCase()));
    expect(seen.join("\n")).toContain(sha256(hexKey));
    expect(carrying(seen, hexKey)).toEqual([]);
    // and a hash the list holds among such neighbours is still found
    expect(run(`node scripts/keys.ts show ${near("f")}`)).toMatchObject({ code: 2, stderr: expect.stringMatching(/64 hex digits: the hash of an entry the registry holds/) });
  });

  it("asks about a raw key of 8 hex digits and 56 zeros, where a list from its first 8 digits would start after it, without the store seeing more than those 8", async () => {
    const zeroKey = randomBytes(4).toString("hex") + "0".repeat(56);
    const seen = await storeCommandsDuring(() => {
      expect(run(`node scripts/keys.ts set ${zeroKey} --tier paid`).json).toMatchObject({ hash: sha256(zeroKey) });
    }, sha256(zeroKey));
    expect(carrying(seen, zeroKey)).toEqual([]);
    // and one that is an entry's hash is still refused as a raw key
    writeFileSync(join(dir, "zero-hash.csv"), `hash,tier\n${zeroKey},free\n`);
    expect(run(`node scripts/keys.ts import ${join(dir, "zero-hash.csv")}`).code).toBe(0);
    expect(run(`node scripts/keys.ts show ${zeroKey}`)).toMatchObject({ code: 2, stderr: expect.stringMatching(/64 hex digits: the hash of an entry the registry holds/) });
  });

  it("changes only its own field with tier, label, disable and enable: another operator's change just before its write stays, and a key deleted then stays deleted", async () => {
    const { createServer } = await import("node:http");
    const adminCall = async (route: string, body: unknown) =>
      (await gate.dispatchFetch(`${url}/__slidegate/${route}`, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body: JSON.stringify(body) })).json();
    /** run once, just before the CLI's write reaches the gate (whatever it read before): another operator's change */
    let meanwhile: (() => Promise<unknown>) | undefined;
    const between = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", async () => {
        const change = /\/keys\/(?:update|import|set)$/.test(req.url ?? "") ? meanwhile : undefined;
        if (change) meanwhile = undefined;
        await change?.();
        const upstream = await fetch(url + (req.url ?? "/"), { method: "POST", headers: { authorization: String(req.headers.authorization) }, body: Buffer.concat(chunks) });
        res.writeHead(upstream.status, { "content-type": "application/json" }).end(await upstream.text());
      });
    });
    await new Promise<void>((resolve) => between.listen(0, "127.0.0.1", resolve));
    const cli = (args: string[]) =>
      new Promise<number | null>((resolve) =>
        spawn(process.execPath, ["scripts/keys.ts", ...args], {
          env: { ...process.env, SLIDEGATE_URL: `http://127.0.0.1:${(between.address() as { port: number }).port}`, ADMIN_TOKEN },
        }).on("exit", resolve),
      );
    try {
      await adminCall("keys/set", { key: "sk-twice", tier: "free" });
      // a key disabled while its tier changes stays disabled
      meanwhile = () => adminCall("keys/set", { key: "sk-twice", tier: "free", disabled: true });
      expect(await cli(["tier", "sk-twice", "paid"])).toBe(0);
      expect(await adminCall("keys/get", { key: "sk-twice" })).toMatchObject({ tier: "paid", disabled: true });
      // an override set while the key is enabled stays
      meanwhile = () => adminCall("keys/override", { key: "sk-twice", rule: "minute", limit: 3 });
      expect(await cli(["enable", "sk-twice"])).toBe(0);
      expect(await adminCall("keys/get", { key: "sk-twice" })).toMatchObject({ tier: "paid", disabled: false, overrides: { minute: { limit: 3 } } });
      // a tier moved while the key is disabled stays
      meanwhile = () => adminCall("keys/set", { key: "sk-twice", tier: "free", overrides: { minute: { limit: 3 } } });
      expect(await cli(["disable", "sk-twice"])).toBe(0);
      expect(await adminCall("keys/get", { key: "sk-twice" })).toMatchObject({ tier: "free", disabled: true, overrides: { minute: { limit: 3 } } });
      // a label given while the key is disabled, with an override, keeps both (set would replace the entry)
      meanwhile = () => adminCall("keys/override", { key: "sk-twice", rule: "minute", limit: 4 });
      expect(await cli(["label", "sk-twice", "Acme, Inc."])).toBe(0);
      expect(await adminCall("keys/get", { key: "sk-twice" })).toMatchObject({ tier: "free", label: "Acme, Inc.", disabled: true, overrides: { minute: { limit: 4 } } });
      // a key revoked (deleted) while another operator enables it stays revoked: the change is refused
      for (const verb of [["enable"], ["disable"], ["tier", "paid"], ["label", "Acme"]]) {
        await adminCall("keys/set", { key: "sk-revoked", tier: "free", disabled: true });
        meanwhile = () => adminCall("keys/delete", { key: "sk-revoked" });
        expect(await cli([verb[0]!, "sk-revoked", ...verb.slice(1)]), verb[0]).toBe(1);
        expect(await adminCall("keys/get", { key: "sk-revoked" }), verb[0]).toMatchObject({ status: 404 });
      }
    } finally {
      between.close();
    }
  });

  it("gives up on a gate that does not answer, saying so, within SLIDEGATE_TIMEOUT_MS", async () => {
    const { createServer } = await import("node:net");
    const silent = createServer(() => {}); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const port = (silent.address() as { port: number }).port;
      const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, ["scripts/keys.ts", "show", "sk-x"], {
          env: { ...process.env, SLIDEGATE_URL: `http://127.0.0.1:${port}`, ADMIN_TOKEN, SLIDEGATE_TIMEOUT_MS: "500" },
        });
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        child.on("exit", (code) => resolve({ code, stderr }));
      });
      expect([r.code, r.stderr]).toEqual([1, expect.stringMatching(/did not answer within 500 ms/)]);
    } finally {
      silent.close();
    }
  });

  it("refuses a SLIDEGATE_TIMEOUT_MS longer than a timer can wait (exit 2, naming it), rather than giving up on every call at once", () => {
    // past 2^31 - 1 ms node's timer waits 1 ms instead: every call "did not answer", an import's
    // batch "may have landed"; past 2^32 - 1 the call is refused as a gate that "could not be reached"
    for (const ms of ["2147483648", "3000000000", "99999999999"]) {
      const r = run("npm run --silent keys -- list", { SLIDEGATE_URL: "http://127.0.0.1:9", SLIDEGATE_TIMEOUT_MS: ms });
      expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/SLIDEGATE_TIMEOUT_MS must be a whole number of milliseconds from 1 to 2147483647/)]);
    }
  });

  it("sends a hash given in upper case in lower case, as the gate stores it, from the command line and from a file", async () => {
    const { createServer } = await import("node:http");
    const bodies: Record<string, unknown>[] = [];
    // records what the CLI sends and answers as the gate would, whatever the gate's version
    const recorder = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => (text += c.toString()));
      req.on("end", () => {
        const body = JSON.parse(text) as Record<string, unknown>;
        bodies.push(body);
        const entries = body.entries as unknown[] | undefined;
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify(entries ? (body.check ? { checked: entries.length } : { imported: entries.length }) : { hash: body.hash, tier: "free" }));
      });
    });
    await new Promise<void>((resolve) => recorder.listen(0, "127.0.0.1", resolve));
    try {
      const at = `http://127.0.0.1:${(recorder.address() as { port: number }).port}`;
      const hash = createHash("sha256").update("sk-upper").digest("hex");
      const run = (args: string[]) =>
        new Promise<number | null>((resolve) =>
          spawn(process.execPath, ["scripts/keys.ts", ...args], { env: { ...process.env, SLIDEGATE_URL: at, ADMIN_TOKEN } }).on("exit", resolve),
        );
      expect(await run(["show", "--hash", hash.toUpperCase()])).toBe(0);
      writeFileSync(join(dir, "upper.csv"), `hash,tier\n${hash.toUpperCase()},paid\n`);
      expect(await run(["import", join(dir, "upper.csv")])).toBe(0);
      expect(bodies.map((b) => b.hash ?? (b.entries as { hash: string }[])[0]!.hash)).toEqual([hash, hash, hash]);
    } finally {
      recorder.close();
    }
  });

  it("lists its verbs and options with --help, without needing a gate or a token", () => {
    const help = run("npm run --silent keys -- --help", { ADMIN_TOKEN: "", SLIDEGATE_URL: "http://127.0.0.1:9" });
    expect(help.code).toBe(0);
    for (const verb of ["show", "set", "tier", "override", "disable", "enable", "delete", "list", "import", "SLIDEGATE_TIMEOUT_MS"]) expect(help.stdout).toContain(verb);
  });

  it("exits 0 when done, 2 for a wrong command line or a file the check refuses, 1 when the gate refuses a call, saying why", () => {
    expect(run("npm run keys -- set sk-exit-0 --tier paid").code).toBe(0);
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
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/bad\.csv \(line 2\): 400 .*"hash" must be the SHA-256/);
    // a tier the gate lacks: a bad file for import (its check pass), a refused call for set
    writeFileSync(join(dir, "platinum.csv"), "key,tier\nsk-exit-2,platinum\n");
    expect(run(`npm run keys -- import ${join(dir, "platinum.csv")}`).code).toBe(2);
    expect(run("npm run keys -- set sk-exit-1 --tier platinum").code).toBe(1);
  }, 60_000);

  it("tells a tier the gate refuses in the words of the tier verb, not of the import it is sent as, and exits 1", () => {
    expect(run("node scripts/keys.ts set sk-tier-typo --tier paid").code).toBe(0);
    for (const [tier, detail] of [
      ["platinum", /"platinum" is not a tier \(tiers: free, paid\)/],
      ["no spaces", /must be 1-32 characters/],
    ] as const) {
      const r = run(`npm run --silent keys -- tier sk-tier-typo "${tier}"`);
      expect([r.code, r.stderr], tier).toEqual([1, expect.stringMatching(new RegExp(`^slidegate keys: tier "${tier}": 400 Bad Request: ${detail.source}`))]);
      expect(r.stderr, tier).not.toMatch(/entries\[0\]|imported/i);
    }
    expect(run("node scripts/keys.ts show sk-tier-typo").json).toMatchObject({ tier: "paid" });
  });

  it("exits 1 when an import's batch fails after the gate checked it, saying nothing after it was sent", async () => {
    const { createServer } = await import("node:http");
    // a gate that passes the check, then fails the write
    const failing = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => (text += c.toString()));
      req.on("end", () => {
        const body = JSON.parse(text) as { entries: unknown[]; check?: boolean };
        res.setHeader("content-type", "application/json");
        if (req.url?.endsWith("/configuration")) res.end(JSON.stringify({ identity: { header: "x-api-key" } }));
        else if (body.check) res.end(JSON.stringify({ checked: body.entries.length }));
        else {
          res.statusCode = 503;
          res.end(JSON.stringify({ title: "Service Unavailable", detail: "The rate-limit store failed." }));
        }
      });
    });
    await new Promise<void>((resolve) => failing.listen(0, "127.0.0.1", resolve));
    try {
      writeFileSync(join(dir, "fails.csv"), "key\nsk-fails\n");
      const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, ["scripts/keys.ts", "import", join(dir, "fails.csv")], {
          env: { ...process.env, SLIDEGATE_URL: `http://127.0.0.1:${(failing.address() as { port: number }).port}`, ADMIN_TOKEN },
        });
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        child.on("exit", (code) => resolve({ code, stderr }));
      });
      expect([r.code, r.stderr]).toEqual([
        1,
        expect.stringMatching(
          /0 imported before them, none after; these may have landed, in part or whole; an import merges, so running the file again is safe\): 503 Service Unavailable/,
        ),
      ]);
    } finally {
      failing.close();
    }
  });
});

/** A control character a terminal may act on (a C0 one but the line break, DEL, a C1 one), or a bidirectional override. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
const TERMINAL_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

/** The CLI run on its own (not through npm), so a server of the test's own can answer it meanwhile. */
function cli(args: string[], env: Record<string, string>, killAfterMs = 20_000) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, ["scripts/keys.ts", ...args], { env: { ...process.env, ADMIN_TOKEN, ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A server that answers every call with `answer(route, body)` (status and JSON; status 0: the connection dropped unanswered), counting the calls. */
async function fakeGate(answer: (route: string, body: Record<string, unknown>) => [number, unknown], host = "127.0.0.1") {
  const { createServer } = await import("node:http");
  const calls: string[] = [];
  const server = createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString()));
    req.on("end", () => {
      const route = (req.url ?? "").replace("/__slidegate/", "");
      calls.push(route);
      const [status, body] = answer(route, text ? (JSON.parse(text) as Record<string, unknown>) : {});
      if (status === 0) return void res.socket?.destroy();
      res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { port: (server.address() as { port: number }).port, calls, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe("npm run keys, against a hostile file or server", { timeout: 240_000 }, () => {
  it("says of an import's batch that failed or went unanswered that it may have landed, and how many before it did", async () => {
    const { createServer } = await import("node:http");
    // checks pass; the first batch lands; the second is written (as a gate does) but its answer never comes
    let writes = 0;
    const slow = createServer((req, res) => {
      let text = "";
      req.on("data", (c: Buffer) => (text += c.toString()));
      req.on("end", () => {
        const body = JSON.parse(text) as { entries: unknown[]; check?: boolean };
        if (req.url?.endsWith("/configuration")) return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ identity: { header: "x-api-key" } }));
        if (body.check) return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ checked: body.entries.length }));
        if (++writes === 1) res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ imported: body.entries.length }));
      });
    });
    await new Promise<void>((resolve) => slow.listen(0, "127.0.0.1", resolve));
    try {
      const lines = ["key"];
      for (let i = 0; i < 1500; i++) lines.push(`sk-landed-${i}`);
      writeFileSync(join(dir, "landed.csv"), `${lines.join("\n")}\n`);
      const r = await cli(["import", join(dir, "landed.csv")], { SLIDEGATE_URL: `http://127.0.0.1:${(slow.address() as { port: number }).port}`, SLIDEGATE_TIMEOUT_MS: "2000" });
      expect([r.code, r.stdout]).toEqual([1, ""]);
      expect(r.stderr).toMatch(
        /line 1002 to line 1501 \(entries 1001–1500; 1000 imported before them, none after; these may have landed, in part or whole; an import merges, so running the file again is safe\): .* did not answer/,
      );
    } finally {
      slow.closeAllConnections();
      slow.close();
    }
  });
  it("says nothing was imported when the gate fails or goes away while it checks the file, and exits 1", async () => {
    const lines = ["key"];
    for (let i = 0; i < 1500; i++) lines.push(`sk-checked-${i}`);
    writeFileSync(join(dir, "checked.csv"), `${lines.join("\n")}\n`);
    // the first batch passes the check; the second meets a store failure, or a gate that went away
    for (const second of [
      [503, { title: "Service Unavailable", detail: "The rate-limit store failed." }],
      [0, undefined],
    ] as const) {
      let checks = 0;
      const failing = await fakeGate((route, body) => {
        if (route === "configuration") return [200, { identity: { header: "x-api-key" } }];
        if (body.check && ++checks === 1) return [200, { checked: (body.entries as unknown[]).length }];
        return [second[0], second[1]];
      });
      try {
        const r = await cli(["import", join(dir, "checked.csv")], { SLIDEGATE_URL: `http://127.0.0.1:${failing.port}` });
        expect([r.code, r.stdout]).toEqual([1, ""]);
        expect(r.stderr).toMatch(/nothing was imported; the check of line 1002 to line 1501 \(entries 1001–1500\) did not complete: (503 Service Unavailable|could not reach)/);
        expect(failing.calls.filter((c) => c === "keys/import")).toHaveLength(2);
      } finally {
        await failing.close();
      }
    }
  });

  it("says what landed when interrupted (Ctrl-C): nothing while the gate checks the file, the entries imported once it writes", async () => {
    const lines = ["key"];
    for (let i = 0; i < 1500; i++) lines.push(`sk-interrupted-${i}`);
    writeFileSync(join(dir, "interrupted.csv"), `${lines.join("\n")}\n`);
    // a gate that answers until `stall` calls have come, then holds the next one open
    for (const [stall, said] of [
      [1, /^interrupted while the gate checked the file: nothing was imported/m],
      [4, /^interrupted: 1000 of 1500 imported; line 1002 to line 1501 were being sent and may have landed/m],
    ] as const) {
      const { createServer } = await import("node:http");
      let calls = 0;
      let held: (() => void) | undefined;
      const heldCall = new Promise<void>((resolve) => (held = resolve));
      const slow = createServer((req, res) => {
        let text = "";
        req.on("data", (c: Buffer) => (text += c.toString()));
        req.on("end", () => {
          const body = JSON.parse(text) as { entries: unknown[]; check?: boolean };
          if (++calls > stall) return held!();
          if (req.url?.endsWith("/configuration")) return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ identity: { header: "x-api-key" } }));
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(body.check ? { checked: body.entries.length } : { imported: body.entries.length }));
        });
      });
      await new Promise<void>((resolve) => slow.listen(0, "127.0.0.1", resolve));
      try {
        const child = spawn(process.execPath, ["scripts/keys.ts", "import", join(dir, "interrupted.csv")], {
          env: { ...process.env, ADMIN_TOKEN, SLIDEGATE_URL: `http://127.0.0.1:${(slow.address() as { port: number }).port}` },
        });
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
        await heldCall;
        child.kill("SIGINT");
        expect([await exited, stderr]).toEqual([130, expect.stringMatching(said)]);
      } finally {
        slow.closeAllConnections();
        slow.close();
      }
    }
  });

  it("says a redirect is one and where it points, without following it, and exits 1", async () => {
    const { createServer } = await import("node:http");
    const followed: string[] = [];
    const redirecting = createServer((req, res) => {
      followed.push(req.url ?? "");
      res.writeHead(req.url === "/elsewhere" ? 200 : 301, { location: "https://www.gate.example/__slidegate/keys/get", "content-type": "text/plain" }).end("Moved");
    });
    await new Promise<void>((resolve) => redirecting.listen(0, "127.0.0.1", resolve));
    try {
      const r = await cli(["show", "sk-redirected"], { SLIDEGATE_URL: `http://127.0.0.1:${(redirecting.address() as { port: number }).port}` });
      // node's own words were "could not reach …: fetch failed (unexpected redirect)", of a gate it had reached
      expect([r.code, r.stdout, r.stderr]).toEqual([1, "", expect.stringMatching(/answered 301, a redirect to https:\/\/www\.gate\.example \(not followed: .*SLIDEGATE_URL/)]);
      expect(followed).toEqual(["/__slidegate/keys/get"]);
    } finally {
      redirecting.close();
    }
  });

  it("says how long a gate's 429 asks to wait (its Retry-After)", async () => {
    const { createServer } = await import("node:http");
    const limited = createServer((_, res) => {
      res
        .writeHead(429, { "retry-after": "540", "content-type": "application/problem+json" })
        .end(JSON.stringify({ title: "Too Many Attempts", detail: "Too many failed admin authentications from this address; wait before trying again." }));
    });
    await new Promise<void>((resolve) => limited.listen(0, "127.0.0.1", resolve));
    try {
      const r = await cli(["show", "sk-limited"], { SLIDEGATE_URL: `http://127.0.0.1:${(limited.address() as { port: number }).port}` });
      expect([r.code, r.stderr]).toEqual([1, expect.stringMatching(/^slidegate keys: 429 Too Many Attempts: .*wait before trying again\. \(Retry-After: 540 s\)\n$/)]);
    } finally {
      limited.close();
    }
  });

  it("stops list --all, saying why, when a server answers a cursor that does not move past the one it was sent", async () => {
    const entry = { hash: "cd".repeat(32), tier: "free", disabled: false, overrides: {} };
    // the same page every time (a cache in front that ignores the body, say), then pages that go back
    for (const next of [() => entry.hash, (sent: unknown) => (sent === undefined ? "ff".repeat(32) : "00".repeat(32)), () => 42]) {
      const looping = await fakeGate((_, body) => [200, { entries: [entry], cursor: next(body.cursor) }]);
      try {
        const r = await cli(["list", "--all"], { SLIDEGATE_URL: `http://127.0.0.1:${looping.port}` });
        expect([r.code, r.stderr, r.stdout]).toEqual([1, expect.stringMatching(/answered a page whose cursor .* does not follow/), ""]);
        expect(looping.calls.length).toBeLessThanOrEqual(2);
      } finally {
        await looping.close();
      }
    }
  });
  it("refuses an ADMIN_TOKEN no header can carry (a line break inside: a token file of two lines) without printing it", async () => {
    const listening = await fakeGate(() => [200, {}]);
    try {
      for (const token of ["admin-line-one\nadmin-line-two", "admin-line-one\r\nadmin-line-two", "admin\u007fline"]) {
        const r = await cli(["show", "sk-x"], { SLIDEGATE_URL: `http://127.0.0.1:${listening.port}`, ADMIN_TOKEN: token });
        expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/ADMIN_TOKEN holds a line break or another control character/)]);
        expect(r.stderr).not.toMatch(/admin-?line/);
      }
      expect(listening.calls).toEqual([]);
      // a token file's CRLF at its end: dropped by fetch as by any header, the token sent as it is
      expect((await cli(["show", "sk-x"], { SLIDEGATE_URL: `http://127.0.0.1:${listening.port}`, ADMIN_TOKEN: `${ADMIN_TOKEN}\r\n` })).code).toBe(0);
      expect(listening.calls).toEqual(["keys/get"]);
    } finally {
      await listening.close();
    }
  });

  it("refuses an ADMIN_TOKEN holding a character outside ASCII before connecting, without printing it: sent in UTF-8, the gate reads other characters and counts a failed sign-in", async () => {
    const listening = await fakeGate(() => [200, {}]);
    try {
      // "é" is one byte to a browser's fetch (the console signs in with it) and two to node's: the
      // gate, reading a byte a character, answers every run 401, each one of the address's failures
      for (const token of ["admin-caf\u00e9-0123456789abcdefghijklmnop", "admin-dash\u2014-0123456789abcdefghijklmnop"]) {
        const r = await cli(["show", "sk-x"], { SLIDEGATE_URL: `http://127.0.0.1:${listening.port}`, ADMIN_TOKEN: token });
        expect([r.code, r.stderr]).toEqual([2, expect.stringMatching(/ADMIN_TOKEN holds a character outside ASCII/)]);
        expect(r.stderr).not.toMatch(/0123456789abc/);
      }
      expect(listening.calls).toEqual([]);
    } finally {
      await listening.close();
    }
  });

  it("refuses a SLIDEGATE_URL with a path, a query or credentials before connecting, without repeating it: the admin API is at the root, and a path would carry the token to the origin", async () => {
    const listening = await fakeGate(() => [404, { title: "Not Found", detail: "an origin's page" }]);
    try {
      for (const [at, message] of [
        [`http://127.0.0.1:${listening.port}/v1`, /SLIDEGATE_URL has a path .*"\/v1"/],
        [`http://127.0.0.1:${listening.port}/?x=1`, /SLIDEGATE_URL has a query/],
        [`http://admin:${ADMIN_TOKEN}@127.0.0.1:${listening.port}`, /SLIDEGATE_URL holds a user name or password/],
        // an empty query or fragment, which a parsed URL no longer shows: appended to, the admin
        // route became the query ("/?/__slidegate/keys/get") or was cut off ("/"), a call to the origin
        [`http://127.0.0.1:${listening.port}?`, /SLIDEGATE_URL has a query or a fragment/],
        [`http://127.0.0.1:${listening.port}/#`, /SLIDEGATE_URL has a query or a fragment/],
      ] as const) {
        const r = await cli(["show", "sk-pathed"], { SLIDEGATE_URL: at });
        expect([at, r.code, r.stderr]).toEqual([at, 2, expect.stringMatching(message)]);
        expect(r.stderr).not.toContain(ADMIN_TOKEN);
      }
      expect(listening.calls, "nothing was sent").toEqual([]);
      // the root, with or without its slash (or two, or a space after it, as from a file), is the gate's
      const roots = [`http://127.0.0.1:${listening.port}`, `http://127.0.0.1:${listening.port}/`, `http://127.0.0.1:${listening.port}//`, `http://127.0.0.1:${listening.port} `];
      for (const at of roots) {
        expect((await cli(["show", "sk-pathed"], { SLIDEGATE_URL: at })).code, at).toBe(1);
      }
      expect(listening.calls).toEqual(roots.map(() => "keys/get"));
    } finally {
      await listening.close();
    }
  });

  it("sends the admin token and raw keys over plain HTTP to a loopback address only: to any other it refuses before connecting", async () => {
    const { networkInterfaces } = await import("node:os");
    // an address of this machine's that is not loopback: what a gate elsewhere on the network is reached by
    const lan = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === "IPv4" && !a.internal)?.address;
    const listening = await fakeGate(() => [200, { hash: "ab".repeat(32), tier: "free" }], "0.0.0.0");
    try {
      for (const host of [lan ?? "192.0.2.1", "gate.example"]) {
        const r = await cli(["show", "sk-cleartext"], { SLIDEGATE_URL: `http://${host}:${listening.port}` });
        expect([host, r.code, r.stderr]).toEqual([host, 2, expect.stringMatching(/plain HTTP.*https:\/\//)]);
        expect(r.stderr).not.toContain(ADMIN_TOKEN);
      }
      expect(listening.calls, "nothing was sent").toEqual([]);
      // loopback, in each spelling, is this machine: the local gate of npm run dev
      for (const host of ["127.0.0.1", "localhost", "127.1.2.3"]) {
        expect((await cli(["show", "sk-cleartext"], { SLIDEGATE_URL: `http://${host}:${listening.port}` })).code, host).toBe(0);
      }
      expect(listening.calls).toHaveLength(3);
    } finally {
      await listening.close();
    }
  });

  it("prints what a file or a gate sends as escaped text, never as a control sequence the terminal would run", async () => {
    const at = { SLIDEGATE_URL: url };
    // a field name of a JSON file, which the gate's 400 names as it was sent
    writeFileSync(join(dir, "escape.json"), JSON.stringify([{ hash: "ab".repeat(32), "\u001b]0;pwned\u0007": 1 }]));
    const field = await cli(["import", join(dir, "escape.json")], at);
    expect([field.code, field.stderr]).toEqual([2, expect.stringContaining("\\u001b]0;pwned\\u0007: unknown field")]);
    expect(field.stderr).not.toMatch(TERMINAL_CONTROL);
    // a column of a CSV's header line, which the CLI names itself
    writeFileSync(join(dir, "escape.csv"), "key,\u001b[2J\u009b31m\nsk-escape,x\n");
    const column = await cli(["import", join(dir, "escape.csv")], at);
    expect([column.code, column.stderr]).toEqual([2, expect.stringContaining("unknown column")]);
    expect(column.stderr).not.toMatch(TERMINAL_CONTROL);
    // a label the registry holds (any text up to 200 characters): printed as JSON that still reads back the same
    const label = "\u009b2J\u202eAcme\u007f";
    expect((await cli(["set", "sk-escape-label", "--label", label], at)).code).toBe(0);
    const shown = await cli(["show", "sk-escape-label"], at);
    expect(shown.code).toBe(0);
    expect(shown.stdout).not.toMatch(TERMINAL_CONTROL);
    expect(JSON.parse(shown.stdout)).toMatchObject({ label });
    // a server's own words
    const hostile = await fakeGate(() => [400, { title: "\u001b[31mBad", detail: "\u001b]52;c;cHduZWQ=\u0007\u009b2J" }]);
    try {
      const r = await cli(["show", "sk-escape"], { SLIDEGATE_URL: `http://127.0.0.1:${hostile.port}` });
      expect([r.code, r.stderr]).toEqual([1, expect.stringContaining("400 \\u001b[31mBad")]);
      expect(r.stderr).not.toMatch(TERMINAL_CONTROL);
    } finally {
      await hostile.close();
    }
  });
});
