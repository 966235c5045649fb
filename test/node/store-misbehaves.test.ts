import { randomBytes } from "node:crypto";
import Redis from "ioredis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FaultProxy, startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// A Redis and shim of this file's own, which its tests fill, stop and write by hand:
// Worker → shim → redis-server, or Worker → fault proxy → shim → redis-server.
const token = randomBytes(16).toString("hex");
let redis: LocalRedis;
let shim: RunningShim;
let admin: Redis;
let proxy: FaultProxy;
const logs: string[] = [];
const gates: Miniflare[] = [];

beforeAll(async () => {
  redis = await startRedis();
  shim = await startShim({ token, redisUrl: redis.url, log: () => {} });
  admin = new Redis(redis.url);
  proxy = await startFaultProxy(shim.url);
}, 60_000);

afterAll(async () => {
  await Promise.all(gates.map((g) => g.dispose()));
  admin?.disconnect();
  await proxy?.close();
  await shim?.close();
  await redis?.stop();
});

let callers = 0;
/** an address in a /64 of its own: a caller no other test shares */
const fresh = () => `2001:db8:77:${(++callers).toString(16)}::1`;

/** An isolate of the built gate on this file's shim, with `config` under a prefix of its own. */
async function gateWith(config: Record<string, unknown>, url = shim.url): Promise<{ gate: Miniflare; prefix: string }> {
  const RATE_LIMITS = rateLimits(config);
  const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => logs.push(line));
  gates.push(gate);
  return { gate, prefix: (JSON.parse(RATE_LIMITS) as { prefix: string }).prefix };
}

async function ask(gate: Miniflare, headers: Record<string, string>, path = "/") {
  const res = await gate.dispatchFetch(`http://gate.example${path}`, { headers });
  const body = await res.text();
  return { status: res.status, failOpen: res.headers.has("X-Slidegate-Fail-Open"), body };
}

/** `run` while Redis is full (maxmemory under noeviction refuses every write, the script included), emptied of that however `run` ends. */
async function whileFull<T>(run: () => Promise<T>): Promise<T> {
  await admin.config("SET", "maxmemory", "1");
  try {
    return await run();
  } finally {
    await admin.config("SET", "maxmemory", "0");
  }
}

describe("keys of another type written by hand, on a full Redis: read as the script reads them", () => {
  it("a block that is no string (a hash, held by its TTL) still refuses its caller when the store is full", async () => {
    const { gate, prefix } = await gateWith({ rules: [{ name: "minute", limit: 5, window: "1m" }] });
    const [before, during] = [fresh(), fresh()];
    for (const ip of [before, during]) {
      const block = `${prefix}:{${(await identify("i", ipIdentity(ip, 64))).tag}}:block`;
      await admin.hset(block, { by: "hand" });
      await admin.pexpire(block, 600_000);
    }
    expect(await ask(gate, { "cf-connecting-ip": before })).toMatchObject({ status: 403, failOpen: false });
    // before: failed open (200, marked), the block's read failing WRONGTYPE as the store's failure
    await whileFull(async () => expect(await ask(gate, { "cf-connecting-ip": during })).toMatchObject({ status: 403, failOpen: false }));
  });

  it("a registry entry that is no hash is no entry when the store is full: a key nobody registered is refused 401 under unknownKeys reject", async () => {
    const { gate, prefix } = await gateWith({ identity: { header: "x-api-key", unknownKeys: "reject" }, rules: [{ name: "minute", limit: 5, window: "1m" }] });
    const [before, during] = [`before-${randomBytes(6).toString("hex")}`, `during-${randomBytes(6).toString("hex")}`];
    for (const key of [before, during]) await admin.set(`${prefix}:{${(await identify("k", key)).tag}}:key`, "not a hash");
    expect(await ask(gate, { "x-api-key": before, "cf-connecting-ip": fresh() })).toMatchObject({ status: 401, failOpen: false });
    // before: failed open (200, marked), the entry's read failing WRONGTYPE as the store's failure
    await whileFull(async () => expect(await ask(gate, { "x-api-key": during, "cf-connecting-ip": fresh() })).toMatchObject({ status: 401, failOpen: false }));
  });

  it("a registry entry that is no hash, for a key whose rules are all shadow: admitted unmarked when the store is full, as for a key with no entry", async () => {
    const { gate, prefix } = await gateWith({ identity: { header: "x-api-key", unknownKeys: "defaultTier" }, rules: [{ name: "minute", limit: 5, window: "1m", shadow: true }] });
    const key = `shadow-${randomBytes(6).toString("hex")}`;
    await admin.set(`${prefix}:{${(await identify("k", key)).tag}}:key`, "not a hash");
    // before: failed open by the configuration's fail (marked): the entry counted as unread
    await whileFull(async () => expect(await ask(gate, { "x-api-key": key, "cf-connecting-ip": fresh() })).toMatchObject({ status: 200, failOpen: false }));
  });
});

describe("a full Redis whose answer to the read of blocks and registry entries is garbled on the way", () => {
  // the script is refused (OOM, from the real Redis); the pipeline that reads what refuses a
  // caller whatever the rules gets, from the proxy, replies no Redis gives to those commands
  const pipeline = (body: string) => body.startsWith("[[");

  it.each([
    // GET never answers an array: read as a block written by hand, it held for good (TTL -1)
    ["a block's value that is an array", false, '[{"result":["x"]},{"result":-1},{"result":["1700000000","0"]}]'],
    // TIME that is no time beside a disabled flag: the key was refused 403 on the rest of a nonsense reply
    ["a TIME that is no time", true, '[{"result":null},{"result":-2},{"result":"not a time"},{"result":"1"},{"result":null}]'],
    ["a TTL that is no number", false, '[{"result":"by hand"},{"result":"-1"},{"result":["1700000000","0"]}]'],
  ])("%s is the store's failure: the rules' fail mode decides, never a refusal made of it", async (_what, keyed, body) => {
    const { gate } = await gateWith(
      { ...(keyed && { identity: { header: "x-api-key", unknownKeys: "defaultTier" } }), timeout: 2000, rules: [{ name: "minute", limit: 5, window: "1m" }] },
      proxy.url,
    );
    const headers = { "cf-connecting-ip": fresh(), ...(keyed && { "x-api-key": `garbled-${randomBytes(6).toString("hex")}` }) };
    await whileFull(async () => {
      proxy.set({ kind: "body", body }, (sent) => !pipeline(sent));
      try {
        // before: 403 (blocked for good, or disabled)
        expect(await ask(gate, headers)).toMatchObject({ status: 200, failOpen: true });
      } finally {
        proxy.set({ kind: "none" });
      }
    });
  });
});

describe("the console's figures beside keys of another type written by hand", () => {
  it("a minute's figures or refused-callers list that holds another type is read as none: the health view still answers, not a 409 naming an identity", async () => {
    const ADMIN = randomBytes(32).toString("hex");
    const RATE_LIMITS = rateLimits({ rules: [{ name: "minute", limit: 5, window: "1m" }] });
    const prefix = (JSON.parse(RATE_LIMITS) as { prefix: string }).prefix;
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: shim.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN: ADMIN }, (line) => logs.push(line));
    gates.push(gate);
    const minute = Math.floor(Date.now() / 60_000);
    await admin.set(`${prefix}:{figures}:m:${minute - 2}`, "by hand");
    await admin.hset(`${prefix}:{figures}:t:${minute - 1}`, { by: "hand" });
    const res = await gate.dispatchFetch("http://gate.example/__slidegate/figures", {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": "198.51.100.7" },
      body: JSON.stringify({ minutes: 10 }),
    });
    // before: 409 wrong-type, whose remedies (keys/delete, unblock, reset) name an identity's keys
    expect(res.status).toBe(200);
    const figures = (await res.json()) as { minutes: unknown[]; top: { identities: unknown[] } };
    expect(figures.minutes).toHaveLength(10);
    expect(figures.top.identities).toEqual([]);
  });
});

describe('a full Redis that refuses TIME, under clock "edge" (the clock for such stores)', () => {
  let timeless: LocalRedis;
  let timelessShim: RunningShim;
  let timelessAdmin: Redis;
  beforeAll(async () => {
    timeless = await startRedis({ args: ["--rename-command", "TIME", ""] });
    timelessShim = await startShim({ token, redisUrl: timeless.url, log: () => {} });
    timelessAdmin = new Redis(timeless.url);
  }, 60_000);
  afterAll(async () => {
    timelessAdmin?.disconnect();
    await timelessShim?.close();
    await timeless?.stop();
  });

  it("an operator's block still refuses its caller when the store is full: the read of it asks the edge's clock, not TIME", async () => {
    const { gate, prefix } = await gateWith({ clock: "edge", rules: [{ name: "minute", limit: 5, window: "1m" }] }, timelessShim.url);
    const [before, during] = [fresh(), fresh()];
    for (const ip of [before, during]) {
      const block = `${prefix}:{${(await identify("i", ipIdentity(ip, 64))).tag}}:block`;
      // as the admin API writes a block: when it ends, in µs
      await timelessAdmin.set(block, String((Date.now() + 600_000) * 1000), "PX", 600_000);
    }
    expect(await ask(gate, { "cf-connecting-ip": before })).toMatchObject({ status: 403, failOpen: false });
    await timelessAdmin.config("SET", "maxmemory", "1");
    try {
      // before: admitted, marked failed open (the read sent TIME, which this store refuses, and failed whole)
      expect(await ask(gate, { "cf-connecting-ip": during })).toMatchObject({ status: 403, failOpen: false });
    } finally {
      await timelessAdmin.config("SET", "maxmemory", "0");
    }
  });
});
