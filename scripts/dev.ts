#!/usr/bin/env node
/**
 * `npm run dev`: the whole local stack in one command — Redis (yours, or one started here),
 * the REST shim, a demo origin, and `wrangler dev` pointed at them — then a banner with a
 * ready-to-paste demo. Ctrl-C stops everything it started.
 *
 * With Upstash credentials in .dev.vars (or the environment) it starts no Redis or shim.
 * `--ready-json` (for tests and CI) prints progress to stderr and one line
 * `SLIDEGATE_READY {json}` to stdout once the gate answers.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { parseEnv } from "node:util";
import Redis from "ioredis";
import { originUrlErrors } from "../src/config/origin-url.ts";
import { parseRateLimits } from "../src/config/rate-limits.ts";
import { storeTokenErrors, storeUrlErrors } from "../src/config/store-secrets.ts";
import { startOrigin } from "./demo-origin.ts";
import { describeLimits } from "./lib/describe-limits.ts";
import { freePort, isListening } from "./lib/ports.ts";
import { hasRedisServer, startRedis } from "./lib/redis-server.ts";
import { varsFromWranglerToml } from "./lib/wrangler-config.ts";
import { redactUrl, startShim } from "./shim/server.ts";

const readyJson = process.argv.includes("--ready-json");
const say = (line: string) => (readyJson ? process.stderr : process.stdout).write(`${line}\n`);
const stops: (() => Promise<void> | void)[] = [];
let stopping = false;

async function stopAll(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    for (const stop of stops.reverse()) await Promise.resolve(stop()).catch(() => {});
  }
  process.exit(code);
}

function fail(message: string): Promise<never> {
  say(`\n✗ ${message}`);
  return stopAll(1);
}

/** Signals a whole process group, false once no process is left in it. */
function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false;
  }
}

/** SIGTERM to wrangler and everything it started (workerd), SIGKILL after 3 s, until none is left. */
async function stopGroup(pgid: number): Promise<void> {
  signalGroup(pgid, "SIGTERM");
  for (let waited = 0; signalGroup(pgid, 0); waited += 50) {
    if (waited === 3000) signalGroup(pgid, "SIGKILL");
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function redisAnswers(url: string): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 });
  client.on("error", () => {});
  try {
    await client.connect();
    return (await client.ping()) === "PONG";
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, () => void stopAll(0));

// .dev.vars first, the environment over it: the same precedence wrangler uses for secrets.
// DEV_VARS_FILE points elsewhere (tests set it to /dev/null so a developer's secrets stay out).
const devVarsFile = process.env.DEV_VARS_FILE || ".dev.vars";
const fileVars = existsSync(devVarsFile) ? parseEnv(readFileSync(devVarsFile, "utf8")) : {};
const vars: Record<string, string | undefined> = { ...fileVars };
for (const [name, value] of Object.entries(process.env)) if (value) vars[name] = value; // empty means unset
const workerVars: Record<string, string> = {};
// What this run started, for the ready line: tests check all of it is gone after Ctrl-C.
const started: { ports: number[]; pids: number[] } = { ports: [], pids: [] };

/** Where a variable set in .dev.vars or the environment came from: the environment wins. */
const sourceOf = (name: string) => (process.env[name] ? "the environment" : devVarsFile);
const tomlVars = varsFromWranglerToml();

// RATE_LIMITS from .dev.vars or the environment wins over wrangler.toml's, as under wrangler dev alone
const limitsSource = vars.RATE_LIMITS ? sourceOf("RATE_LIMITS") : "wrangler.toml";
const limits = parseRateLimits(vars.RATE_LIMITS ?? tomlVars.RATE_LIMITS);
if (!limits.ok) {
  // A value that is no JSON at all from the file is its quoting, not its limits: double quotes end at
  // the JSON's own first quote (the reader hands over "{"), and a TOML table is wrangler.toml's form.
  const fromFile = vars.RATE_LIMITS && limitsSource === devVarsFile && limits.errors.some((e) => e.startsWith("RATE_LIMITS: is not valid JSON"));
  const hint = fromFile
    ? `\n  In ${devVarsFile}, write RATE_LIMITS as JSON on one line, in single quotes: RATE_LIMITS='{"rules":[{"name":"default","limit":5,"window":"10s"}]}' (a TOML table goes in wrangler.toml's [vars]).`
    : "";
  await fail(`RATE_LIMITS from ${limitsSource} is invalid:\n  - ${limits.errors.join("\n  - ")}${hint}`);
}
if (vars.RATE_LIMITS) workerVars.RATE_LIMITS = JSON.stringify(JSON.parse(vars.RATE_LIMITS));

// wrangler.toml's own ORIGIN_URL too, as wrangler dev alone would use it: the demo origin is for
// a run that names none. Checked before anything starts, as the gate would refuse it.
const originUrl = vars.ORIGIN_URL || (typeof tomlVars.ORIGIN_URL === "string" && tomlVars.ORIGIN_URL) || undefined;
const originSource = vars.ORIGIN_URL ? sourceOf("ORIGIN_URL") : "wrangler.toml";
const originErrors = originUrl ? originUrlErrors(originUrl) : [];
if (originErrors.length) await fail(`ORIGIN_URL from ${originSource} is invalid:\n  - ${originErrors.join("\n  - ")}`);

// One of the two alone is a half-pasted database, not a wish for a local Redis: running on one
// instead would look like the database works.
for (const [given, missing] of [
  ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN"],
  ["UPSTASH_REDIS_REST_TOKEN", "UPSTASH_REDIS_REST_URL"],
] as const) {
  if (vars[given] && !vars[missing]) {
    await fail(`${given} is set (in ${sourceOf(given)}) but ${missing} is not: set both to use that Upstash database, or neither to run on a local Redis through the shim.`);
  }
}

// Checked as the gate checks them, before anything starts: the database's rediss:// URL pasted in
// place of the REST one carries its password, which the banner would print whole.
if (vars.UPSTASH_REDIS_REST_URL && vars.UPSTASH_REDIS_REST_TOKEN) {
  for (const [name, errors] of [
    ["UPSTASH_REDIS_REST_URL", storeUrlErrors(vars.UPSTASH_REDIS_REST_URL)],
    ["UPSTASH_REDIS_REST_TOKEN", storeTokenErrors(vars.UPSTASH_REDIS_REST_TOKEN)],
  ] as const) {
    if (errors.length) await fail(`${name} from ${sourceOf(name)} is invalid:\n  - ${errors.join("\n  - ")}`);
  }
}

let store: string;
let storeToken: string | undefined;
if (vars.UPSTASH_REDIS_REST_URL && vars.UPSTASH_REDIS_REST_TOKEN) {
  store = `Upstash at ${vars.UPSTASH_REDIS_REST_URL} (credentials from ${sourceOf("UPSTASH_REDIS_REST_URL")})`;
  say(`• Upstash mode: credentials found, starting no local Redis or shim`);
  workerVars.UPSTASH_REDIS_REST_URL = vars.UPSTASH_REDIS_REST_URL;
  workerVars.UPSTASH_REDIS_REST_TOKEN = vars.UPSTASH_REDIS_REST_TOKEN;
} else {
  say("• Local mode: no Upstash credentials in .dev.vars or the environment");
  let redisUrl = vars.REDIS_URL;
  if (redisUrl && (await redisAnswers(redisUrl))) {
    say(`• Redis: using REDIS_URL ${redactUrl(redisUrl)}`);
  } else {
    if (redisUrl) say(`• Redis: REDIS_URL ${redactUrl(redisUrl)} does not answer; starting one instead`);
    if (!hasRedisServer()) {
      await fail(
        "redis-server is not installed. Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis), set REDIS_URL to a Redis that runs, or put Upstash credentials in .dev.vars.",
      );
    }
    const redis = await startRedis();
    stops.push(() => redis.stop());
    started.ports.push(redis.port);
    started.pids.push(redis.pid!);
    redisUrl = redis.url;
    say(`• Redis: started redis-server on ${redis.url} (nothing kept on disk)`);
  }
  const token = vars.SHIM_TOKEN || randomBytes(16).toString("hex");
  // the library and the Hono middleware need it to count in this Redis; a developer's own is never printed
  storeToken = vars.SHIM_TOKEN ? `SHIM_TOKEN from ${sourceOf("SHIM_TOKEN")}` : token;
  // Quiet once stopping: a terminal's Ctrl-C reaches the redis-server started here as well (it
  // shares the launcher's process group), and it may go before the shim is closed; the shim's
  // "redis connection lost" would then read as a fault in a clean stop.
  const shim = await startShim({ token, redisUrl: redisUrl!, port: await freePort(), log: (line) => stopping || say(line) });
  stops.push(() => shim.close());
  started.ports.push(Number(new URL(shim.url).port));
  store = `shim ${shim.url} -> ${shim.redis}`;
  say(`• Shim: ${shim.url} -> ${shim.redis}`);
  workerVars.UPSTASH_REDIS_REST_URL = shim.url;
  workerVars.UPSTASH_REDIS_REST_TOKEN = token;
}

let originLabel: string;
if (originUrl) {
  workerVars.ORIGIN_URL = originUrl;
  originLabel = originUrl;
  say(`• Origin: ${originUrl} (ORIGIN_URL from ${originSource})`);
} else {
  const origin = await startOrigin();
  stops.push(() => origin.close());
  started.ports.push(Number(new URL(origin.url).port));
  workerVars.ORIGIN_URL = origin.url;
  originLabel = `${origin.url} (demo echo API)`;
  say(`• Origin: demo echo API on ${origin.url}`);
}

// The admin API and its console: the developer's ADMIN_TOKEN, else one for this run (printed in the banner).
const adminTokenSource = vars.ADMIN_TOKEN ? sourceOf("ADMIN_TOKEN") : undefined;
// the gate refuses a shorter one (its admin API and console would answer their configuration error): said here, before it starts
if (vars.ADMIN_TOKEN && vars.ADMIN_TOKEN.length < 32) {
  await fail(`ADMIN_TOKEN from ${adminTokenSource} must be at least 32 characters (a random one: openssl rand -hex 32).`);
}
workerVars.ADMIN_TOKEN = vars.ADMIN_TOKEN || randomBytes(16).toString("hex");

// Secrets reach wrangler through a private file, never the command line or its output.
const envDir = mkdtempSync(join(tmpdir(), "slidegate-dev-"));
stops.push(() => rmSync(envDir, { recursive: true, force: true }));
const envFile = join(envDir, ".env");
writeFileSync(
  envFile,
  `${Object.entries(workerVars)
    // JSON's double quotes would end a double-quoted value: RATE_LIMITS goes single-quoted,
    // which the parser takes literally, with ' and $ (a quote's end, a variable to it) as JSON's own escapes
    .map(([k, v]) => (k === "RATE_LIMITS" ? `${k}='${v.replaceAll("'", "\\u0027").replaceAll("$", "\\u0024")}'` : `${k}=${JSON.stringify(v)}`))
    .join("\n")}\n`,
  { mode: 0o600 },
);

const wantedPort = Number(vars.GATE_PORT || 8787);
const gatePort = (await isListening(wantedPort)) ? await freePort() : wantedPort;
const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
const inspectorPort = await freePort();
say(`• Gate: starting wrangler dev on 127.0.0.1:${gatePort} …`);
if (gatePort !== wantedPort) say(`  (not ${wantedPort}, which is taken)`);
// npm run keys (and the README's examples) default to 8787
if (gatePort !== 8787) say(`  (for npm run keys, export SLIDEGATE_URL=http://127.0.0.1:${gatePort})`);
const child = spawn(
  process.execPath,
  [wrangler, "dev", "--ip", "127.0.0.1", "--port", String(gatePort), "--inspector-port", String(inspectorPort), "--env-file", envFile, "--show-interactive-dev-session=false"],
  {
    // its own process group, so workerd and everything else it starts stop with it
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    // The gate reads no request.cf data, so wrangler need not fetch it from the network.
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", UPSTASH_REDIS_REST_TOKEN: undefined, ADMIN_TOKEN: undefined },
  },
);
started.ports.push(gatePort, inspectorPort);
started.pids.push(child.pid!);
stops.push(() => stopGroup(child.pid!));
let wranglerLog = "";
const ready = new Promise<void>((resolve, reject) => {
  const watch = (chunk: Buffer) => {
    const text = chunk.toString();
    wranglerLog = (wranglerLog + text).slice(-4000);
    if (/Ready on http/.test(wranglerLog)) resolve();
    if (!readyJson) for (const line of text.split("\n")) if (/\[wrangler:|error|warn/i.test(line)) say(`  wrangler │ ${line.trim()}`);
  };
  child.stdout!.on("data", watch);
  child.stderr!.on("data", watch);
  child.once("exit", (code) => reject(new Error(`wrangler dev exited (code ${code}) before it was ready:\n${wranglerLog}`)));
});
await Promise.race([ready, new Promise((_, reject) => setTimeout(() => reject(new Error(`wrangler dev was not ready within 60 s:\n${wranglerLog}`)), 60_000))]).catch((e: Error) =>
  fail(e.message),
);
child.once("exit", (code) => {
  if (!stopping) void fail(`wrangler dev stopped unexpectedly (code ${code}):\n${wranglerLog}`);
});

const gate = `http://127.0.0.1:${gatePort}`;
const mode = store.startsWith("Upstash") ? "upstash" : "local";
const consoleUrl = `${gate}/__slidegate/`;
if (readyJson) {
  process.stdout.write(`SLIDEGATE_READY ${JSON.stringify({ gate, console: consoleUrl, origin: workerVars.ORIGIN_URL, mode, ...started, processGroup: child.pid })}\n`);
} else {
  const rules = limits.ok ? describeLimits(limits.config) : [];
  // the demo sends the key "demo", which a gate that refuses unknown keys answers with 401s
  const registerDemo = limits.ok && limits.config.keyRequired && limits.config.unknownKeys === "reject";
  say(
    [
      "",
      `slidegate is running (${mode === "upstash" ? "Upstash" : "local Redis"} mode)`,
      `  gate     ${gate}   (wrangler dev)`,
      `  origin   ${originLabel}`,
      `  store    ${store}${storeToken ? `   token: ${storeToken}` : ""}`,
      `  console  ${consoleUrl}   admin token: ${adminTokenSource ? `ADMIN_TOKEN from ${adminTokenSource}` : workerVars.ADMIN_TOKEN}`,
      ...rules.map((r, i) => `  ${i === 0 ? "limits" : "      "}   ${r}`),
      "",
      ...(registerDemo
        ? [
            // a token of the user's own is never printed, and a placeholder in its place would not
            // run as pasted (a shell reads "<your" as a redirection): the command takes it from the shell
            `Try it (six requests against the limits above; unknown keys are refused, so the demo key is registered first${adminTokenSource ? `, with your ADMIN_TOKEN from ${adminTokenSource} exported in this shell` : ""}):`,
            `  ${adminTokenSource ? "" : `ADMIN_TOKEN=${workerVars.ADMIN_TOKEN} `}SLIDEGATE_URL=${gate} npm run --silent keys -- set demo`,
          ]
        : ["Try it (six requests against the limits above):"]),
      // a gate that requires a key would answer a keyless demo with six 401s
      `  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w "%{http_code} "${limits.ok && limits.config.keyRequired ? ` -H "${limits.config.keyHeader}: demo"` : ""} ${gate}/; done; echo`,
      "",
      "Ctrl-C stops everything started here.",
    ].join("\n"),
  );
}
