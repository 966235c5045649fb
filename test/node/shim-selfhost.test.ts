import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../scripts/lib/ports.ts";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { stopGroup } from "../helpers/process-group.ts";

/**
 * The README's "In front of a production Redis" commands, run as written (bash, from a
 * directory inside the repository, with the environment the README asks for), then checked
 * with the official client over the HTTPS they set up.
 */

interface Step {
  command: string;
  /** the README's `# …` line after it: the output it promises */
  expected?: string;
}

/** The sh blocks of the README section, as commands with the output each promises. */
function readmeSteps(): Step[][] {
  const readme = readFileSync("README.md", "utf8");
  const section = readme.slice(readme.indexOf("### In front of a production Redis"), readme.indexOf("## Deploy"));
  const blocks = [...section.matchAll(/^( *)```sh\n([\s\S]*?)^ *```/gm)].map(([, indent, body]) =>
    body!
      .split("\n")
      .map((line) => line.slice(indent!.length))
      .join("\n"),
  );
  return blocks.map((block) => {
    const steps: Step[] = [];
    const lines = block
      .replace(/\\\n\s*/g, "")
      .split("\n")
      .filter(Boolean);
    for (const line of lines) {
      if (!line.startsWith("#")) steps.push({ command: line });
      else if (steps.length && steps[steps.length - 1]!.expected === undefined && /^# ({|slidegate shim listening)/.test(line)) steps[steps.length - 1]!.expected = line.slice(2);
    }
    return steps;
  });
}

let redis: LocalRedis;
let dir: string;
let port: number;
let env: Record<string, string>;
const shims: ChildProcess[] = [];

beforeAll(async () => {
  redis = await startRedis();
  port = await freePort();
  dir = resolve(mkdtempSync(join("test", ".readme-selfhost-")));
  env = { ...(process.env as Record<string, string>), REDIS_ADMIN_URL: redis.url, REDIS_ADDRESS: `127.0.0.1:${redis.port}`, SHIM_PORT: String(port) };
});
afterAll(async () => {
  for (const shim of shims) await stopGroup(shim);
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs one README step; a step ending in `npm run shim` runs on until stopped. */
async function run(step: Step): Promise<string> {
  if (/npm run shim$/.test(step.command)) {
    const shim = spawn("bash", ["-c", step.command], { cwd: dir, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    shims.push(shim);
    let out = "";
    let err = "";
    shim.stderr!.on("data", (c: Buffer) => (err += c.toString()));
    return new Promise((resolve, reject) => {
      shim.stdout!.on("data", (c: Buffer) => {
        out += c.toString();
        const line = out.split("\n").find((l) => l.startsWith("slidegate shim listening"));
        if (line) resolve(line);
      });
      shim.once("exit", (code) => reject(new Error(`the shim exited (${code}): ${err}`)));
    });
  }
  const done = spawnSync("bash", ["-c", step.command], { cwd: dir, env, encoding: "utf8" });
  expect(done.status, `${step.command}\n${done.stderr}`).toBe(0);
  return done.stdout.trim();
}

/** @upstash/redis in a Node of its own that trusts the README's certificate, as a client would. */
function client(code: string, token: string): Record<string, unknown> {
  const file = join(dir, "client.mjs");
  writeFileSync(
    file,
    `import { Redis } from "@upstash/redis";
import { Ratelimit } from "@upstash/ratelimit";
const redis = new Redis({ url: process.env.SHIM_URL, token: process.env.SHIM_CLIENT_TOKEN, enableTelemetry: false, retry: false });
const settle = (p) => p.then((value) => ({ value }), (e) => ({ error: e.message }));
const out = {};
${code}
console.log(JSON.stringify(out));`,
  );
  const done = spawnSync(process.execPath, [file], {
    cwd: dir,
    encoding: "utf8",
    env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "shim-cert.pem"), SHIM_URL: `https://localhost:${port}`, SHIM_CLIENT_TOKEN: token },
  });
  expect(done.status, done.stderr).toBe(0);
  return JSON.parse(done.stdout) as Record<string, unknown>;
}

const token = (name: string) => readFileSync(join(dir, name), "utf8").trim();

describe("README: the shim in front of a production Redis", () => {
  it("has the section, with the setup and rotation commands", () => {
    const [setup, rotation] = readmeSteps();
    expect(setup!.map((s) => s.command.split(" ")[0])).toEqual(["openssl", "openssl", "printf", "openssl", "SHIM_TOKEN=$(cat", "curl"]);
    expect(rotation!.length).toBe(2);
  });

  it("sets up the ACL user, the certificate and the HTTPS shim as written, and serves the official client over TLS", async () => {
    const [setup] = readmeSteps();
    for (const step of setup!) {
      const output = await run(step);
      if (step.expected?.startsWith("slidegate shim listening")) {
        const pattern = step.expected
          .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
          .replace("8079", String(port))
          .replace("…", ".+");
        expect(output).toMatch(new RegExp(`^${pattern}$`));
      } else if (step.expected) {
        expect(output).toBe(step.expected);
      }
    }

    const user = spawnSync("redis-cli", ["-u", redis.url, "ACL", "GETUSER", "slidegate-shim"], { encoding: "utf8" }).stdout;
    expect(user).toContain("-@admin");

    const out = client(
      `
      out.set = await redis.set("selfhost:k", "over tls");
      out.get = await redis.get("selfhost:k");
      // an hour's window: the client's approximate window lets a third call in when the calls straddle its boundary
      const limiter = new Ratelimit({ redis, limiter: Ratelimit.slidingWindow(2, "1 h"), prefix: "selfhost:rl" });
      out.limited = [];
      for (let i = 0; i < 3; i++) out.limited.push((await limiter.limit("caller")).success);
      out.config = await settle(redis.exec(["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]));
      out.luaSwapdb = await settle(redis.eval("return redis.call('SWAPDB', 0, 1)", [], []));
      out.luaSelect = await settle(redis.eval("return redis.call('SELECT', 1)", [], []));
      out.luaRestore = await settle(redis.eval("return redis.call('RESTORE', 'selfhost:r', 0, 'payload')", [], []));
      const monitor = await fetch(process.env.SHIM_URL + "/monitor", { method: "POST", headers: { authorization: "Bearer " + process.env.SHIM_CLIENT_TOKEN } });
      out.monitor = { status: monitor.status, body: await monitor.json() };
    `,
      token("shim-token"),
    );
    expect(out.set).toBe("OK");
    expect(out.get).toBe("over tls");
    expect(out.limited).toEqual([true, true, false]);
    expect(out.config).toEqual({ error: expect.stringContaining("Command is not available: 'CONFIG SET'") });
    // the ACL holds Lua to the same line the policy holds REST to
    expect(out.luaSwapdb).toEqual({ error: expect.stringContaining("The user executing the script can't run this command") });
    expect(out.luaSelect).toEqual({ error: expect.stringContaining("The user executing the script can't run this command") });
    expect(out.luaRestore).toEqual({ error: expect.stringContaining("The user executing the script can't run this command") });
    expect(out.monitor).toEqual({ status: 400, body: { error: expect.stringMatching(/^NOPERM .*'monitor'/) } });

    // HTTPS only, with that certificate: plain HTTP and an untrusting client both fail
    await expect(fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: '["PING"]' })).rejects.toThrow();
    await expect(fetch(`https://localhost:${port}/`, { method: "POST", body: '["PING"]' })).rejects.toThrow();
  }, 60_000);

  it("rotates the token as written: old and new both work until the restart without the old", async () => {
    for (const shim of shims) await stopGroup(shim);
    const [, rotation] = readmeSteps();
    for (const step of rotation!) await run(step);
    const [fresh, old] = [token("shim-token"), token("shim-token.old")];
    expect(fresh).not.toBe(old);
    for (const t of [fresh, old]) expect(client(`out.ping = await redis.ping();`, t)).toEqual({ ping: "PONG" });
    expect(client(`out.ping = await settle(redis.ping());`, "not-a-token")).toEqual({ ping: { error: expect.stringContaining("Unauthorized") } });
  }, 60_000);
});
