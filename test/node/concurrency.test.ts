import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { runTrials } from "../../scripts/lib/trials.ts";
import { rateLimits, startGateFleet } from "../helpers/miniflare.ts";

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
