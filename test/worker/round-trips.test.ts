import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { makeGate, request, services, sha256Hex, statuses, testClock } from "./helpers.ts";

// The only file that uses the counting shim, so its counts are this file's alone.
const viaCountingShim = { redisUrl: services.countingShimUrl };

async function shimRequests(): Promise<number> {
  const res = await fetch(`${services.countingShimUrl}/__shim/stats`, { headers: { authorization: `Bearer ${services.shimToken}` } });
  return ((await res.json()) as { result: { requests: number } }).result.requests;
}

/** Shim requests made while `work` runs. */
async function roundTrips(work: () => Promise<unknown>): Promise<number> {
  const before = await shimRequests();
  await work();
  return (await shimRequests()) - before;
}

describe("round trips per decision", () => {
  it("makes one REST round trip per decision in the steady state", async () => {
    const gate = makeGate(
      {
        rules: [
          { name: "a", limit: 50, window: "1m" },
          { name: "b", limit: 100, window: "1h" },
        ],
      },
      viaCountingShim,
    );
    await statuses(gate, 1); // loads the script if this Redis lacks it
    expect(await roundTrips(() => statuses(gate, 10))).toBe(10);
  });

  it("reads an API key's registry entry in the same round trip that decides", async () => {
    const gate = makeGate(
      {
        identity: { header: "x-api-key" },
        defaultTier: "free",
        tiers: { free: { rules: [{ name: "m", limit: 50, window: "1m" }] }, paid: { rules: [{ name: "m", limit: 100, window: "1m" }] } },
      },
      { ...viaCountingShim, adminToken: "t" },
    );
    await gate(new Request("https://gate.example/__slidegate/keys/set", { method: "POST", body: '{"key":"registered","tier":"paid"}', headers: { authorization: "Bearer t" } }));
    // the first call learns the key's registry tier (one more round trip, once); then one each
    await statuses(gate, 1, "/", { key: "registered" });
    expect(await roundTrips(() => statuses(gate, 10, "/", { key: "registered" }))).toBe(10);
    expect(await roundTrips(() => statuses(gate, 10, "/", { key: `unregistered` }))).toBe(10);
  });

  it("a key nobody knows, with unknownKeys \"ip\" and address rules: the key's call, then one call as its address; a key the registry holds or the configuration names, its call and its address's", async () => {
    const gate = makeGate(
      {
        identity: { header: "x-api-key", unknownKeys: "ip" },
        defaultTier: "free",
        tiers: { free: { rules: [{ name: "m", limit: 50, window: "1h" }] } },
        keys: { [await sha256Hex(new TextEncoder().encode("configured"))]: "free" },
        addressRules: [{ name: "per-address", limit: 100, window: "1h" }],
      },
      { ...viaCountingShim, adminToken: "unknown-ip-admin" },
    );
    const set = await gate(
      new Request("https://gate.example/__slidegate/keys/set", {
        method: "POST",
        body: '{"key":"registered","tier":"free"}',
        headers: { authorization: "Bearer unknown-ip-admin" },
      }),
    );
    expect(set.status).toBe(200);
    await statuses(gate, 1, "/", { ip: "192.0.2.70" }); // loads the script if this Redis lacks it
    // a new made-up key each time: the key's call finds no entry, then tier and address rules in one call
    const invented = async () => {
      for (let i = 0; i < 5; i++) await statuses(gate, 1, "/", { key: `invented-${crypto.randomUUID()}`, ip: "192.0.2.71" });
    };
    expect(await roundTrips(invented)).toBe(10);
    // one made-up key again and again: the isolate remembers the registry's answer, one call each
    expect(await roundTrips(() => statuses(gate, 5, "/", { key: "invented-again", ip: "192.0.2.72" }))).toBe(6);
    // known keys: the key's call and the address rules' (the first, for the registered key, after the key's)
    expect(await roundTrips(() => statuses(gate, 5, "/", { key: "registered", ip: "192.0.2.73" }))).toBe(10);
    expect(await roundTrips(() => statuses(gate, 5, "/", { key: "configured", ip: "192.0.2.74" }))).toBe(10);
  });

  it("answers from the denial cache while an identity is blocked: no Redis call", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 2, window: "1m" }] }, viaCountingShim);
    expect(await roundTrips(() => statuses(gate, 3, "/", { ip: "192.0.2.50" }))).toBe(3);
    let codes: number[] = [];
    expect(await roundTrips(async () => (codes = await statuses(gate, 20, "/", { ip: "192.0.2.50" })))).toBe(0);
    expect(codes.every((c) => c === 429)).toBe(true);
    const cached = await gate(request("/", { ip: "192.0.2.50" }));
    expect(cached.headers.get("Retry-After")).toMatch(/^\d+$/);
    // another identity still goes to Redis
    expect(await roundTrips(() => statuses(gate, 1, "/", { ip: "192.0.2.51" }))).toBe(1);
  });

  it("answers an operator-blocked caller's flood from the isolate too: one Redis call, one log line and one data point, not one each per request", async () => {
    const points: AnalyticsEngineDataPoint[] = [];
    const metrics = { writeDataPoint: (p?: AnalyticsEngineDataPoint) => void points.push(p!) } as AnalyticsEngineDataset;
    const clock = testClock();
    const gate = makeGate({ clock: "edge", rules: [{ name: "a", limit: 5, window: "1m" }] }, { ...viaCountingShim, adminToken: "blocks-admin", now: clock.now, metrics });
    const ip = "192.0.2.52";
    const block = await gate(
      new Request("https://gate.example/__slidegate/block", { method: "POST", body: JSON.stringify({ ip, seconds: 600 }), headers: { authorization: "Bearer blocks-admin" } }),
    );
    expect(block.status).toBe(200);
    let codes: number[] = [];
    expect(await roundTrips(async () => (codes = await statuses(gate, 200, "/", { ip })))).toBe(1);
    expect(new Set(codes)).toEqual(new Set([403]));
    expect(gate.logs.filter((l) => l.line.event === "slidegate.blocked")).toHaveLength(1);
    // the summary, a minute on: every blocked request counted once, in one line and one point
    clock.advance(60_000);
    await statuses(gate, 1, "/", { ip: "192.0.2.53" });
    const summaries = gate.logs.filter((l) => l.line.event === "slidegate.blocked_summary");
    expect(summaries.map((l) => l.line.blocked)).toEqual([200]);
    const blockedPoints = points.filter((p) => p.blobs![0] === "blocked");
    expect(blockedPoints.map((p) => p.doubles![2])).toEqual([200]);
    // with what was left of the block at its latest request (600 s, less the minute the clock moved on… at most)
    expect(blockedPoints[0]!.doubles![1]).toBeGreaterThan(500_000);
    expect(blockedPoints[0]!.doubles![1]).toBeLessThanOrEqual(600_000);
    expect(summaries[0]!.line.blockedForMs).toBe(blockedPoints[0]!.doubles![1]);
    // an unblock reaches the isolate that served it at once
    await gate(new Request("https://gate.example/__slidegate/unblock", { method: "POST", body: JSON.stringify({ ip }), headers: { authorization: "Bearer blocks-admin" } }));
    expect(await statuses(gate, 1, "/", { ip })).toEqual([200]);
  });

  it("answers a flood of one made-up or disabled API key from the isolate: one Redis call, and a key registered meanwhile is known at once where it was registered", async () => {
    const gate = makeGate(
      { identity: { header: "x-api-key", unknownKeys: "reject" }, rules: [{ name: "m", limit: 50, window: "1m" }] },
      { ...viaCountingShim, adminToken: "keys-flood-admin" },
    );
    const admin = (route: string, body: unknown) =>
      gate(new Request(`https://gate.example/__slidegate/${route}`, { method: "POST", body: JSON.stringify(body), headers: { authorization: "Bearer keys-flood-admin" } }));
    let codes: number[] = [];
    expect(await roundTrips(async () => (codes = await statuses(gate, 50, "/", { key: "sk-made-up" })))).toBe(1);
    expect(new Set(codes)).toEqual(new Set([401]));
    expect((await admin("keys/set", { key: "sk-made-up", disabled: true })).status).toBe(200);
    expect(await roundTrips(async () => (codes = await statuses(gate, 50, "/", { key: "sk-made-up" })))).toBe(1);
    expect(new Set(codes)).toEqual(new Set([403]));
    expect((await admin("keys/set", { key: "sk-made-up" })).status).toBe(200);
    expect(await statuses(gate, 1, "/", { key: "sk-made-up" })).toEqual([200]);
  });

  it("a denial answered from the cache counts its wait down: Retry-After and every reset as they stand at that moment", async () => {
    const clock = testClock();
    const rules = [
      { name: "minute", limit: 1, window: "1m" },
      { name: "hour", limit: 10, window: "1h" },
    ];
    const gate = makeGate({ clock: "edge", denialCacheMaxAge: "1m", rules }, { ...viaCountingShim, now: clock.now });
    const ip = "192.0.2.60";
    // the hour's oldest request half a second off the minute's: their resets tick over at different moments
    expect(await statuses(gate, 1, "/", { ip })).toEqual([200]);
    clock.advance(60_500);
    expect(await statuses(gate, 1, "/", { ip })).toEqual([200]);
    const seen = async () => {
      const res = await gate(request("/", { ip }));
      const detail = ((await res.json()) as { detail: string }).detail;
      return { status: res.status, retryAfter: res.headers.get("Retry-After"), rateLimit: res.headers.get("RateLimit"), detail };
    };
    const answers: Awaited<ReturnType<typeof seen>>[] = [];
    const calls = await roundTrips(async () => {
      answers.push(await seen()); // from Redis
      for (const ms of [0, 600, 10_000, 1, 29_000]) {
        clock.advance(ms);
        answers.push(await seen()); // from the denial cache
      }
    });
    expect(calls).toBe(1);
    expect(answers.map((a) => a.status)).toEqual(Array(6).fill(429));
    // the minute has 60 s, 60 s, 59.4 s, 49.4 s, 49.399 s, 20.399 s left; the hour 3539.5 s at first
    expect(answers.map((a) => a.retryAfter)).toEqual(["60", "60", "60", "50", "50", "21"]);
    expect(answers.map((a) => a.rateLimit)).toEqual(["3540", "3540", "3539", "3529", "3529", "3500"].map((t, i) => `"minute";r=0;t=${answers[i]!.retryAfter}, "hour";r=8;t=${t}`));
    expect(answers[5]!.detail).toBe('Rate limit "minute" exceeded; retry in 21 s.');
  });

  it("with denialCacheSize 0, every denial asks Redis", async () => {
    const gate = makeGate({ denialCacheSize: 0, rules: [{ name: "a", limit: 1, window: "1m" }] }, viaCountingShim);
    expect(await roundTrips(() => statuses(gate, 5))).toBe(5);
  });

  it("after SCRIPT FLUSH costs one EVAL, then EVALSHA again, with counts intact", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 4, window: "1m" }] }, viaCountingShim);
    expect(await statuses(gate, 2)).toEqual([200, 200]);
    await new Redis({ url: services.countingShimUrl, token: services.shimToken }).scriptFlush();
    let codes: number[] = [];
    // EVALSHA answered NOSCRIPT, then EVAL
    expect(await roundTrips(async () => (codes = await statuses(gate, 1)))).toBe(2);
    expect(await roundTrips(async () => (codes = codes.concat(await statuses(gate, 2))))).toBe(2);
    expect(codes).toEqual([200, 200, 429]);
  });

  it("keeps one round trip per decision with shadow rules and the operator's block checked in the same call", async () => {
    const gate = makeGate(
      {
        rules: [
          { name: "a", limit: 50, window: "1m" },
          { name: "b", limit: 2, window: "1m", shadow: true },
        ],
      },
      viaCountingShim,
    );
    await statuses(gate, 1);
    expect(await roundTrips(() => statuses(gate, 6))).toBe(6);
  });

  it("answers allow- and deny-listed callers with no Redis call", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 1, window: "1m" }], allow: { ips: ["192.0.2.0/24"] }, deny: { ips: ["198.51.100.0/24"] } }, viaCountingShim);
    let codes: number[] = [];
    expect(await roundTrips(async () => (codes = [...(await statuses(gate, 5, "/", { ip: "192.0.2.9" })), ...(await statuses(gate, 5, "/", { ip: "198.51.100.9" }))]))).toBe(0);
    expect(codes).toEqual([200, 200, 200, 200, 200, 403, 403, 403, 403, 403]);
  });

  it("answers refused paths, ambiguous keys and admin calls without a token with no Redis call: a flood of them costs the store nothing", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, rules: [{ name: "a", limit: 1, window: "1m" }] }, { ...viaCountingShim, adminToken: "round-trips-admin" });
    const codes: number[] = [];
    expect(
      await roundTrips(async () => {
        for (let i = 0; i < 20; i++) {
          for (const req of [
            request(`/v1%2F${i}`),
            request("/", { headers: { "x-api-key": `k${i}, k${i}` } }),
            new Request("https://gate.example/__slidegate/usage", { method: "POST", body: "{}", headers: { "cf-connecting-ip": "192.0.2.77" } }),
          ]) {
            const res = await gate(req);
            await res.body?.cancel();
            codes.push(res.status);
          }
        }
      }),
    ).toBe(0);
    expect(new Set(codes)).toEqual(new Set([400, 401]));
  });
});

describe("round trips of the console's live figures", () => {
  it("add no Redis call to any request: each request, counted at the shim, makes its one decision call while the figures count", async () => {
    // no flush comes due while this test runs (the first waits an interval after the gate starts)
    const gate = makeGate({ rules: [{ name: "a", limit: 100, window: "1m" }] }, { ...viaCountingShim, adminToken: "figures-admin", figuresIntervalMs: 600_000 });
    const ctx = { waitUntil: () => {} };
    await statuses(gate, 1); // loads the script if this Redis lacks it
    for (let i = 0; i < 20; i++) {
      expect(await roundTrips(async () => (await gate(request("/", { ip: `192.0.2.${120 + (i % 3)}` }), ctx)).body?.cancel()), `request ${i}`).toBe(1);
    }
  });

  it("add no Redis call to any request: N decisions cost N round trips, and each flush one more, after the responses", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 100, window: "1m" }] }, { ...viaCountingShim, adminToken: "figures-admin", figuresIntervalMs: 10 });
    const promises: Promise<unknown>[] = [];
    const ctx = { waitUntil: (p: Promise<unknown>) => void promises.push(p) };
    await statuses(gate, 1); // loads the script if this Redis lacks it (no context: nothing is flushed)
    const n = 40;
    const codes: number[] = [];
    const calls = await roundTrips(async () => {
      for (let i = 0; i < n; i++) {
        const res = await gate(request("/", { ip: `192.0.2.${100 + (i % 2)}` }), ctx);
        await res.body?.cancel();
        codes.push(res.status);
      }
      await Promise.all(promises);
    });
    const figures = await figuresOf(gate);
    expect(figures.totals.all).toBe(n + 1);
    expect(codes.every((c) => c === 200)).toBe(true);
    expect(figures.totals.decisions.admitted).toBe(n + 1);
    expect(figures.totals.flushes).toBeGreaterThanOrEqual(1);
    expect(calls).toBe(n + figures.totals.flushes);
  });
});

/** The figures as the gate's console reads them (these reads are counted too: call after counting). */
async function figuresOf(gate: (r: Request) => Promise<Response>) {
  const res = await gate(new Request("https://gate.example/__slidegate/figures", { method: "POST", body: '{"minutes":5}', headers: { authorization: "Bearer figures-admin" } }));
  return (await res.json()) as { totals: { all: number; flushes: number; decisions: Record<string, number> } };
}
