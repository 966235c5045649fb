import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { runTrials } from "../../scripts/lib/trials.ts";
import { rateLimits, startGateFleet } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";

// K isolates of the built Worker against one shim, M requests at once, limit L.
const K = 4;
const M = 500;
const L = 50;

const fleets: Fleet[] = [];
const fleet = async (config: Record<string, unknown>) => {
  // a budget no loaded machine exhausts: these trials are about exactness, and a timed-out
  // decision would fail open
  const f = await startGateFleet(K, { RATE_LIMITS: rateLimits({ timeout: 30_000, ...config }) });
  fleets.push(f);
  return f;
};
let single: Fleet;
beforeAll(async () => {
  single = await fleet({ rules: [{ name: "default", limit: L, window: "10m" }] });
});
afterAll(async () => {
  await Promise.all(fleets.map((f) => f.dispose()));
});

describe(`contention: ${K} isolates, ${M} concurrent requests, limit ${L}`, () => {
  it("admits exactly the limit in each of 20 trials", async () => {
    const tally = await runTrials(single, { trials: 20, m: M, limit: L });
    // any other answer first (an origin that failed, say): it would pass for a miscount
    expect(tally.unexpected).toEqual([]);
    expect(tally.admitted).toEqual(Array(20).fill(L));
  }, 120_000);

  it("admits exactly each identity's limit when many identities burst at once", async () => {
    const identities = Array.from({ length: 10 }, (_, i) => `2001:db8:1:${i}::1`); // one /64 each: one caller each
    const perIdentity = await Promise.all(identities.map((ip) => single.burst(100, { "cf-connecting-ip": ip })));
    expect(perIdentity.map((codes) => codes.filter((c) => c === 200).length)).toEqual(Array(10).fill(L));
  }, 60_000);

  it("keeps two rules all-or-nothing under contention", async () => {
    const both = await fleet({
      rules: [
        { name: "burst", limit: 30, window: "10m" },
        { name: "hour", limit: 80, window: "1h" },
      ],
    });
    const codes = await both.burst(M, { "cf-connecting-ip": "2001:db8:2::1" });
    expect(codes.filter((c) => c === 200)).toHaveLength(30);
    // Had any denied request been recorded in the looser rule, it would show more than 30 used.
    const probe = await both.isolates[0]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": "2001:db8:2::1" } });
    expect(probe.status).toBe(429);
    expect(probe.headers.get("RateLimit")).toMatch(/"burst";r=0;t=\d+, "hour";r=50;t=\d+/);
  }, 60_000);
});

describe(`contention: ${K} isolates, 200 concurrent requests from one address, each with a key nobody knows (unknownKeys "ip"), and address rules`, () => {
  /** A fleet whose invented keys count as their address: the default tier's rule and an address rule, an hour each (nothing expires during a test). */
  const unknownAsAddress = (tierLimit: number, addressLimit: number) =>
    fleet({
      identity: { header: "x-api-key", unknownKeys: "ip" },
      defaultTier: "free",
      tiers: { free: { rules: [{ name: "per-tier", limit: tierLimit, window: "1h" }] } },
      addressRules: [{ name: "per-address", limit: addressLimit, window: "1h" }],
    });
  /** `m` requests at once from `ip`, each with a key of its own nobody registered, spread round-robin over the isolates. */
  const inventedKeys = (f: Fleet, m: number, ip: string) =>
    Promise.all(
      Array.from({ length: m }, async (_, i) => {
        const headers = { "cf-connecting-ip": ip, "x-api-key": `invented-${crypto.randomUUID()}` };
        const res = await f.isolates[i % f.isolates.length]!.dispatchFetch("http://gate.example/", { headers });
        await res.arrayBuffer();
        return res.status;
      }),
    );

  // as a caller without a key from that address is decided: the tier's rules and the address
  // rules in one call, all-or-nothing, so a request refused by one rule is recorded by none
  for (const [tierLimit, addressLimit] of [
    [20, 20],
    [20, 30],
    [30, 20],
  ] as const) {
    it(`tier ${tierLimit}, address ${addressLimit}: exactly ${Math.min(tierLimit, addressLimit)} admitted in each of 5 trials`, async () => {
      const f = await unknownAsAddress(tierLimit, addressLimit);
      const run = crypto.randomUUID().slice(0, 4);
      const admitted: number[] = [];
      for (let trial = 0; trial < 5; trial++) {
        // a /64 of its own per trial: a fresh bucket each time
        const codes = await inventedKeys(f, 200, `2001:db8:${run}:${trial.toString(16)}::1`);
        expect(codes.filter((c) => c !== 200 && c !== 429)).toEqual([]);
        admitted.push(codes.filter((c) => c === 200).length);
      }
      expect(admitted).toEqual(Array(5).fill(Math.min(tierLimit, addressLimit)));
    }, 120_000);
  }
});

describe(`contention: ${K} isolates, API keys from one address beside an address rule (two calls per request, each recording what it admits)`, () => {
  const ADMIN_TOKEN = crypto.randomUUID().replace(/-/g, "");
  /** A fleet of API keys in one tier beside an address rule, an hour each (nothing expires during a test), with the admin API to read both sides' logs. */
  const keysBesideFloor = async (keyLimit: number, floor: number) => {
    const f = await startGateFleet(K, {
      ADMIN_TOKEN,
      RATE_LIMITS: rateLimits({
        timeout: 30_000,
        identity: { header: "x-api-key" },
        defaultTier: "free",
        tiers: { free: { rules: [{ name: "per-key", limit: keyLimit, window: "1h" }] } },
        addressRules: [{ name: "per-address", limit: floor, window: "1h" }],
      }),
    });
    fleets.push(f);
    return f;
  };
  /** What `usage` says was used of each rule of the key's (or the address's) window. */
  const used = async (f: Fleet, who: { key: string } | { ip: string }) => {
    const res = await f.isolates[0]!.dispatchFetch("http://gate.example/__slidegate/usage", {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "cf-connecting-ip": "192.0.2.200" },
      body: JSON.stringify(who),
    });
    const body = (await res.json()) as { rules: { used: number }[]; addressRules?: { used: number }[] };
    return "key" in who ? body.rules[0]!.used : body.addressRules![0]!.used;
  };
  /** `m` requests at once from `ip`, the i-th with `keyOf(i)`, round-robin over the isolates, all under one x-request-id the origin counts. */
  const burst = async (f: Fleet, m: number, ip: string, keyOf: (i: number) => string) => {
    const id = crypto.randomUUID();
    const codes = await Promise.all(
      Array.from({ length: m }, async (_, i) => {
        const headers = { "cf-connecting-ip": ip, "x-api-key": keyOf(i), "x-request-id": id };
        const res = await f.isolates[i % f.isolates.length]!.dispatchFetch("http://gate.example/", { headers });
        await res.arrayBuffer();
        return res.status;
      }),
    );
    const reached = ((await (await fetch(`${services().originUrl}/__origin/hits/${id}`)).json()) as { hits: number }).hits;
    return { codes, reached };
  };

  it("a client rotating 10 keys, each with room to spare, reaches the origin exactly the address rule's limit, in each of 5 trials", async () => {
    const f = await keysBesideFloor(100, 30);
    const run = crypto.randomUUID().slice(0, 4);
    const reached: number[] = [];
    for (let trial = 0; trial < 5; trial++) {
      // a /64 of its own per trial: a fresh address each time; 30 requests per key, none over its own limit
      const { codes, reached: n } = await burst(f, 300, `2001:db8:${run}:${trial.toString(16)}::1`, (i) => `rotating-${run}-${trial}-${i % 10}`);
      expect(codes.filter((c) => c !== 200 && c !== 429)).toEqual([]);
      expect(codes.filter((c) => c === 200)).toHaveLength(n);
      reached.push(n);
    }
    expect(reached).toEqual(Array(5).fill(30));
  }, 120_000);

  it("one key tighter than the address rule: the origin gets no more than the key's limit, and each side's log holds exactly its limit (a request refused by one side still counts on the other), in each of 5 trials", async () => {
    const f = await keysBesideFloor(20, 30);
    const run = crypto.randomUUID().slice(0, 4);
    for (let trial = 0; trial < 5; trial++) {
      const ip = `2001:db8:${run}:${trial.toString(16)}::1`;
      const key = `tight-${run}-${trial}`;
      const { codes, reached } = await burst(f, 200, ip, () => key);
      expect(codes.filter((c) => c !== 200 && c !== 429)).toEqual([]);
      expect(codes.filter((c) => c === 200)).toHaveLength(reached);
      expect(reached).toBeLessThanOrEqual(20);
      // the two calls run at once and record on their own: the key's admits exactly 20 of the
      // 200, the address's exactly 30, and what reaches the origin is what both admitted
      expect([await used(f, { key }), await used(f, { ip })]).toEqual([20, 30]);
    }
  }, 120_000);
});
