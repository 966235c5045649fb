import { createConnection, createServer, type Server, type Socket } from "node:net";
import { Redis } from "@upstash/redis";
import IORedis from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { createPool } from "../../scripts/shim/pool.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";

// A Redis and shim of this file's own: stopping them must not disturb other tests.
let redis: LocalRedis;
let shim: RunningShim;
beforeAll(async () => {
  redis = await startRedis();
  shim = await startShim({ token: "down-test", redisUrl: redis.url, log: () => {} });
});
afterAll(async () => {
  await shim?.close();
  await redis?.stop();
});

const post = (path: string, body: unknown) =>
  fetch(shim.url + path, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { authorization: "Bearer down-test" },
    // a hang fails the test instead of stalling it
    signal: AbortSignal.timeout(5000),
  });

describe("shim while Redis is down", () => {
  it("answers a JSON 503 at once, and serves again once Redis is back, without a restart", async () => {
    const client = new Redis({ url: shim.url, token: "down-test", enableTelemetry: false });
    expect(await client.set("k", "before")).toBe("OK");

    await redis.stop();
    const down = await post("/", ["GET", "k"]);
    expect(down.status).toBe(503);
    expect(await down.json()).toEqual({ error: expect.stringMatching(/^ERR redis unavailable/) });
    for (const path of ["/pipeline", "/multi-exec"]) {
      const batch = await post(path, [["PING"]]);
      expect(batch.status, path).toBe(503);
      expect(await batch.json()).toEqual({ error: expect.stringMatching(/^ERR redis unavailable/) });
    }
    // a stream opens a connection of its own: its failure names no address of Redis's
    const monitor = await post("/monitor", []);
    expect(monitor.status).toBe(503);
    expect(await monitor.json()).toEqual({ error: "ERR redis unavailable" });
    await expect(client.get("k")).rejects.toThrow(/redis unavailable/);

    await redis.start();
    let answer: unknown;
    for (let attempt = 0; attempt < 50 && answer !== "PONG"; attempt++) {
      answer = await client.ping().catch(() => undefined);
      if (answer !== "PONG") await new Promise((r) => setTimeout(r, 100));
    }
    expect(answer).toBe("PONG");
    expect(await client.set("k", "after")).toBe("OK"); // a fresh, empty Redis
    expect(await client.get("k")).toBe("after");
  });
});

describe("a shared connection held by a command that never ends", () => {
  it("is closed and opened afresh once the command times out, so the commands after it are served", async () => {
    // the policy refuses every blocking form it knows; this is the pool beneath it, for one it missed
    const pool = await createPool(redis.url, { size: 1, commandTimeoutMs: 300 });
    try {
      const [blocked] = (await pool.exec([["BLPOP", "never-pushed", "0"]]))[0]!;
      expect(blocked?.message).toMatch(/Command timed out/);
      let answer: unknown;
      for (let attempt = 0; attempt < 50 && answer === undefined; attempt++) {
        const [error, reply] = (await pool.exec([["PING"]]))[0]!;
        if (error === null) answer = reply;
        else await new Promise((r) => setTimeout(r, 100)); // reconnecting
      }
      expect(String(answer)).toBe("PONG");
    } finally {
      await pool.close();
    }
  });
});

describe("a shared connection closed after a slow script's timeout", () => {
  it("gets no new commands until it has reconnected: those sent meanwhile are served on the others", async () => {
    const pool = await createPool(redis.url, { size: 2, commandTimeoutMs: 1000 });
    try {
      // a script busy for 1.6 s: its connection times out at 1 s and is closed, though its
      // socket reads "ready" until Redis is done with the script
      const busy =
        "local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; while true do local u = redis.call('TIME'); if u[1] * 1e6 + u[2] - s > 1600000 then break end end; return 1";
      const [timedOut] = (await pool.exec([["EVAL", busy, "0"]]))[0]!;
      expect(timedOut?.message).toMatch(/Command timed out/);
      const replies = await Promise.all(Array.from({ length: 6 }, () => pool.exec([["PING"]])));
      expect(
        replies.map((r) => {
          const [error, reply] = r[0]!;
          return error ? error.message : String(reply);
        }),
      ).toEqual(Array(6).fill("PONG"));
    } finally {
      await pool.close();
    }
  });
});

describe("a Redis that evicts keys when full", () => {
  it("is named at the shim's start, with the setting to use instead; noeviction, or no memory cap, is not", async () => {
    const evicting = await startRedis({ args: ["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"] });
    const capped = await startRedis({ args: ["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"] });
    try {
      const linesOf = async (url: string) => {
        const lines: string[] = [];
        const started = await startShim({ token: "evict-test", redisUrl: url, log: (line) => lines.push(line) });
        await started.close();
        return lines;
      };
      expect(await linesOf(evicting.url)).toEqual([
        expect.stringMatching(/warning: Redis evicts keys when full \(maxmemory-policy volatile-lru\).*Set maxmemory-policy noeviction/),
      ]);
      expect(await linesOf(capped.url)).toEqual([]);
      expect(await linesOf(redis.url)).toEqual([]);
    } finally {
      await evicting.stop();
      await capped.stop();
    }
  });
});

/**
 * One address in front of whichever Redis is the primary, as a DNS name, a floating address or
 * a load balancer is: a failover moves it, and the connections already open stay where they were.
 */
async function oneAddress(port: number): Promise<{ url: string; moveTo(port: number): void; close(): Promise<void> }> {
  let target = port;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port: target });
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      sockets.add(a);
      a.pipe(b);
      a.on("error", () => b.destroy());
      a.on("close", () => {
        sockets.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as { port: number }).port}`,
    moveTo(port) {
      target = port;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Runs `body` with a shim that knows one address, leading to a primary; `failover()` moves the
 * address to a new primary and makes the old one its replica, while every connection the shim
 * holds still ends at the old one.
 */
async function withFailover(body: (stack: { client: Redis; failover: () => Promise<void>; newPrimaryUrl: string }) => Promise<void>) {
  const [oldPrimary, newPrimary] = await Promise.all([startRedis(), startRedis()]);
  const address = await oneAddress(oldPrimary.port);
  const shim = await startShim({ token: "failover-test", redisUrl: address.url, log: () => {} });
  const demoted = new IORedis(oldPrimary.url);
  try {
    const client = new Redis({ url: shim.url, token: "failover-test", enableTelemetry: false });
    const failover = async () => {
      address.moveTo(newPrimary.port);
      await demoted.replicaof("127.0.0.1", String(newPrimary.port));
    };
    await body({ client, failover, newPrimaryUrl: newPrimary.url });
  } finally {
    demoted.disconnect();
    await shim.close();
    await address.close();
    await Promise.all([oldPrimary.stop(), newPrimary.stop()]);
  }
}

describe("a failover behind the one address the shim knows", () => {
  it("the demoted primary's READONLY makes the shim open its connections afresh: writes reach the new primary promptly, not never", async () => {
    await withFailover(async ({ client, failover, newPrimaryUrl }) => {
      expect(await client.set("k", "before")).toBe("OK");
      await failover();
      const answers: string[] = [];
      // the first connection opened afresh at once; a wide margin for a loaded machine
      const deadline = performance.now() + 5000;
      let written = false;
      while (!written && performance.now() < deadline) {
        const answer = String(await client.set("k", "after").catch((e: Error) => e.message));
        answers.push(answer);
        written = answer === "OK";
      }
      expect(written, `answers: ${[...new Set(answers)].join(" | ")}`).toBe(true);
      const direct = new IORedis(newPrimaryUrl);
      expect(await direct.get("k")).toBe("after");
      direct.disconnect();
    });
  });

  it("a transaction's connection kept for the next one, on the demoted primary, is not kept: the next transaction reaches the new primary", async () => {
    await withFailover(async ({ client, failover }) => {
      const transaction = () =>
        client
          .multi()
          .set("t", "v")
          .exec()
          .then(String, (e: Error) => e.message);
      // its connection goes back to those kept for the next transaction
      expect(await transaction()).toBe("OK");
      await failover();
      // on the demoted primary, the queued SET is refused and the transaction discarded
      expect(await transaction()).toMatch(/EXECABORT|READONLY/);
      expect(await transaction()).toBe("OK");
    });
  });
});

describe("a REDIS_URL that leads to a replica for good", () => {
  it("opens each connection afresh at most once a second, not at every write, and answers each write READONLY and each read beside them, none cut off", async () => {
    // a replica of a primary that never answers: it takes no write, whatever the shim does
    const replica = await startRedis();
    const admin = new IORedis(replica.url);
    await admin.set("sg:{caller}:block", "the operator's block");
    await admin.replicaof("127.0.0.1", "1");
    const shimOnReplica = await startShim({ token: "replica-test", redisUrl: replica.url, log: () => {} });
    try {
      // each write a request of its own, as each of a gate's decisions is
      const client = new Redis({ url: shimOnReplica.url, token: "replica-test", enableTelemetry: false, enableAutoPipelining: false });
      const connections = async () => Number(/total_connections_received:(\d+)/.exec(await admin.info("stats"))![1]);
      const before = await connections();
      const started = performance.now();
      // writes side by side, as a gate's decisions come, each followed by the read a gate makes
      // when its script is refused (the caller's block): a Redis that takes no writes still
      // answers reads, and the gate refuses a blocked caller only if that read is served. A
      // connection closed under them as it was opened afresh cut off the commands sent on it
      // ("ERR redis unavailable"), and the gate fell back on the rules' fail mode.
      const writes: string[] = [];
      const reads: string[] = [];
      for (let round = 0; round < 20; round++) {
        await Promise.all(
          Array.from({ length: 10 }, async (_, i) => {
            writes.push(await client.set(`k${i}`, "v").then(String, (e: Error) => e.message));
            reads.push(await client.get("sg:{caller}:block").then(String, (e: Error) => e.message));
          }),
        );
      }
      const seconds = (performance.now() - started) / 1000;
      const opened = (await connections()) - before;
      expect(writes.filter((a) => !a.startsWith("READONLY You can't write against a read only replica."))).toEqual([]);
      expect(reads.filter((a) => a !== "the operator's block")).toEqual([]);
      // the pool's 4 connections, each at most once a second (and once more at the start of it)
      expect(opened, `${opened} connections in ${seconds.toFixed(2)} s`).toBeLessThanOrEqual(4 * (Math.ceil(seconds) + 1));
    } finally {
      await shimOnReplica.close();
      admin.disconnect();
      await replica.stop();
    }
  });
});
