import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { Redis as Upstash } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { type LocalCluster, startRedisCluster } from "../../scripts/lib/redis-cluster.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import { rateLimits, startGateFleet } from "../helpers/miniflare.ts";

// A Redis Cluster on loopback (3 masters, 3 replicas) behind the shim in cluster mode, and
// the built Worker in front. Measured numbers go to dist/cluster-report.json (docs/scaling.md).
const LIMIT = 20;
const PASSWORD = randomBytes(12).toString("hex");
const TIMEOUT = 1000;
let cluster: LocalCluster;
let shim: RunningShim;
let token: string;
let seed: Fleet;
let fleet: Fleet;
/** for exactness under bursts: a budget no loaded machine exhausts, so no decision fails open */
let exact: Fleet;
const report: Record<string, unknown> = {};

beforeAll(async () => {
  let started = performance.now();
  // its nodes ask for a password, as a cluster reachable from other hosts does
  cluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000, password: PASSWORD });
  report.clusterStartMs = Math.round(performance.now() - started);
  token = randomBytes(16).toString("hex");
  shim = await startShim({ token, clusterNodes: cluster.nodes, clusterAuth: { password: PASSWORD }, log: () => {} });
  const store = { UPSTASH_REDIS_REST_URL: shim.url, UPSTASH_REDIS_REST_TOKEN: token };
  started = performance.now();
  [seed, fleet, exact] = await Promise.all([
    startGateFleet(2, { ...store, RATE_LIMITS: rateLimits({ rules: [{ name: "default", limit: 5, window: "10s" }] }) }),
    startGateFleet(2, { ...store, RATE_LIMITS: rateLimits({ fail: "open", timeout: TIMEOUT, rules: [{ name: "default", limit: LIMIT, window: "10m" }] }) }),
    startGateFleet(2, { ...store, RATE_LIMITS: rateLimits({ fail: "closed", timeout: 30_000, rules: [{ name: "default", limit: LIMIT, window: "10m" }] }) }),
  ]);
}, 90_000);

afterAll(async () => {
  await Promise.all([seed?.dispose(), fleet?.dispose(), exact?.dispose()]);
  await shim?.close();
  await cluster?.stop();
  mkdirSync("dist", { recursive: true });
  writeFileSync("dist/cluster-report.json", `${JSON.stringify(report, null, 2)}\n`);
  console.log(`cluster report: ${JSON.stringify(report)}`);
});

/** IPs whose Redis keys land on each master, `perMaster` of each. */
async function ipsByMaster(perMaster: number, run: string): Promise<Map<string, string[]>> {
  const byMaster = new Map<string, string[]>();
  for (let i = 0; [...byMaster.values()].filter((l) => l.length >= perMaster).length < 3; i++) {
    const ip = `2001:db8:${run}:${i.toString(16)}::1`; // a /64 each: the gate counts IPv6 per /64
    const master = await cluster.masterOf(await cluster.slotOf(`{${(await identify("i", ipIdentity(ip, 64))).tag}}`));
    const list = byMaster.get(master) ?? [];
    if (list.length < perMaster) byMaster.set(master, [...list, ip]);
  }
  return byMaster;
}

describe("Redis Cluster behind the shim", () => {
  it("refuses to start with a wrong or missing cluster password, in Redis's own words and without echoing it", async () => {
    for (const [clusterAuth, reply] of [
      [{ password: "a-wrong-one" }, "WRONGPASS"],
      [{ username: "nobody", password: "a-wrong-one" }, "WRONGPASS"],
      [undefined, "NOAUTH"],
    ] as const) {
      const started = startShim({ token: "auth-test", clusterNodes: cluster.nodes, clusterAuth, log: () => {} });
      await expect(started, reply).rejects.toThrow(new RegExp(`^Redis refused the shim's credentials \\(${reply} .*\\): check REDIS_CLUSTER_USERNAME and REDIS_CLUSTER_PASSWORD`));
      await expect(started).rejects.not.toThrow(/a-wrong-one/);
    }
  });

  it("5 per 10 s per IP answers 200 ×5 then 429", async () => {
    const codes = [];
    for (let i = 0; i < 6; i++) codes.push(...(await seed.burst(1, { "cf-connecting-ip": "198.51.100.150" })));
    expect(codes).toEqual([200, 200, 200, 200, 200, 429]);
  });

  it("admits exactly each identity's limit under contention, with identities on every master", async () => {
    const byMaster = await ipsByMaster(3, "c1");
    expect(byMaster.size).toBe(3);
    const ips = [...byMaster.values()].flat();
    // one identity per master at a time, 100 requests at once each
    const admitted: number[] = [];
    for (let i = 0; i < 3; i++) {
      const round = [...byMaster.values()].map((list) => list[i]!);
      admitted.push(...(await Promise.all(round.map(async (ip) => (await exact.burst(100, { "cf-connecting-ip": ip })).filter((c) => c === 200).length))));
    }
    expect(admitted).toEqual(ips.map(() => LIMIT));
    report.contention = { identities: ips.length, masters: byMaster.size, requestsPerIdentity: 100, limit: LIMIT, admitted };
  }, 60_000);

  it("refuses a script whose keys span slots with Redis's own error", async () => {
    const client = new Upstash({ url: shim.url, token, enableTelemetry: false });
    await expect(client.eval("return 1", ["{a}one", "{b}two"], [])).rejects.toThrow(/CROSSSLOT Keys in request don't hash to the same slot/);
    expect(await client.eval("return #KEYS", ["{same}one", "{same}two"], [])).toBe(2);
  });

  it("refuses a transaction whose keys span slots with Redis's own error, a 400 that writes nothing, not a 503 as if Redis were down", async () => {
    const post = async (body: unknown) => {
      const res = await fetch(`${shim.url}/multi-exec`, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    };
    expect(
      await post([
        ["SET", "{tx-a}one", "1"],
        ["SET", "{tx-b}two", "2"],
      ]),
    ).toEqual({ status: 400, body: { error: "CROSSSLOT Keys in request don't hash to the same slot" } });
    const client = new Upstash({ url: shim.url, token, enableTelemetry: false });
    expect([await client.get("{tx-a}one"), await client.get("{tx-b}two")]).toEqual([null, null]);
    // within one slot, a transaction runs
    expect(
      await post([
        ["SET", "{tx-a}one", "1"],
        ["GET", "{tx-a}one"],
      ]),
    ).toEqual({ status: 200, body: [{ result: "OK" }, { result: "1" }] });
  });

  it("runs a one-slot transaction on every master: 300 keys, every slot range, none discarded", async () => {
    const client = new Upstash({ url: shim.url, token, enableTelemetry: false });
    const discarded: string[] = [];
    for (let i = 0; i < 300; i++) {
      const t = client.multi();
      t.set(`{tx-${i}}a`, "1");
      t.incr(`{tx-${i}}b`);
      try {
        expect(await t.exec()).toEqual(["OK", 1]);
      } catch (e) {
        discarded.push(`{tx-${i}}: ${(e as Error).message.slice(0, 80)}`);
      }
    }
    expect(discarded).toEqual([]);
  });

  it("carries the console's live figures: flushes under one hash tag, read back with registry entries from several slots", async () => {
    const admin = "cluster-admin-token-0123456789abcdef";
    const consoleFleet = await startGateFleet(2, {
      UPSTASH_REDIS_REST_URL: shim.url,
      UPSTASH_REDIS_REST_TOKEN: token,
      ADMIN_TOKEN: admin,
      RATE_LIMITS: rateLimits({ identity: { header: "x-api-key" }, timeout: 30_000, denialCacheSize: 0, rules: [{ name: "hour", limit: 2, window: "1h" }] }),
    });
    try {
      const call = async (route: string, body: unknown) => {
        const res = await consoleFleet.isolates[0]!.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
          method: "POST",
          body: JSON.stringify(body),
          headers: { authorization: `Bearer ${admin}` },
        });
        // biome-ignore lint/suspicious/noExplicitAny: the admin API's JSON, read field by field in expectations
        return { status: res.status, body: (await res.json()) as Record<string, any> };
      };
      const keys = ["sk-a", "sk-b", "sk-c", "sk-d"];
      const slots = new Set(await Promise.all(keys.map(async (k) => cluster.slotOf(`{${(await identify("k", k)).tag}}`))));
      expect(slots.size, "the keys' registry entries sit in different slots").toBeGreaterThan(1);
      for (const k of keys) expect((await call("keys/set", { key: k, label: `label ${k}` })).status).toBe(200);
      for (const k of keys) {
        const codes = [];
        for (let i = 0; i < 3; i++) codes.push(...(await consoleFleet.burst(1, { "x-api-key": k, "cf-connecting-ip": "192.0.2.1" })));
        expect(codes).toEqual([200, 200, 429]);
      }
      // biome-ignore lint/suspicious/noExplicitAny: the admin API's JSON, read field by field in expectations
      let figures: Record<string, any> = {};
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 250))) {
        figures = (await call("figures", { minutes: 10 })).body;
        if (figures.totals.all >= 12) break;
      }
      expect(figures.totals.all).toBe(12);
      expect(figures.totals.decisions).toMatchObject({ admitted: 8, denied: 4 });
      expect(figures.top.identities.map((i: { label: string; refused: number }) => [i.label, i.refused]).sort()).toEqual(keys.map((k) => [`label ${k}`, 1]));
    } finally {
      await consoleFleet.dispose();
    }
  }, 90_000);

  it("fails over a master under traffic: decisions follow the fail policy, then limiting is exact again", async () => {
    const byMaster = await ipsByMaster(30, "f1");
    const [victim, ips] = [...byMaster.entries()][0]!;
    const server = cluster.servers.find((s) => `127.0.0.1:${s.port}` === victim)!;
    let next = 0;
    const answers: { status: number; failOpen: boolean; ms: number; at: number }[] = [];
    const ask = async () => {
      const ip = ips[next++ % ips.length]!;
      const started = performance.now();
      const res = await fleet.isolates[next % 2]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": ip } });
      await res.arrayBuffer();
      answers.push({ status: res.status, failOpen: res.headers.has("X-Slidegate-Fail-Open"), ms: performance.now() - started, at: started });
    };

    const killedAt = performance.now();
    process.kill(server.pid!, "SIGKILL");
    // Traffic until the slot has a new master and a decision comes back undegraded.
    let recoveredAt = 0;
    while (performance.now() - killedAt < 60_000) {
      await Promise.all([ask(), ask(), ask(), ask()]);
      const last = answers.slice(-4);
      if (last.every((a) => !a.failOpen && a.status === 200)) {
        recoveredAt = performance.now();
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(recoveredAt, "the cluster recovered within 60 s").toBeGreaterThan(0);
    expect(await cluster.masterOf(await cluster.slotOf(`{${(await identify("i", ips[0]!)).tag}}`))).not.toBe(victim);

    // during the failover every answer followed the policy: admitted (exactly, or failing open), in time
    for (const a of answers) expect(a.status).toBe(200);
    for (const a of answers) expect(a.ms).toBeLessThan(TIMEOUT + 1500);

    // after it, exact limiting on a fresh identity in the failed-over slots
    const fresh = await ipsByMaster(1, "f2");
    const newMaster = await cluster.masterOf(await cluster.slotOf(`{${(await identify("i", ips[0]!)).tag}}`));
    const freshIp = fresh.get(newMaster)?.[0] ?? [...fresh.values()][0]![0]!;
    const codes = await exact.burst(100, { "cf-connecting-ip": freshIp });
    expect(codes.filter((c) => c === 200)).toHaveLength(LIMIT);

    report.failover = {
      nodeTimeoutMs: 1000,
      decisionsDuringFailover: answers.length,
      failedOpen: answers.filter((a) => a.failOpen).length,
      admittedExactly: answers.filter((a) => !a.failOpen).length,
      slowestDecisionMs: Math.round(Math.max(...answers.map((a) => a.ms))),
      killToRecoveredMs: Math.round(recoveredAt - killedAt),
      afterFailover: { requests: 100, limit: LIMIT, admitted: codes.filter((c) => c === 200).length },
    };
  }, 90_000);
});
