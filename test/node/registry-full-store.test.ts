import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Redis from "ioredis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// A Redis of this file's own that fills up (maxmemory under noeviction) just as an operator's
// registry write reaches it — after the admin call's authentication, which writes too: a
// write the store refuses must leave every entry as it was, never half of it.
// Worker → a proxy that fills Redis before the write it is armed for → shim → redis-server.
const ADMIN = randomBytes(32).toString("hex");
let redis: LocalRedis;
let admin: Redis;
let shim: RunningShim;
let proxy: Server;
let gate: Miniflare;
/** set: the next store call whose body holds this command fills Redis before it is passed on */
let fillBefore: string | undefined;
/**
 * set: the next pipeline holding `command` runs its first command alone, then `between`, then the
 * rest — as a store that runs a pipeline's commands one by one (Upstash's are not atomic) lets
 * anything land between them
 */
let splitAt: { command: string; between: () => Promise<unknown> } | undefined;

/** A pipeline's commands sent one part at a time: its first command, `between`, then the rest, their answers joined. */
async function splitPipeline(target: string, headers: Record<string, string>, commands: unknown[][], between: () => Promise<unknown>): Promise<Response> {
  const send = (part: unknown[][]) => fetch(`${target}/pipeline`, { method: "POST", headers, body: JSON.stringify(part) });
  const first = (await (await send(commands.slice(0, 1))).json()) as unknown[];
  await between();
  const rest = await send(commands.slice(1));
  return new Response(JSON.stringify([...first, ...((await rest.json()) as unknown[])]), { status: rest.status, headers: { "content-type": "application/json" } });
}

async function startFillingProxy(target: string): Promise<string> {
  proxy = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    if (fillBefore && body.toString().toLowerCase().includes(`["${fillBefore}"`)) {
      fillBefore = undefined;
      await admin.config("SET", "maxmemory", "1");
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "content-length")) as Record<string, string>;
    let upstream: Response;
    const split = splitAt;
    if (split && req.url === "/pipeline" && body.toString().toLowerCase().includes(`["${split.command}"`)) {
      splitAt = undefined;
      upstream = await splitPipeline(target, headers, JSON.parse(body.toString()) as unknown[][], split.between);
    } else upstream = await fetch(target + (req.url ?? "/"), { method: req.method, headers, body });
    res.writeHead(upstream.status, Object.fromEntries(upstream.headers)).end(Buffer.from(await upstream.arrayBuffer()));
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
}

beforeAll(async () => {
  const token = randomBytes(16).toString("hex");
  redis = await startRedis();
  admin = new Redis(redis.url);
  shim = await startShim({ token, redisUrl: redis.url, log: () => {} });
  const proxyUrl = await startFillingProxy(shim.url);
  const RATE_LIMITS = rateLimits({
    identity: { header: "x-api-key", unknownKeys: "defaultTier" },
    defaultTier: "free",
    tiers: { free: { rules: [{ name: "minute", limit: 5, window: "1m" }] }, paid: { rules: [{ name: "minute", limit: 50, window: "1m", fail: "closed" }] } },
  });
  gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxyUrl, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN: ADMIN });
}, 60_000);

afterAll(async () => {
  await gate?.dispose();
  admin?.disconnect();
  proxy?.closeAllConnections();
  await new Promise((resolve) => proxy?.close(resolve));
  await shim?.close();
  await redis?.stop();
});

const call = async (route: string, body: unknown) => {
  const res = await gate.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": "198.51.100.1" },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

/** Runs `write`, Redis filling up just before its call with `command` arrives (`afterFirst`: after the first command of the pipeline holding it). */
async function fullAt(command: string, write: () => Promise<{ status: number }>, afterFirst = false) {
  if (afterFirst) splitAt = { command, between: () => admin.config("SET", "maxmemory", "1") };
  else fillBefore = command;
  try {
    expect((await write()).status).toBe(503);
  } finally {
    fillBefore = undefined;
    splitAt = undefined;
    await admin.config("SET", "maxmemory", "0");
  }
}

describe("the registry on a full store (noeviction)", () => {
  it("a keys/set the store refuses leaves the entry it would have replaced: a disabled key stays disabled", async () => {
    const key = `full-set-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "free", disabled: true, overrides: { minute: { limit: 1 } } })).status).toBe(200);
    const before = (await call("keys/get", { key })).body;
    await fullAt("del", () => call("keys/set", { key, tier: "paid", label: "renewed" }));
    expect((await call("keys/get", { key })).body).toEqual(before);
    const res = await gate.dispatchFetch("http://gate.example/", { headers: { "x-api-key": key, "cf-connecting-ip": "198.51.100.2" } });
    await res.arrayBuffer();
    expect(res.status).toBe(403);
  });

  it("an import the store refuses leaves every entry as it was: no override dropped, no disabled key enabled", async () => {
    const key = `full-import-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "free", disabled: true, overrides: { minute: { limit: 1 } } })).status).toBe(200);
    const before = (await call("keys/get", { key })).body;
    // an entry that names no tier is written by a script (the default tier only where it has none)
    await fullAt("eval", () => call("keys/import", { entries: [{ key, disabled: false, label: "renewed", overrides: { minute: { limit: 2 } } }] }));
    expect((await call("keys/get", { key })).body).toEqual(before);
  });

  it("an import of a new key that the store refuses after its first command registers nothing: a key imported disabled is never let through enabled", async () => {
    const key = `full-new-${randomBytes(4).toString("hex")}`;
    await fullAt("zadd", () => call("keys/import", { entries: [{ key, disabled: true, label: "fraud" }] }), true);
    expect((await call("keys/get", { key })).status).toBe(404);
    expect(((await call("keys/list", { limit: 1000 })).body.entries as { label?: string }[]).some((e) => e.label === "fraud")).toBe(false);
  });

  it("a key the registry moved to a tier that fails closed is refused 503 by a full store, on an isolate that never saw the move", async () => {
    // this isolate has not decided the key: it would ask with its configured tier (the default,
    // free, which fails open); the registry's tier, read without the script, decides the fail mode
    const key = `full-moved-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "paid" })).status).toBe(200);
    await admin.config("SET", "maxmemory", "1");
    try {
      const res = await gate.dispatchFetch("http://gate.example/", { headers: { "x-api-key": key, "cf-connecting-ip": "198.51.100.3" } });
      await res.arrayBuffer();
      expect(res.status).toBe(503);
      expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
  });
});

describe("the admin API on a full store (noeviction), or one that takes no writes otherwise", () => {
  /** An admin call from `ip` with `token`, on a store that stays full for the whole test. */
  const from = async (ip: string, token: string, route: string, body: unknown) => {
    const res = await gate.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": ip },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it("lets the operator in to read and to free memory: usage, keys/get, reset and keys/delete answer while the store refuses writes", async () => {
    const key = `full-admin-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "paid", label: "to go" })).status).toBe(200);
    await admin.config("SET", "maxmemory", "1");
    try {
      const ip = "198.51.100.40";
      expect((await from(ip, ADMIN, "keys/get", { key })).body).toMatchObject({ tier: "paid", label: "to go" });
      expect((await from(ip, ADMIN, "usage", { key })).status).toBe(200);
      expect((await from(ip, ADMIN, "reset", { key })).status).toBe(200);
      expect((await from(ip, ADMIN, "keys/delete", { key })).body).toEqual({ deleted: true });
      // a write the store refuses is the store's failure, named as such
      expect((await from(ip, ADMIN, "block", { key, seconds: 60 })).status).toBe(503);
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
    expect((await call("keys/get", { key })).status).toBe(404);
  });

  it.each([
    // a primary a failover demoted, the shim still on it (port 1: no primary answers, so it keeps what it holds)
    ["a replica (READONLY)", () => admin.replicaof("127.0.0.1", "1"), () => admin.replicaof("NO", "ONE")],
    ["short of replicas (NOREPLICAS)", () => admin.config("SET", "min-replicas-to-write", "1"), () => admin.config("SET", "min-replicas-to-write", "0")],
  ])("lets the operator in to read while the store is %s, which takes no writes but answers reads, as a full one does", async (_, refuse, restore) => {
    const key = `replica-admin-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "paid", label: "held" })).status).toBe(200);
    await refuse();
    try {
      const ip = "198.51.100.44";
      expect((await from(ip, ADMIN, "keys/get", { key })).body).toMatchObject({ tier: "paid", label: "held" });
      expect((await from(ip, ADMIN, "usage", { key })).status).toBe(200);
      // a wrong token is still counted, in the isolate
      expect((await from(ip, randomBytes(32).toString("hex"), "keys/list", {})).status).toBe(401);
      expect((await from(ip, ADMIN, "block", { key, seconds: 60 })).status).toBe(503);
    } finally {
      await restore();
    }
  });

  it("still limits wrong tokens per address while the store cannot count them: the eleventh try is refused, the right token with it", async () => {
    await admin.config("SET", "maxmemory", "1");
    try {
      const ip = "198.51.100.41";
      const wrong = randomBytes(32).toString("hex");
      const answers = await Promise.all(Array.from({ length: 10 }, () => from(ip, wrong, "keys/list", {})));
      expect(answers.map((a) => a.status)).toEqual(Array(10).fill(401));
      expect((await from(ip, wrong, "keys/list", {})).status).toBe(429);
      expect((await from(ip, ADMIN, "keys/list", {})).status).toBe(429);
      // another address is not held by this one's failures
      expect((await from("198.51.100.42", ADMIN, "keys/list", {})).status).toBe(200);
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
  });

  it("never counts the right token's calls as failures while the store cannot count them: an operator who called 15 times is not shut out", async () => {
    await admin.config("SET", "maxmemory", "1");
    try {
      const ip = "198.51.100.43";
      for (let i = 0; i < 15; i++) expect((await from(ip, ADMIN, "keys/list", {})).status).toBe(200);
      // a wrong token is still one failure of ten, not the sixteenth attempt
      expect((await from(ip, randomBytes(32).toString("hex"), "keys/list", {})).status).toBe(401);
      expect((await from(ip, ADMIN, "keys/list", {})).status).toBe(200);
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
  });

  it("keeps an address's ten failures however many other addresses try meanwhile: 10,000 /64s of one /48 buy it no fresh guesses", async () => {
    // the isolate holds the counts of 10,000 addresses; before, the one counted longest ago was
    // forgotten to make room, so a caller cycling through more addresses than that guessed
    // without any limit while the store was full
    await admin.config("SET", "maxmemory", "1");
    try {
      const wrong = randomBytes(32).toString("hex");
      const ip = "2001:db8:5eed:ffff::1";
      // ten, none refused: the answer of the eleventh is the count's, not a held refusal's
      expect((await Promise.all(Array.from({ length: 10 }, () => from(ip, wrong, "keys/list", {})))).map((a) => a.status)).toEqual(Array(10).fill(401));
      const others = new Map<number, number>();
      for (let b = 0; b < 10_000; b += 100) {
        const batch = await Promise.all(Array.from({ length: 100 }, (_, i) => from(`2001:db8:5eed:${(b + i).toString(16)}::1`, wrong, "keys/list", {})));
        for (const { status } of batch) others.set(status, (others.get(status) ?? 0) + 1);
      }
      expect((await from(ip, wrong, "keys/list", {})).status).toBe(429);
      expect((await from(ip, ADMIN, "keys/list", {})).status).toBe(429);
      // the isolate cannot count an address more while it holds 10,000 with failures in the window: refused, not guessed
      expect([...others.keys()].sort()).toEqual([401, 429]);
    } finally {
      await admin.config("SET", "maxmemory", "0");
    }
  }, 180_000);
});

// An operator's write landing inside another's pipeline, as a store that runs a pipeline's
// commands one by one lets it: whichever way they fall, a key the registry holds is one the list
// finds (a backup by keys/list keeps it, an operator looking for it sees it).
describe("the registry when another operator's write lands inside a pipeline", () => {
  /** `write`, with `between` run after the first command of its pipeline that holds `command` */
  async function interleaved(command: string, between: () => Promise<unknown>, write: () => Promise<{ status: number }>) {
    let ran = false;
    splitAt = {
      command,
      between: async () => {
        ran = true;
        await between();
      },
    };
    try {
      expect((await write()).status).toBe(200);
    } finally {
      splitAt = undefined;
    }
    expect(ran).toBe(true);
  }

  async function expectListedIfHeld(key: string) {
    const held = await call("keys/get", { key });
    if (held.status === 404) return;
    expect(held.status).toBe(200);
    const listed = (await call("keys/list", { limit: 1000 })).body.entries as { hash: string }[];
    expect(listed.map((e) => e.hash)).toContain(held.body.hash);
  }

  it("a keys/set landing inside a delete of its key leaves no entry the list cannot find", async () => {
    const key = `inside-delete-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "free" })).status).toBe(200);
    await interleaved(
      "zrem",
      () => call("keys/set", { key, tier: "paid" }),
      () => call("keys/delete", { key }),
    );
    await expectListedIfHeld(key);
  });

  it("a delete landing inside an import of its key leaves no entry the list cannot find", async () => {
    const key = `inside-import-${randomBytes(4).toString("hex")}`;
    expect((await call("keys/set", { key, tier: "free" })).status).toBe(200);
    await interleaved(
      "zadd",
      () => call("keys/delete", { key }),
      () => call("keys/import", { entries: [{ key, tier: "paid" }] }),
    );
    await expectListedIfHeld(key);
  });
});
