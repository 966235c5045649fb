import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { freePort, isListening } from "../../scripts/lib/ports.ts";
import { startRedis } from "../../scripts/lib/redis-server.ts";
import { createRateLimiter } from "../../src/adapters/library.ts";
import { services } from "../helpers/shim.ts";

interface Ready {
  gate: string;
  mode: string;
  ports: number[];
  pids: number[];
  processGroup: number;
}

let dev: ChildProcess | undefined;
afterEach(async () => {
  // After a failed test: stop it as a user would, so it takes its children with it.
  if (!dev || dev.exitCode !== null || dev.signalCode !== null) return;
  const exited = new Promise((resolve) => dev!.once("exit", resolve));
  dev.kill("SIGINT");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
  if (dev.exitCode === null && dev.signalCode === null) dev.kill("SIGKILL");
}, 15_000);

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The launcher's environment on a fresh port, with nothing of the developer's own in play. */
async function devEnv(env: Record<string, string>): Promise<NodeJS.ProcessEnv> {
  return {
    ...process.env,
    GATE_PORT: String(await freePort()),
    REDIS_URL: "",
    ORIGIN_URL: "",
    UPSTASH_REDIS_REST_URL: "",
    UPSTASH_REDIS_REST_TOKEN: "",
    DEV_VARS_FILE: "/dev/null",
    ...env,
  };
}

/**
 * `npm run dev --ready-json` with no developer .dev.vars in play unless `devVars` says so.
 * `detached`: in a process group of its own, as at a terminal, for a Ctrl-C sent to the group.
 */
async function startDev(devVars = "/dev/null", env: Record<string, string> = {}, detached = false, cwd = process.cwd()): Promise<{ ready: Ready; output: () => string }> {
  dev = spawn(process.execPath, [join(process.cwd(), "scripts/dev.ts"), "--ready-json"], {
    cwd,
    env: await devEnv({ DEV_VARS_FILE: devVars, ...env }),
    stdio: ["ignore", "pipe", "pipe"],
    detached,
  });
  let output = "";
  const ready = await new Promise<Ready>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`not ready in 90 s:\n${output}`)), 90_000);
    dev!.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    dev!.stdout!.on("data", (c: Buffer) => {
      output += c.toString();
      const line = /^SLIDEGATE_READY (.*)$/m.exec(output);
      if (line) {
        clearTimeout(timer);
        resolve(JSON.parse(line[1]!));
      }
    });
    dev!.once("exit", (code) => reject(new Error(`exited with ${code}:\n${output}`)));
  });
  return { ready, output: () => output };
}

/** `npm run dev` as a person runs it (no --ready-json): resolves with its banner once printed. */
async function startBanner(env: Record<string, string>): Promise<string> {
  dev = spawn(process.execPath, ["scripts/dev.ts"], { env: await devEnv(env), stdio: ["ignore", "pipe", "pipe"] });
  let banner = "";
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no banner in 90 s:\n${banner}`)), 90_000);
    dev!.stdout!.on("data", (c: Buffer) => {
      banner += c.toString();
      if (banner.includes("Ctrl-C stops everything")) {
        clearTimeout(timer);
        resolve(banner);
      }
    });
    dev!.once("exit", (code) => reject(new Error(`exited with ${code}:\n${banner}`)));
  });
}

/** The banner's demo: six requests against 5 per 10 s. */
async function sixRequests(gate: string): Promise<{ codes: number[]; last: Response }> {
  const codes: number[] = [];
  let last: Response | undefined;
  for (let i = 0; i < 6; i++) {
    last = await fetch(`${gate}/`);
    codes.push(last.status);
    if (i < 5) await last.arrayBuffer();
  }
  return { codes, last: last! };
}

async function ctrlC(ready: Ready, interrupt = () => dev!.kill("SIGINT")) {
  const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
  interrupt();
  expect(await exited).toBe(0);
  for (const pid of [...ready.pids, dev!.pid!]) expect(alive(pid), `pid ${pid}`).toBe(false);
  expect(alive(-ready.processGroup), "wrangler's process group").toBe(false);
  for (const port of ready.ports) expect(await isListening(port), `port ${port}`).toBe(false);
}

describe("npm run dev", () => {
  it("brings the local stack up, serves the six-request demo, and leaves nothing behind on Ctrl-C", async () => {
    const { ready, output } = await startDev();
    expect(ready.mode).toBe("local");
    expect(output()).toMatch(/Local mode/);
    expect(output()).toMatch(/Redis: started redis-server/);
    const { codes, last } = await sixRequests(ready.gate);
    expect(codes).toEqual([200, 200, 200, 200, 200, 429]);
    expect(last.headers.get("Retry-After")).toMatch(/^(9|10)$/);
    expect(last.headers.get("X-RateLimit-Limit")).toBe("5");
    expect(last.headers.get("X-RateLimit-Remaining")).toBe("0");
    expect(last.headers.get("RateLimit-Policy")).toBe('"default";q=5;w=10');
    expect(last.headers.get("Content-Type")).toBe("application/problem+json");
    await ctrlC(ready);
    // and a second run can start at once
  }, 120_000);

  it("says nothing of a lost Redis connection on a terminal's Ctrl-C, which reaches the redis-server it started too", async () => {
    const { ready, output } = await startDev("/dev/null", {}, true);
    const closed = new Promise((resolve) => dev!.once("close", resolve)); // all its output read
    // a terminal signals its whole foreground process group: the launcher and redis-server at once
    await ctrlC(ready, () => process.kill(-dev!.pid!, "SIGINT"));
    await closed;
    expect(output()).not.toMatch(/redis connection lost|ECONNREFUSED/);
  }, 120_000);

  it("prints a banner with the console's URL and an admin token for this run, which the console's routes take", async () => {
    const banner = await startBanner({ ADMIN_TOKEN: "" });
    const line = /^ {2}console {2}(http:\/\/127\.0\.0\.1:\d+\/__slidegate\/) {3}admin token: ([0-9a-f]{32})$/m.exec(banner);
    expect(line, banner).not.toBeNull();
    const [, consoleUrl, token] = line!;
    const page = await fetch(consoleUrl!);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("<title>slidegate console</title>");
    const figures = await fetch(`${consoleUrl}figures`, { method: "POST", body: "{}", headers: { authorization: `Bearer ${token}` } });
    expect(figures.status).toBe(200);
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("prints the shim's URL and a token for this run, which the library takes to count in the gate's own Redis", async () => {
    const banner = await startBanner({ SHIM_TOKEN: "" });
    const line = /^ {2}store {4}shim (http:\/\/127\.0\.0\.1:\d+) -> \S+ {3}token: ([0-9a-f]{32})$/m.exec(banner);
    expect(line, banner).not.toBeNull();
    const [, url, token] = line!;
    // a wrong token would not throw: the limiter fails open, and says so in its reason
    const limiter = createRateLimiter({ url: url!, token: token!, rules: [{ name: "banner", limit: 1, window: "10s" }] });
    expect((await limiter.limit("user-1")).reason).toBe("admitted");
    expect((await limiter.limit("user-1")).reason).toBe("rate-limited");
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("names SHIM_TOKEN and where it came from in its banner when the developer set one, never printing it", async () => {
    const token = `own-${randomBytes(16).toString("hex")}`;
    const banner = await startBanner({ SHIM_TOKEN: token });
    expect(banner).not.toContain(token);
    expect(banner).toMatch(/^ {2}store {4}shim http:\/\/127\.0\.0\.1:\d+ -> \S+ {3}token: SHIM_TOKEN from the environment$/m);
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("gates by the RATE_LIMITS of .dev.vars rather than wrangler.toml's, and its banner shows those limits and a demo that sends the required key", async () => {
    const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
    const file = join(dir, ".dev.vars");
    const limits = {
      identity: { header: "x-api-key", required: true },
      rules: [
        { name: "tight", limit: 2, window: "10s" },
        // a ' and a $ in the value: the file handed to wrangler must carry them unchanged
        { name: "quoted", limit: 1, window: "10s", path: "/it's-$HOME" },
      ],
    };
    // as a developer writes it: single-quoted, its own ' spelled as JSON's escape
    writeFileSync(file, `RATE_LIMITS='${JSON.stringify(limits).replaceAll("'", "\\u0027")}'\n`);
    const banner = await startBanner({ DEV_VARS_FILE: file });
    expect(banner).toContain("tight: 2 per 10s per x-api-key (required)");
    expect(banner).not.toContain("default: 5 per 10s");
    // the port it was given was free: nothing was taken, so nothing is said about 8787
    expect(banner).not.toContain("which is taken");
    const demo = /^ {2}(for i in .*)$/m.exec(banner)?.[1];
    expect(demo, banner).toContain('-H "x-api-key: demo"');
    const run = spawnSync("bash", ["-c", demo!], { encoding: "utf8", timeout: 30_000 });
    expect(run.stdout.trim()).toBe("200 200 429 429 429 429");
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("shows a demo that registers its key first when unknown keys are refused, and the demo runs as printed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
    const file = join(dir, ".dev.vars");
    const limits = { identity: { header: "x-api-key", required: true, unknownKeys: "reject" }, rules: [{ name: "tight", limit: 2, window: "10s" }] };
    writeFileSync(file, `RATE_LIMITS='${JSON.stringify(limits)}'\n`);
    const banner = await startBanner({ DEV_VARS_FILE: file, ADMIN_TOKEN: "" });
    const demo = /^Try it[^\n]*\n((?: {2}.*\n)+)/m.exec(banner)?.[1];
    expect(demo, banner).toMatch(/^ {2}ADMIN_TOKEN=[0-9a-f]{32} SLIDEGATE_URL=\S+ npm run --silent keys -- set demo\n {2}for i in /);
    const run = spawnSync("bash", ["-c", demo!], { encoding: "utf8", timeout: 60_000 });
    expect(run.stdout.trim().split("\n").at(-1), run.stderr).toBe("200 200 429 429 429 429");
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("shows a demo that registers its key with the user's own ADMIN_TOKEN from the shell, never printing it, and the demo runs as printed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
    const file = join(dir, ".dev.vars");
    const limits = { identity: { header: "x-api-key", required: true, unknownKeys: "reject" }, rules: [{ name: "tight", limit: 2, window: "10s" }] };
    writeFileSync(file, `RATE_LIMITS='${JSON.stringify(limits)}'\n`);
    const token = `own-${randomBytes(16).toString("hex")}`;
    const banner = await startBanner({ DEV_VARS_FILE: file, ADMIN_TOKEN: token });
    expect(banner).not.toContain(token);
    expect(banner).toMatch(/^Try it .*with your ADMIN_TOKEN from the environment exported in this shell/m);
    const demo = /^Try it[^\n]*\n((?: {2}.*\n)+)/m.exec(banner)?.[1];
    const run = spawnSync("bash", ["-c", demo!], { encoding: "utf8", timeout: 60_000, env: { ...process.env, ADMIN_TOKEN: token } });
    expect(run.stdout.trim().split("\n").at(-1), run.stderr).toBe("200 200 429 429 429 429");
    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev!.kill("SIGINT");
    expect(await exited).toBe(0);
  }, 120_000);

  it("names the port it wanted when that one is taken, and says where it runs instead", async () => {
    const { createServer } = await import("node:net");
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(0, "127.0.0.1", resolve));
    try {
      const wanted = (squatter.address() as { port: number }).port;
      const { ready, output } = await startDev("/dev/null", { GATE_PORT: String(wanted) });
      const port = new URL(ready.gate).port;
      expect(port).not.toBe(String(wanted));
      expect(output()).toContain(`(not ${wanted}, which is taken)`);
      expect(output()).toContain(`export SLIDEGATE_URL=http://127.0.0.1:${port}`);
      await ctrlC(ready);
    } finally {
      squatter.close();
    }
  }, 120_000);

  it("stops, naming RATE_LIMITS and where it came from, when the environment's is invalid", async () => {
    const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], {
      env: await devEnv({ UPSTASH_REDIS_REST_URL: "https://example.upstash.io", UPSTASH_REDIS_REST_TOKEN: "t", RATE_LIMITS: '{"rules":[]}' }),
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/RATE_LIMITS from the environment is invalid:\n {2}- RATE_LIMITS\.rules/);
    expect(run.stdout).not.toContain("SLIDEGATE_READY");
  });

  it("says how .dev.vars takes RATE_LIMITS when the value it read there is no JSON (double-quoted, or a TOML table)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
    for (const line of [
      // double quotes end at the JSON's first own quote: the file's reader hands over "{" alone
      'RATE_LIMITS="{"rules":[{"name":"default","limit":5,"window":"10s"}]}"',
      'RATE_LIMITS = { rules = [{ name = "default", limit = 5, window = "10s" }] }',
    ]) {
      const file = join(dir, ".dev.vars");
      writeFileSync(file, `${line}\n`);
      const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], { env: await devEnv({ DEV_VARS_FILE: file }), encoding: "utf8", timeout: 30_000 });
      expect(run.status, line).toBe(1);
      expect(run.stderr, line).toContain(`RATE_LIMITS from ${file} is invalid:\n  - RATE_LIMITS: is not valid JSON`);
      expect(run.stderr, line).toContain(`In ${file}, write RATE_LIMITS as JSON on one line, in single quotes: RATE_LIMITS='{"rules":[`);
      expect(run.stdout).not.toContain("SLIDEGATE_READY");
    }
  });

  it("uses Upstash credentials from .dev.vars and starts no Redis or shim", async () => {
    // The test shim stands in for Upstash: same REST API, same credentials shape.
    const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
    const file = join(dir, ".dev.vars");
    writeFileSync(file, `UPSTASH_REDIS_REST_URL=${services().shimUrl}\nUPSTASH_REDIS_REST_TOKEN=${services().shimToken}\n`);
    const { ready, output } = await startDev(file);
    expect(ready.mode).toBe("upstash");
    expect(output()).toMatch(/Upstash mode: credentials found, starting no local Redis or shim/);
    expect(output()).not.toMatch(/Redis: started|Shim:/);
    expect(output()).not.toContain(services().shimToken);
    expect(ready.pids).toEqual([ready.processGroup]); // wrangler only
    expect((await sixRequests(ready.gate)).codes).toEqual([200, 200, 200, 200, 200, 429]);
    await ctrlC(ready);
  }, 120_000);

  it("uses a Redis at REDIS_URL that answers, and starts none of its own", async () => {
    const redis = await startRedis(); // empty, so the demo's window is this test's alone
    try {
      const { ready, output } = await startDev("/dev/null", { REDIS_URL: redis.url });
      expect(output()).toContain(`Redis: using REDIS_URL ${redis.url}`);
      expect(output()).not.toMatch(/started redis-server/);
      expect((await sixRequests(ready.gate)).codes).toEqual([200, 200, 200, 200, 200, 429]);
      await ctrlC(ready);
      expect(await isListening(redis.port), "the Redis it did not start is left running").toBe(true);
    } finally {
      await redis.stop();
    }
  }, 120_000);

  it("stops, naming ADMIN_TOKEN, when it is shorter than the gate accepts (the gate would answer every request with its configuration error)", async () => {
    const short = "a-long-random-secret";
    const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], {
      env: { ...(await devEnv({ UPSTASH_REDIS_REST_URL: "https://example.upstash.io", UPSTASH_REDIS_REST_TOKEN: "t" })), ADMIN_TOKEN: short },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/ADMIN_TOKEN from the environment must be at least 32 characters/);
    expect(run.stderr + run.stdout).not.toContain(short);
    expect(run.stdout).not.toContain("SLIDEGATE_READY");
  });

  /**
   * A project directory of its own whose wrangler.toml's [vars] are `vars` (as TOML lines), its
   * Worker the one here: how a user's own wrangler.toml reaches npm run dev.
   */
  function projectWith(vars: string): string {
    const dir = mkdtempSync(join(tmpdir(), "dev-project-"));
    const worker = join(process.cwd(), "src/index.ts");
    writeFileSync(join(dir, "wrangler.toml"), `name = "slidegate"\nmain = ${JSON.stringify(worker)}\ncompatibility_date = "2026-08-01"\n\n[vars]\n${vars}\n`);
    return dir;
  }
  const limits = 'RATE_LIMITS = { rules = [{ name = "default", limit = 5, window = "10s" }] }';
  // No Redis to use and none to start: a launcher that went past its checks stops at Redis,
  // with another message, rather than starting a stack this test would have to stop.
  const noRedis = { PATH: "/nonexistent", REDIS_URL: "redis://127.0.0.1:9" };

  it("proxies to wrangler.toml's ORIGIN_URL rather than starting the demo origin in its place", async () => {
    const { createServer } = await import("node:http");
    const origin = createServer((_req, res) => res.end("the user's own origin"));
    await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(origin.address() as { port: number }).port}`;
      const { ready, output } = await startDev("/dev/null", {}, false, projectWith(`ORIGIN_URL = "${url}"\n${limits}`));
      expect(output()).toContain(`Origin: ${url} (ORIGIN_URL from wrangler.toml)`);
      expect(output()).not.toContain("demo echo API");
      expect(await (await fetch(`${ready.gate}/`)).text()).toBe("the user's own origin");
      await ctrlC(ready);
    } finally {
      origin.close();
    }
  }, 120_000);

  /** `npm run dev` run to its end with ORIGIN_URL from the environment and no Upstash store. */
  const devWithOriginFromEnv = async (origin: string) =>
    spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], { env: await devEnv({ ORIGIN_URL: origin, ...noRedis }), encoding: "utf8", timeout: 30_000 });

  it("stops, naming ORIGIN_URL and repeating neither, when it holds a user name or password (the runtime would drop them)", async () => {
    const r = await devWithOriginFromEnv("http://ouser:opass-hunter2@127.0.0.1:9");
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/ORIGIN_URL from the environment is invalid:\n {2}- ORIGIN_URL: must hold no user name or password/);
    expect(r.stderr + r.stdout).not.toMatch(/ouser|hunter2/);
  });

  it("stops, naming ORIGIN_URL and where it came from, when it has no scheme (the gate would answer every request with its configuration error)", async () => {
    const fromEnv = await devWithOriginFromEnv("api.internal.example");
    expect(fromEnv.status).toBe(1);
    expect(fromEnv.stderr).toMatch(/ORIGIN_URL from the environment is invalid:\n {2}- ORIGIN_URL: is not a URL: .*https:\/\/api\.example\.com/);
    expect(fromEnv.stderr).not.toContain("api.internal.example");
    const fromToml = spawnSync(process.execPath, [join(process.cwd(), "scripts/dev.ts"), "--ready-json"], {
      cwd: projectWith(`ORIGIN_URL = "localhost:8080"\n${limits}`),
      env: await devEnv(noRedis),
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(fromToml.status).toBe(1);
    expect(fromToml.stderr).toMatch(/ORIGIN_URL from wrangler\.toml is invalid:\n {2}- ORIGIN_URL: must be an http or https URL/);
  });

  it("stops, naming the missing one, when only one of the Upstash secrets is set, rather than running on a local Redis instead", async () => {
    for (const [given, missing] of [
      ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN"],
      ["UPSTASH_REDIS_REST_TOKEN", "UPSTASH_REDIS_REST_URL"],
    ] as const) {
      const dir = mkdtempSync(join(tmpdir(), "dev-vars-"));
      const file = join(dir, ".dev.vars");
      writeFileSync(file, `UPSTASH_REDIS_REST_URL=\nUPSTASH_REDIS_REST_TOKEN=\n${given}=${given.endsWith("URL") ? "https://example.upstash.io" : "a-token-value"}\n`);
      const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], { env: await devEnv({ DEV_VARS_FILE: file, ...noRedis }), encoding: "utf8", timeout: 30_000 });
      expect(run.status, given).toBe(1);
      expect(run.stderr, given).toContain(`${given} is set (in ${file}) but ${missing} is not`);
      expect(run.stderr, given).not.toMatch(/Local mode|a-token-value/);
    }
  });

  it("stops, naming UPSTASH_REDIS_REST_URL and never repeating it, when it is the database's URL with its password (the gate would answer every request with its configuration error)", async () => {
    for (const url of ["rediss://default:s3cretpw0rd@eu1-example.upstash.io:6379", "https://default:s3cretpw0rd@eu1-example.upstash.io"]) {
      const run = spawnSync(process.execPath, ["scripts/dev.ts"], {
        env: await devEnv({ UPSTASH_REDIS_REST_URL: url, UPSTASH_REDIS_REST_TOKEN: "a-token-value", ...noRedis }),
        encoding: "utf8",
        timeout: 60_000,
      });
      expect(run.status, url).toBe(1);
      expect(run.stdout, url).toMatch(/UPSTASH_REDIS_REST_URL from the environment is invalid:\n {2}- UPSTASH_REDIS_REST_URL: must/);
      expect(run.stdout + run.stderr, url).not.toMatch(/s3cretpw0rd|a-token-value|wrangler dev/);
    }
  }, 130_000);

  it("stops, naming UPSTASH_REDIS_REST_TOKEN and never repeating it, when it holds a line break no Authorization header can carry", async () => {
    const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], {
      env: await devEnv({ UPSTASH_REDIS_REST_URL: "https://eu1-example.upstash.io", UPSTASH_REDIS_REST_TOKEN: "AXsAAInc\nDEtoken", ...noRedis }),
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/UPSTASH_REDIS_REST_TOKEN from the environment is invalid:\n {2}- UPSTASH_REDIS_REST_TOKEN: holds a line break/);
    expect(run.stdout + run.stderr).not.toMatch(/AXsAAInc|DEtoken|wrangler dev/);
  }, 70_000);

  it("stops with install instructions when there is no Redis to use and no redis-server", async () => {
    const run = spawnSync(process.execPath, ["scripts/dev.ts", "--ready-json"], {
      env: { ...process.env, PATH: "/nonexistent", REDIS_URL: "redis://127.0.0.1:9", UPSTASH_REDIS_REST_URL: "", UPSTASH_REDIS_REST_TOKEN: "", DEV_VARS_FILE: "/dev/null" },
      encoding: "utf8",
      timeout: 30_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/REDIS_URL redis:\/\/127\.0\.0\.1:9 does not answer/);
    expect(run.stderr).toMatch(/redis-server is not installed.*apt-get install redis-server.*brew install redis/s);
    expect(run.stdout).not.toContain("SLIDEGATE_READY");
  });
});
