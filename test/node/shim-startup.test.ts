import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import IORedis from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../scripts/lib/ports.ts";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { startShim } from "../../scripts/shim/server.ts";
import { services } from "../helpers/shim.ts";

/** `node scripts/shim/main.ts` with this environment over the test's own, run to its end. */
function shimCli(env: Record<string, string>) {
  return spawnSync(process.execPath, ["scripts/shim/main.ts"], {
    env: { ...process.env, REDIS_URL: services().redisUrl, SHIM_PORT: "0", SHIM_PREVIOUS_TOKEN: "", ...env },
    encoding: "utf8",
    timeout: 20_000,
  });
}

describe("the shim's token, by where it listens", () => {
  // the gate holds its admin token to 32 characters; a REST token that opens the database
  // to the network is worth no less
  const short = "short-but-secret";

  for (const host of ["0.0.0.0", "::", "10.0.0.5"]) {
    it(`refuses a SHIM_TOKEN shorter than 32 characters on ${host}, naming SHIM_TOKEN and why, without printing it`, () => {
      const run = shimCli({ SHIM_TOKEN: short, SHIM_HOST: host });
      expect(run.status).toBe(1);
      expect(run.stderr).toMatch(/SHIM_TOKEN is 16 characters: listening on .* beyond loopback, it must be at least 32/);
      expect(run.stderr).toContain("openssl rand -hex 32");
      expect(run.stderr + run.stdout).not.toContain(short);
      expect(run.stdout).not.toContain("listening on http");
    });
  }

  it("refuses a short SHIM_PREVIOUS_TOKEN beyond loopback too: it opens the database as well", () => {
    const run = shimCli({ SHIM_TOKEN: "a".repeat(32), SHIM_PREVIOUS_TOKEN: short, SHIM_HOST: "0.0.0.0" });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/SHIM_PREVIOUS_TOKEN is 16 characters/);
  });

  it("says how to make a token without assuming how the shim was launched", () => {
    const run = shimCli({ SHIM_TOKEN: "" });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/SHIM_TOKEN is not set/);
    expect(run.stderr).toContain("openssl rand -hex 32");
    expect(run.stderr).not.toMatch(/npm run|npx/);
  });

  it("refuses a short token beyond loopback from startShim as well, before it connects or listens", async () => {
    await expect(startShim({ token: short, host: "0.0.0.0", redisUrl: "redis://127.0.0.1:9", log: () => {} })).rejects.toThrow(
      /token is 16 characters: listening on 0\.0\.0\.0, beyond loopback, it must be at least 32/,
    );
  });

  it("takes a short token on loopback (local development), and a long one anywhere", async () => {
    for (const [token, host] of [
      [short, "127.0.0.1"],
      [short, "localhost"],
      ["b".repeat(32), "0.0.0.0"],
    ] as const) {
      const shim = await startShim({ token, host, redisUrl: services().redisUrl, log: () => {} });
      const port = new URL(shim.url).port;
      const res = await fetch(`http://127.0.0.1:${port}/`, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${token}` } });
      expect(await res.json(), host).toEqual({ result: "PONG" });
      await shim.close();
    }
  });
});

describe("a token no client can present", () => {
  // HTTP strips whitespace from the end of a header value, and no header carries a control
  // character or a character past U+00FF: a shim started with such a token answers every
  // request 401, and nothing says why
  const unpresentable: [string, string][] = [
    ["a carriage return at its end (a token file with Windows line endings)", "a-token-read-from-a-windows-file\r"],
    ["a space at its end", "a-token-pasted-with-a-space "],
    ["a line break inside", "a-token\nacross-two-lines"],
    ["a control character", "a-token-with-an-escape\u001b"],
    ["a character past U+00FF", "a-token-with-a-key-\u{1f511}"],
  ];

  it("refuses such a token, or such a previous token, from startShim, naming the problem without printing it", async () => {
    for (const [what, token] of unpresentable) {
      for (const options of [{ token }, { token: "a-good-token", previousToken: token }]) {
        const started = startShim({ ...options, redisUrl: services().redisUrl, log: () => {} });
        const outcome = await started.then(
          async (shim) => {
            await shim.close();
            return "started";
          },
          (e: Error) => e.message,
        );
        expect(outcome, what).toMatch(/^startShim: (token|previousToken) (ends with whitespace|holds a)/);
        expect(outcome).not.toContain(token.trim());
      }
    }
  });

  it("refuses it through the command, under its own name", () => {
    const run = shimCli({ SHIM_TOKEN: "a-token-read-from-a-windows-file\r" });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^slidegate shim: SHIM_TOKEN ends with whitespace/m);
    expect(run.stderr + run.stdout).not.toContain("a-token-read-from-a-windows-file");
  });

  it("still takes a token with a tab or a space inside, or a Latin-1 letter, and serves the client that sends it", async () => {
    for (const token of ["a-token\twith-a-tab", "a token with spaces", "a-token-café"]) {
      const shim = await startShim({ token, redisUrl: services().redisUrl, log: () => {} });
      const res = await fetch(shim.url, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${token}` } });
      expect(await res.json(), token).toEqual({ result: "PONG" });
      await shim.close();
    }
  });
});

describe("the shim's start against a Redis that wants a password", () => {
  let redis: LocalRedis;
  beforeAll(async () => {
    redis = await startRedis();
    const admin = new IORedis(redis.url);
    await admin.call("CONFIG", "SET", "requirepass", "the-right-one");
    admin.disconnect();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it("names authentication when the password is wrong (WRONGPASS) or missing (NOAUTH), not a lost connection", async () => {
    for (const [url, reply] of [
      [redis.url.replace("redis://", "redis://:a-wrong-one@"), "WRONGPASS"],
      [redis.url.replace("redis://", "redis://nobody:a-wrong-one@"), "WRONGPASS"],
      [redis.url, "NOAUTH"],
    ] as const) {
      const lines: string[] = [];
      const started = startShim({ token: "auth-test", redisUrl: url, log: (line) => lines.push(line) });
      await expect(started, url).rejects.toThrow(new RegExp(`^Redis refused the shim's credentials \\(${reply} .*\\): check the user name and password in the Redis URL`));
      await expect(started).rejects.not.toThrow(/a-wrong-one/);
      expect(
        lines.filter((l) => l.includes("connection lost")),
        url,
      ).toEqual([]);
    }
  });

  it("names the Redis it serves without its password for a URL without a scheme, which ioredis reads as redis://", async () => {
    // ioredis connects by `default:password@host:port` as by redis://…; read as a WHATWG URL it
    // has a scheme "default:" and no password, and the ready line printed the password whole
    const bare = redis.url.replace("redis://", "default:the-right-one@");
    const shim = await startShim({ token: "auth-test", redisUrl: bare, log: () => {} });
    try {
      const res = await fetch(shim.url, { method: "POST", body: '["PING"]', headers: { authorization: "Bearer auth-test" } });
      expect(await res.json()).toEqual({ result: "PONG" });
      expect(shim.redis).toBe(redis.url.replace("redis://", "redis://default@"));
    } finally {
      await shim.close();
    }
  });

  it("refuses cluster credentials without cluster nodes, pointing to the Redis URL, without printing them", () => {
    for (const name of ["REDIS_CLUSTER_PASSWORD", "REDIS_CLUSTER_USERNAME"]) {
      const run = shimCli({ SHIM_TOKEN: "auth-test", [name]: "a-wrong-one" });
      expect(run.status, name).toBe(1);
      expect(run.stderr).toContain(`slidegate shim: ${name} goes with REDIS_CLUSTER_NODES; a single Redis takes its credentials in REDIS_URL`);
      expect(run.stderr + run.stdout).not.toContain("a-wrong-one");
    }
  });

  it("says so through the command, under its own name", () => {
    const run = shimCli({ SHIM_TOKEN: "auth-test", REDIS_URL: redis.url.replace("redis://", "redis://:a-wrong-one@") });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^slidegate shim: cannot start: Redis refused the shim's credentials \(WRONGPASS /m);
    expect(run.stderr).not.toContain("a-wrong-one");
  });
});

describe("the shim's start without a Redis to reach", () => {
  it('names the Redis it cannot reach and why, without its password, where it said only "Connection is closed."', async () => {
    // a Redis that has stopped: nothing listens at its address any more, as when a newcomer has not started one
    const redis = await startRedis();
    await redis.stop();
    const url = redis.url.replace("redis://", "redis://:a-secret-one@");
    const where = redis.url.replaceAll(".", "\\.");
    const started = startShim({ token: "unreachable-test", redisUrl: url, log: () => {} });
    await expect(started).rejects.toThrow(new RegExp(`^cannot reach Redis at ${where} \\(connect ECONNREFUSED [^)]+\\)$`));
    await expect(started).rejects.not.toThrow(/a-secret-one/);

    const run = shimCli({ SHIM_TOKEN: "unreachable-test", REDIS_URL: url });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(
      new RegExp(`^slidegate shim: cannot start: cannot reach Redis at ${where} \\(connect ECONNREFUSED [^)]+\\): start it there, or set REDIS_URL to the Redis to use$`, "m"),
    );
    expect(run.stderr + run.stdout).not.toContain("a-secret-one");
  });
});

describe("the shim's start with a Redis URL that names a database", () => {
  it("refuses a database the Redis does not have, naming it, where it served database 0 in its place", async () => {
    const { redisUrl } = services();
    const started = startShim({ token: "database-test", redisUrl: `${redisUrl}/99`, log: () => {} });
    await expect(started).rejects.toThrow(/^the Redis URL names database 99, which this Redis does not have \(ERR DB index is out of range\)/);
    // one it has is served, and is that one
    const shim = await startShim({ token: "database-test", redisUrl: `${redisUrl}/7`, log: () => {} });
    try {
      const key = `database-test-${process.pid}`;
      const res = await fetch(shim.url, { method: "POST", body: JSON.stringify(["SET", key, "7"]), headers: { authorization: "Bearer database-test" } });
      expect(await res.json()).toEqual({ result: "OK" });
      const direct = new IORedis(`${redisUrl}/7`);
      expect(await direct.getdel(key)).toBe("7");
      direct.disconnect();
    } finally {
      await shim.close();
    }
  });

  it("says of a database on a Redis Cluster's node that a cluster has database 0 alone and takes REDIS_CLUSTER_NODES, not how many databases the Redis has", async () => {
    const dir = mkdtempSync(join(tmpdir(), "shim-cluster-node-"));
    const node = await startRedis({ args: ["--cluster-enabled", "yes", "--cluster-port", String(await freePort()), "--dir", dir] });
    try {
      const started = startShim({ token: "database-test", redisUrl: `${node.url}/3`, log: () => {} });
      await expect(started).rejects.toThrow(
        /^the Redis URL names database 3, but this Redis is a Redis Cluster's node \(ERR SELECT is not allowed in cluster mode\), which has database 0 alone: set REDIS_CLUSTER_NODES to the cluster's nodes, and no database/,
      );
      await expect(started).rejects.not.toThrow(/databases setting/);
    } finally {
      await node.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the shim's start with a Redis URL that does not parse", () => {
  it('says the URL does not parse and how to write it, without printing it, where it said only "Invalid URL" or "URI malformed"', async () => {
    // a password with an unencoded / before the host (new URL refuses it), and one with a % that
    // starts no escape (ioredis's decodeURIComponent refuses it)
    for (const url of ["redis://:a/secret-one@127.0.0.1:6379", "redis://:a%zzsecret-one@127.0.0.1:6379"]) {
      const started = startShim({ token: "unparseable-test", redisUrl: url, log: () => {} });
      await expect(started, url).rejects.toThrow(
        /^the Redis URL does not parse \((Invalid URL|URI malformed)\): write it as redis:\/\/user:password@host:port, with any \/ \? # @ : % in the user name or password percent-encoded$/,
      );
      await expect(started).rejects.not.toThrow(/secret-one/);
      const run = shimCli({ SHIM_TOKEN: "unparseable-test", REDIS_URL: url });
      expect(run.status, url).toBe(1);
      expect(run.stderr).toMatch(/^slidegate shim: cannot start: the Redis URL does not parse /m);
      expect(run.stderr + run.stdout).not.toContain("secret-one");
    }
  });
});
