import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { Redis } from "@upstash/redis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freshRateLimits, startIsolate } from "../../scripts/lib/fleet.ts";
import { freePort } from "../../scripts/lib/ports.ts";
import { stopGroup } from "../helpers/process-group.ts";
import { services } from "../helpers/shim.ts";

/**
 * slidegate as a user gets it: `npm pack` (which builds the package), then the README's
 * "Use as a library" and "Self-host the shim" commands, run outside this repository with the
 * tarball it made in place of the README's path to it. A Worker project with a stock tsconfig.json
 * and wrangler.toml holds the README's three examples (the limiter, the Hono middleware, the
 * gateway entry); it is type-checked, built by wrangler and each Worker answers in workerd
 * against the real shim and Redis. The shim command of a second install serves the official
 * client. Packages come from the npm registry (npm's cache from this repository's install
 * first); wrangler is this repository's, to spare a second install of it.
 */

const repo = process.cwd();
const pkg = JSON.parse(readFileSync("package.json", "utf8")) as { version: string; devDependencies: Record<string, string> };
const require = createRequire(import.meta.url);
const wrangler = join(dirname(require.resolve("wrangler/package.json")), "bin", "wrangler.js");
const readme = readFileSync("README.md", "utf8");

/** The README from `## <heading>` to the next `## `. */
function section(heading: string): string {
  const start = readme.indexOf(`\n## ${heading}\n`);
  expect(start, `README section "${heading}"`).toBeGreaterThan(-1);
  const end = readme.indexOf("\n## ", start + 1);
  return readme.slice(start, end === -1 ? undefined : end);
}

/** The fenced blocks of one language in a README section. */
const blocks = (text: string, lang: string) => [...text.matchAll(new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\``, "gm"))].map((m) => m[1]!);

/** The commands of a sh block (comments dropped), with the `# …` output line promised after each. */
function commands(block: string): { command: string; expected?: string }[] {
  const steps: { command: string; expected?: string }[] = [];
  for (const line of block.split("\n").filter(Boolean)) {
    if (!line.startsWith("#")) steps.push({ command: line.replace(/\s+#.*$/, "") });
    else if (steps.length) steps[steps.length - 1]!.expected = line.slice(2);
  }
  return steps;
}

/** What a user's shell gives npm, npx and node: this run's Node 22 first, none of npm's script variables of this repository. */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!/^npm_/i.test(name) || /^npm_config_(cache|registry)$/i.test(name)) env[name] = value;
  }
  return { ...env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`, WRANGLER_SEND_METRICS: "false", ...extra };
}

/** Runs a user's app script in the scratch project against the shim, as its own process: its exit code and all it printed. */
async function runApp(script: string, s: ReturnType<typeof services>): Promise<{ code: number | null; out: string }> {
  const child = spawn("nice", ["-n", "10", process.execPath, script], {
    cwd: project,
    env: userEnv({ UPSTASH_REDIS_REST_URL: s.shimUrl, UPSTASH_REDIS_REST_TOKEN: s.shimToken }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  return { code, out };
}

/**
 * Runs a command to its end (at a lower priority: it is builds and installs, and the other
 * test files keep their time budgets); rejects with its output when it fails.
 */
function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("nice", ["-n", "10", command, ...args], { cwd, env: userEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} ${args.join(" ")} (in ${cwd}) exited ${code}:\n${out}`))));
  });
}

/**
 * A README `npm install …` line with this run's tarball for the README's path to the one
 * `npm pack` makes (the package is not on the registry, so that path is the only way in; its
 * name must carry this version) and this repository's pinned versions for the rest.
 */
function installArgs(command: string, tarball: string): string[] {
  const [npm, install, ...names] = command.split(/\s+/);
  expect([npm, install]).toEqual(["npm", "install"]);
  const packed = `/slidegate-${pkg.version}.tgz`;
  const pinned = names.map((name) => {
    if (name.endsWith(packed)) return tarball;
    expect(name, "slidegate is not on the npm registry: the README installs the tarball npm pack makes").not.toMatch(/^slidegate(@|$)|\.tgz$/);
    expect(pkg.devDependencies, `the README installs ${name}, which this test does not know`).toHaveProperty(name);
    return `${name}@${pkg.devDependencies[name]}`;
  });
  expect(names.filter((name) => name.endsWith(packed))).toHaveLength(1);
  expect(readme, "the README says how to make the tarball").toContain("`npm pack`");
  return ["install", ...pinned, "--prefer-offline", "--no-audit", "--no-fund"];
}

// The scratch project, as `npm create cloudflare` makes it (wrangler aside: this repository's),
// with `"type": "module"` in its package.json so that node16 resolution reads its files as ESM.
const stockTsconfig = {
  compilerOptions: {
    target: "es2024",
    lib: ["es2024"],
    module: "es2022",
    moduleResolution: "bundler",
    types: ["@cloudflare/workers-types"],
    resolveJsonModule: true,
    noEmit: true,
    isolatedModules: true,
    allowSyntheticDefaultImports: true,
    forceConsistentCasingInFileNames: true,
    strict: true,
    skipLibCheck: true,
  },
  include: ["src/**/*.ts"],
};
const compatibilityDate = "2026-08-01";

let work: string;
let project: string;
let shimHost: string;
let tarball: string;
/** outdir per Worker, built while the type-check runs */
let builds: Record<"gateway" | "limiter" | "hono", Promise<string>>;
const isolates: Miniflare[] = [];
const shims: ChildProcess[] = [];

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "slidegate-package-"));
  const packs = join(work, "packs");
  project = join(work, "my-worker");
  shimHost = join(work, "shim-host");
  for (const dir of [packs, join(project, "src"), shimHost]) mkdirSync(dir, { recursive: true });

  await run("npm", ["pack", "--pack-destination", packs], repo); // prepack builds lib/
  tarball = join(packs, readdirSync(packs).find((f) => f.endsWith(".tgz"))!);

  writeFileSync(
    join(project, "package.json"),
    JSON.stringify(
      {
        name: "my-worker",
        version: "0.0.0",
        private: true,
        type: "module",
        devDependencies: { "@cloudflare/workers-types": pkg.devDependencies["@cloudflare/workers-types"], typescript: pkg.devDependencies.typescript },
      },
      null,
      2,
    ),
  );
  writeFileSync(join(project, "tsconfig.json"), JSON.stringify(stockTsconfig, null, 2));
  writeFileSync(join(project, "wrangler.toml"), `name = "my-worker"\nmain = "src/index.ts"\ncompatibility_date = "${compatibilityDate}"\n`);
  for (const code of blocks(section("Use as a library"), "ts")) {
    const entry = /from "slidegate\/worker"/.test(code) ? "index" : /from "slidegate\/hono"/.test(code) ? "hono" : /from "slidegate"/.test(code) ? "limiter" : undefined;
    expect(entry, `a README example that imports none of slidegate's entry points:\n${code}`).toBeDefined();
    expect(existsSync(join(project, "src", `${entry}.ts`)), `two README examples for ${entry}`).toBe(false);
    writeFileSync(join(project, "src", `${entry}.ts`), code);
  }
  writeFileSync(join(shimHost, "package.json"), JSON.stringify({ name: "shim-host", version: "0.0.0", private: true }, null, 2));

  const [libraryInstall] = commands(blocks(section("Use as a library"), "sh")[0]!);
  const [shimInstall] = commands(blocks(section("Self-host the shim"), "sh")[0]!);
  await Promise.all([run("npm", installArgs(libraryInstall!.command, tarball), project), run("npm", installArgs(shimInstall!.command, tarball), shimHost)]);

  const build = async (name: string, entry?: string) => {
    const outdir = join(work, `dist-${name}`);
    await run(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir, ...(entry ? [entry] : [])], project);
    return outdir;
  };
  builds = { gateway: build("gateway"), limiter: build("limiter", "src/limiter.ts"), hono: build("hono", "src/hono.ts") };
  for (const built of Object.values(builds)) built.catch(() => {}); // reported by the test that awaits it
}, 300_000);

afterAll(async () => {
  await Promise.all(isolates.map((mf) => mf.dispose()));
  for (const shim of shims) await stopGroup(shim);
  if (builds) await Promise.allSettled(Object.values(builds));
  if (work) rmSync(work, { recursive: true, force: true });
});

/** Sends `n` requests one after another to a built Worker; returns each response with its body read. */
async function requests(mf: Miniflare, n: number, url: string, headers: Record<string, string>) {
  const out: { status: number; headers: Headers; body: string }[] = [];
  for (let i = 0; i < n; i++) {
    const res = await mf.dispatchFetch(url, { headers });
    out.push({ status: res.status, headers: res.headers as unknown as Headers, body: await res.text() });
  }
  return out;
}

/** The README's 5-per-10-s examples: five admitted with the quota counting down, then a 429 with its headers. */
function expectFiveThenDenied(answers: Awaited<ReturnType<typeof requests>>, policy = '"default";q=5;w=10') {
  expect(answers.map((a) => [a.status, a.headers.get("x-slidegate-fail-open")])).toEqual([...Array(5).fill([200, null]), [429, null]]);
  expect(answers.slice(0, 5).map((a) => a.headers.get("x-ratelimit-remaining"))).toEqual(["4", "3", "2", "1", "0"]);
  const denied = answers[5]!;
  expect(denied.headers.get("content-type")).toBe("application/problem+json");
  expect(JSON.parse(denied.body)).toMatchObject({ status: 429, type: "urn:slidegate:rate-limited" });
  expect(Number(denied.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(Number(denied.headers.get("retry-after"))).toBeLessThanOrEqual(10);
  expect(denied.headers.get("x-ratelimit-limit")).toBe("5");
  expect(denied.headers.get("x-ratelimit-remaining")).toBe("0");
  expect(denied.headers.get("ratelimit-policy")).toBe(policy);
}

const storeBindings = () => ({ UPSTASH_REDIS_REST_URL: services().shimUrl, UPSTASH_REDIS_REST_TOKEN: services().shimToken });

describe("the package, installed from its tarball as a user installs it", () => {
  it("ships compiled JavaScript with declarations, the LICENSE and the shim command, and no TypeScript source", () => {
    const installed = join(project, "node_modules", "slidegate");
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as {
      private?: boolean;
      license: string;
      exports: Record<string, { types: string; default: string } | string>;
      bin: Record<string, string>;
      dependencies: Record<string, string>;
    };
    expect(manifest.private).toBeUndefined();
    expect(manifest.license).toBe("MIT");
    expect(readFileSync(join(installed, "LICENSE"), "utf8")).toContain("Copyright (c) 2026 the slidegate authors");
    expect(Object.keys(manifest.exports)).toEqual([".", "./hono", "./worker", "./package.json"]);
    for (const [name, target] of Object.entries(manifest.exports)) {
      if (typeof target === "string") continue;
      expect(Object.keys(target), `${name}: types first`).toEqual(["types", "default"]);
      expect(existsSync(join(installed, target.types)), `${name} types ${target.types}`).toBe(true);
      expect(existsSync(join(installed, target.default)), `${name} ${target.default}`).toBe(true);
    }
    expect(manifest.bin).toEqual({ "slidegate-shim": "lib/shim/main.js" });
    expect(readFileSync(join(installed, manifest.bin["slidegate-shim"]!), "utf8")).toMatch(/^#!\/usr\/bin\/env node\n/);
    // the shim's Redis client is installed with the package; the pinned Node is the repository's own
    expect(manifest.dependencies).toHaveProperty("ioredis");
    expect(manifest.dependencies).not.toHaveProperty("node");

    const files = readdirSync(installed, { recursive: true, encoding: "utf8" });
    expect(files.filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))).toEqual([]);
    // tsc leaves `./x.ts` in the declarations it emits; the build rewrites them to the shipped `./x.js`
    const tsSpecifiers = files
      .filter((f) => f.endsWith(".d.ts"))
      .filter((f) => /(?:from|import)\s*\(?\s*["']\.{1,2}\/[^"']*\.ts["']/.test(readFileSync(join(installed, f), "utf8")));
    expect(tsSpecifiers).toEqual([]);
  });

  it("type-checks the README's examples with a stock tsconfig.json (bundler, and node16 with every declaration checked)", async () => {
    const tsc = join(project, "node_modules", "typescript", "bin", "tsc");
    const [bundler, node16] = await Promise.all([
      run(process.execPath, [tsc, "-p", "tsconfig.json"], project),
      run(process.execPath, [tsc, "-p", "tsconfig.json", "--module", "node16", "--moduleResolution", "node16", "--skipLibCheck", "false"], project),
    ]);
    expect(bundler).toBe("");
    expect(node16).toBe("");
  }, 180_000);

  it("type-checks options that may hold undefined, as the README writes them from process.env, under exactOptionalPropertyTypes", async () => {
    const dir = join(project, "exact");
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, "options.ts"),
      `import { createRateLimiter } from "slidegate";
import { rateLimit } from "slidegate/hono";
// process.env as a Node app reads it: every variable string | undefined
declare const env: Record<string, string | undefined>;
const weight: number | undefined = env.WEIGHT ? Number(env.WEIGHT) : undefined;
const rules = [{ name: "default", limit: 5, window: "10s" }];
export const middleware = rateLimit({
  url: env.UPSTASH_REDIS_REST_URL,
  token: env.UPSTASH_REDIS_REST_TOKEN,
  rules,
  identify: env.BY_USER ? () => env.USER : undefined,
  cost: env.WEIGHT ? () => weight : undefined,
  clientIp: env.BEHIND_PROXY ? () => env.CLIENT_IP : undefined,
});
const limiter = createRateLimiter({ url: "https://example.upstash.io", token: "t", rules });
export const byRequest = limiter.limit(new Request("https://app.example/"), { cost: weight, identity: env.USER, clientIp: env.CLIENT_IP });
export const byIdentity = limiter.limit("user-42", { cost: weight });
`,
    );
    const { include: _, ...compiler } = stockTsconfig;
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({ ...compiler, compilerOptions: { ...compiler.compilerOptions, exactOptionalPropertyTypes: true }, include: ["options.ts"] }),
    );
    const tsc = join(project, "node_modules", "typescript", "bin", "tsc");
    expect(await run(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")], project).catch((e: Error) => e.message)).toBe("");
  }, 180_000);

  it('serves the gateway entry (`export { default } from "slidegate/worker"`), built by wrangler, in workerd: 200 from the origin, then 429', async () => {
    const mf = await startIsolate(await builds.gateway, {
      ...storeBindings(),
      ORIGIN_URL: services().originUrl,
      // a budget no loaded machine exhausts: a timed-out decision would fail open
      RATE_LIMITS: freshRateLimits({ timeout: 30_000, rules: [{ name: "default", limit: 1, window: "1h" }] }),
    });
    isolates.push(mf);
    const [admitted, denied] = await requests(mf, 2, "http://gate.example/hello", { "cf-connecting-ip": "198.51.100.14" });
    expect(admitted!.status).toBe(200);
    expect(JSON.parse(admitted!.body)).toMatchObject({ method: "GET", path: "/hello" });
    expect(admitted!.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(denied!.status).toBe(429);
    expect(JSON.parse(denied!.body)).toMatchObject({ type: "urn:slidegate:rate-limited" });
    expect(denied!.headers.get("ratelimit-policy")).toBe('"default";q=1;w=3600');
  }, 180_000);

  it("serves the README's limiter Worker (`slidegate`), built by wrangler, in workerd: 5 per 10 s per API key", async () => {
    const mf = await startIsolate(await builds.limiter, storeBindings());
    isolates.push(mf);
    expectFiveThenDenied(await requests(mf, 6, "http://api.example/", { "x-api-key": crypto.randomUUID() }), '"default";q=5;w=10, "per-address";q=20;w=10');
    // a client that makes up a new key for every request stops at the address floor
    const ip = `2001:db8:${Math.floor(Math.random() * 0x10000).toString(16)}::1`;
    const rotating: number[] = [];
    for (let i = 0; i < 22; i++) rotating.push((await requests(mf, 1, "http://api.example/", { "x-api-key": crypto.randomUUID(), "cf-connecting-ip": ip }))[0]!.status);
    expect(rotating).toEqual([...Array(20).fill(200), 429, 429]);
  }, 180_000);

  it("serves the README's Hono app (`slidegate/hono`), built by wrangler, in workerd: 5 per 10 s per client IP on /api/*", async () => {
    const mf = await startIsolate(await builds.hono, storeBindings());
    isolates.push(mf);
    const hex = () => Math.floor(Math.random() * 0x10000).toString(16);
    const answers = await requests(mf, 6, "http://api.example/api/hello", { "cf-connecting-ip": `2001:db8:${hex()}:${hex()}::1` });
    expect(JSON.parse(answers[0]!.body)).toEqual({ hello: "world" });
    expectFiveThenDenied(answers);
  }, 180_000);

  it("imports slidegate, slidegate/hono and slidegate/worker from plain Node ESM, no bundler: the limiter and the middleware decide on Node against the shim", async () => {
    const s = services();
    const script = join(project, "plain-node.mjs");
    // the store from process.env, as on Node, where the middleware has no bindings to read
    writeFileSync(
      script,
      `import { createRateLimiter, CostError } from "slidegate";
import { rateLimit } from "slidegate/hono";
import worker from "slidegate/worker";
import { Hono } from "hono";
const store = { url: process.env.UPSTASH_REDIS_REST_URL, token: process.env.UPSTASH_REDIS_REST_TOKEN, prefix: "plainnode" + Date.now() };
const rules = [{ name: "default", limit: 1, window: "1h" }];
const limiter = createRateLimiter({ ...store, rules });
const app = new Hono();
app.use(rateLimit({ ...store, rules: [{ name: "hono", limit: 1, window: "1h" }], clientIp: () => "192.0.2.90" }));
app.get("/", (c) => c.text("ok"));
const answers = [];
for (let i = 0; i < 2; i++) answers.push((await app.request("/")).status);
console.log(JSON.stringify({
  limiter: [(await limiter.limit("user-1")).reason, (await limiter.limit("user-1")).reason],
  hono: answers,
  costError: new CostError("x") instanceof TypeError,
  worker: typeof worker.fetch,
}));
`,
    );
    const { code, out } = await runApp(script, s);
    expect(out).not.toContain(s.shimToken);
    expect(code, out).toBe(0);
    expect(JSON.parse(out)).toEqual({ limiter: ["admitted", "rate-limited"], hono: [200, 429], costError: true, worker: "function" });
  }, 60_000);

  it("is required from a CommonJS app (as npm init makes one): the limiter decides, and the middleware's refusal reaches app.onError, told by getResponse as the README says", async () => {
    const s = services();
    const script = join(project, "common.cjs");
    writeFileSync(
      script,
      `const { createRateLimiter } = require("slidegate");
const { rateLimit } = require("slidegate/hono");
const { Hono } = require("hono");
const { HTTPException } = require("hono/http-exception");
const store = { url: process.env.UPSTASH_REDIS_REST_URL, token: process.env.UPSTASH_REDIS_REST_TOKEN, prefix: "commonjs" + Date.now() };
const limiter = createRateLimiter({ ...store, rules: [{ name: "default", limit: 1, window: "1h" }] });
const app = new Hono();
let seen;
app.onError((err, c) => {
  seen = { instanceOf: err instanceof HTTPException, getResponse: "getResponse" in err };
  return "getResponse" in err ? c.json({ restyled: true }, err.getResponse().status) : c.text("error", 500);
});
app.use(rateLimit({ ...store, rules: [{ name: "hono", limit: 1, window: "1h" }], clientIp: () => "192.0.2.91" }));
app.get("/", (c) => c.text("ok"));
(async () => {
  const answers = [];
  for (let i = 0; i < 2; i++) answers.push((await app.request("/")).status);
  console.log(JSON.stringify({ limiter: [(await limiter.limit("user-1")).reason, (await limiter.limit("user-1")).reason], hono: answers, seen }));
})();
`,
    );
    const { code, out } = await runApp(script, s);
    expect(code, out).toBe(0);
    // the app's require("hono") is Hono's CommonJS build, slidegate's import its ESM one: two
    // HTTPException classes, as the README warns, so the README's getResponse test is the one that holds
    expect(JSON.parse(out)).toEqual({ limiter: ["admitted", "rate-limited"], hono: [200, 429], seen: { instanceOf: false, getResponse: true } });
  }, 60_000);

  it("runs the README's shim command from an install of the package alone, and serves the official client", async () => {
    const [, start] = commands(blocks(section("Self-host the shim"), "sh")[0]!);
    // `VAR=value … command`: the test gives the variables its own values (its Redis, a token it knows)
    const assignment = /([A-Z_]+)=(?:\$\([^)]*\)|\S+)\s+/y;
    const names: string[] = [];
    let end = 0;
    for (let m = assignment.exec(start!.command); m; m = assignment.exec(start!.command)) {
      names.push(m[1]!);
      end = assignment.lastIndex;
    }
    expect(names).toEqual(["SHIM_TOKEN", "REDIS_URL"]);
    const command = start!.command.slice(end);
    expect(command).toBe("npx slidegate-shim");
    expect(existsSync(join(shimHost, "node_modules", ".bin", "slidegate-shim"))).toBe(true);
    // what a production install of slidegate alone brings: no dev tooling beside it
    expect(existsSync(join(shimHost, "node_modules", "typescript"))).toBe(false);
    // the variables, from the installed command, without SHIM_TOKEN and without starting a shim
    expect(await run("npx", ["slidegate-shim", "--help"], shimHost)).toMatch(/^Usage: slidegate-shim\n[\s\S]*SHIM_TOKEN[\s\S]*REDIS_URL/);

    const token = crypto.randomUUID();
    const port = await freePort();
    const redisUrl = services().redisUrl;
    const shim = spawn("bash", ["-c", command], {
      cwd: shimHost,
      env: userEnv({ SHIM_TOKEN: token, REDIS_URL: redisUrl, SHIM_PORT: String(port) }),
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    shims.push(shim);
    let err = "";
    shim.stderr!.on("data", (c: Buffer) => (err += c.toString()));
    const line = await new Promise<string>((resolve, reject) => {
      let out = "";
      shim.stdout!.on("data", (c: Buffer) => {
        out += c.toString();
        const found = out.split("\n").find((l) => l.startsWith("slidegate shim listening"));
        if (found) resolve(found);
      });
      shim.once("exit", (code) => reject(new Error(`the shim exited (${code}): ${err}`)));
    });
    expect(line).toBe(start!.expected!.replace("8079", String(port)).replace("redis://127.0.0.1:6379", redisUrl));

    const url = `http://127.0.0.1:${port}`;
    const redis = new Redis({ url, token, enableTelemetry: false });
    const key = `package:${crypto.randomUUID()}`;
    expect(await redis.set(key, "from the installed shim", { ex: 60 })).toBe("OK");
    expect(await redis.get(key)).toBe("from the installed shim");
    expect(await redis.incr(`${key}:n`)).toBe(1);
    await redis.del(`${key}:n`);
    const stranger = new Redis({ url, token: "not-the-token", enableTelemetry: false, retry: false });
    await expect(stranger.get(key)).rejects.toThrow(/unauthorized|401/i);
  }, 60_000);
});
