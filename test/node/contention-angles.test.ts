import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { SLIDING_WINDOW_SCRIPT, SLIDING_WINDOW_SHA1 } from "../../src/script/sliding-window.ts";
import { rateLimits, startGateFleet } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";

const K = 4;
const ADMIN_TOKEN = crypto.randomUUID().replace(/-/g, "");
const fleets: Fleet[] = [];
const closers: (() => Promise<void>)[] = [];
afterAll(async () => {
  await Promise.all(fleets.map((f) => f.dispose()));
  await Promise.all(closers.map((c) => c()));
});

const fleet = async (config: Record<string, unknown>, bindings: Record<string, string> = {}) => {
  // a budget no loaded machine exhausts: a timed-out decision would fail open and pass for a miscount
  const f = await startGateFleet(K, { ADMIN_TOKEN, RATE_LIMITS: rateLimits({ timeout: 30_000, ...config }), ...bindings });
  fleets.push(f);
  return f;
};

const admin = async (f: Fleet, route: string, body: unknown) => {
  const res = await f.isolates[0]!.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "cf-connecting-ip": "192.0.2.200" },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  expect(res.status, JSON.stringify(json)).toBe(200);
  return json as Record<string, unknown>;
};

/** `m` requests at once with `headers`, round-robin over the isolates; `during` runs once `after` answers have come in. */
const flood = async (f: Fleet, m: number, headers: Record<string, string>, during?: { after: number; run: () => Promise<unknown> }) => {
  let answered = 0;
  let side: Promise<unknown> | undefined;
  const codes = await Promise.all(
    Array.from({ length: m }, async (_, i) => {
      const res = await f.isolates[i % f.isolates.length]!.dispatchFetch("http://gate.example/", { headers });
      await res.arrayBuffer();
      if (during && ++answered === during.after) side = during.run();
      return res.status;
    }),
  );
  await side;
  expect(codes.filter((c) => c !== 200 && c !== 429)).toEqual([]);
  return codes.filter((c) => c === 200).length;
};

describe(`weighted costs under contention: ${K} isolates`, () => {
  for (const [limit, cost] of [
    [50, 7],
    [49, 7],
    [50, 3],
  ] as const) {
    it(`a rule of limit ${limit} and cost ${cost} admits exactly ${Math.floor(limit / cost)} of 300 requests, in each of 3 trials`, async () => {
      const f = await fleet({ rules: [{ name: "weighted", limit, cost, window: "1h" }] });
      const run = crypto.randomUUID().slice(0, 4);
      const admitted: number[] = [];
      for (let t = 0; t < 3; t++) admitted.push(await flood(f, 300, { "cf-connecting-ip": `2001:db8:${run}:${t}::1` }));
      expect(admitted).toEqual(Array(3).fill(Math.floor(limit / cost)));
    }, 120_000);
  }

  it("rules of different costs (logs of their own) stay all-or-nothing: the tighter decides and the other records only what both admitted", async () => {
    const f = await fleet({
      rules: [
        { name: "units", limit: 50, cost: 3, window: "1h" },
        { name: "calls", limit: 20, window: "1h" },
      ],
    });
    const ip = "2001:db8:77::1";
    expect(await flood(f, 300, { "cf-connecting-ip": ip })).toBe(16);
    const probe = await f.isolates[1]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": ip } });
    expect(probe.status).toBe(429);
    expect(probe.headers.get("RateLimit")).toMatch(/"units";r=2;t=\d+, "calls";r=4;t=\d+/);
  }, 120_000);
});

/**
 * A proxy in front of the shim that rewrites the edge clock's reading of each decision (the
 * script's first ARGV, µs) as `edgeClock` says: an isolate whose clock disagrees with the
 * others', as edge machines' clocks do, or one read from a clock the test moves by hand.
 */
async function skewedStore(edgeClock: (isolateUs: number) => number): Promise<string> {
  const target = services().shimUrl;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let body = Buffer.concat(chunks).toString();
    try {
      const command = JSON.parse(body) as unknown[];
      // the decision script alone (by its SHA1 or its text): the figures' flush takes no clock
      if (Array.isArray(command) && [SLIDING_WINDOW_SHA1, SLIDING_WINDOW_SCRIPT].includes(String(command[1]))) {
        const at = 3 + Number(command[2]);
        if (command[at] !== "" && command[at] !== undefined) command[at] = String(edgeClock(Number(command[at])));
        body = JSON.stringify(command);
      }
    } catch {
      // not a single command: passed on as it is
    }
    const upstream = await fetch(target + (req.url ?? "/"), {
      method: req.method,
      headers: Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "content-length")) as Record<string, string>,
      body: req.method === "GET" ? undefined : body,
    });
    res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" });
    res.end(Buffer.from(await upstream.arrayBuffer()));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe(`clock "edge" with ${K} isolates whose clocks disagree by less than a window`, () => {
  it("admits exactly the limit in each of 5 trials", async () => {
    const offsets = [-15_000, 0, 7_000, 20_000];
    const config = rateLimits({ timeout: 30_000, clock: "edge", rules: [{ name: "minute", limit: 50, window: "1m" }] });
    const isolates = await Promise.all(
      offsets.map(async (ms) => {
        const one = await startGateFleet(1, { RATE_LIMITS: config, UPSTASH_REDIS_REST_URL: await skewedStore((us) => us + ms * 1000) });
        fleets.push(one);
        return one.isolates[0]!;
      }),
    );
    const skewed: Fleet = { isolates, burst: async () => [], dispose: async () => {} };
    const run = crypto.randomUUID().slice(0, 4);
    const admitted: number[] = [];
    for (let t = 0; t < 5; t++) admitted.push(await flood(skewed, 400, { "cf-connecting-ip": `2001:db8:${run}:${t}::1` }));
    expect(admitted).toEqual(Array(5).fill(50));
  }, 180_000);

  it("a clock d ahead of another's opens a caller's window up to d early for the requests it decides, never earlier", async () => {
    const [windowMs, d] = [12_000, 6_000];
    // time is a clock the test moves, read by both stores' proxies (the floods take none of it,
    // however slow the machine); no denial cache, which keeps the isolate's own time: the
    // script decides every request
    let now = Date.UTC(2026, 10, 29, 12);
    const config = rateLimits({ timeout: 30_000, clock: "edge", denialCacheSize: 0, rules: [{ name: "w", limit: 20, window: windowMs }] });
    const [behind, ahead] = await Promise.all(
      [0, d].map(async (ms) => {
        const one = await startGateFleet(1, { RATE_LIMITS: config, UPSTASH_REDIS_REST_URL: await skewedStore(() => (now + ms) * 1000) });
        fleets.push(one);
        return one;
      }),
    );
    const headers = { "cf-connecting-ip": "2001:db8:5ce::1" };
    expect(await flood(behind!, 60, headers)).toBe(20);
    // the ahead clock reads the window as ending d later: the entries are in it for window - d more
    expect(await flood(ahead!, 60, headers)).toBe(0);
    // past window - d after the last entry, they have left the ahead clock's window
    now += windowMs - d + 300;
    expect(await flood(ahead!, 60, headers)).toBe(20);
    // and the behind clock reads the window as ending at the newest entry: nothing more
    expect(await flood(behind!, 60, headers)).toBe(0);
  }, 60_000);
});

describe("an operator's change mid-flood", () => {
  const tiers = {
    identity: { header: "x-api-key" },
    defaultTier: "free",
    tiers: {
      free: { rules: [{ name: "hour", limit: 20, window: "1h" }] },
      paid: { rules: [{ name: "hour", limit: 50, window: "1h" }] },
    },
  };

  it("an override raised mid-flood: exactly the new limit over the flood and the one after", async () => {
    const f = await fleet(tiers);
    const key = `sk-${crypto.randomUUID()}`;
    await admin(f, "keys/set", { key, tier: "free" });
    const headers = { "cf-connecting-ip": "198.51.100.9", "x-api-key": key };
    const first = await flood(f, 300, headers, { after: 100, run: () => admin(f, "keys/override", { key, rule: "hour", limit: 45 }) });
    const second = await flood(f, 300, headers);
    expect(first + second).toBe(45);
    const usage = await admin(f, "usage", { key });
    expect((usage.rules as { used: number }[])[0]!.used).toBe(45);
  }, 120_000);

  it("a tier change mid-flood: nothing is recorded in the old tier after the move, and the new tier admits exactly its limit", async () => {
    const f = await fleet(tiers);
    const key = `sk-${crypto.randomUUID()}`;
    await admin(f, "keys/set", { key, tier: "free" });
    const headers = { "cf-connecting-ip": "198.51.100.10", "x-api-key": key };
    // the free tier is spent first, then the key moves to paid while a flood is under way
    expect(await flood(f, 100, headers)).toBe(20);
    const during = await flood(f, 300, headers, { after: 50, run: () => admin(f, "keys/update", { key, tier: "paid" }) });
    const after = await flood(f, 300, headers);
    expect(during + after).toBe(50);
    const usage = await admin(f, "usage", { key });
    expect((usage.rules as { used: number }[])[0]!.used).toBe(50);
  }, 120_000);

  it("a reset after a flood: once denialCacheMaxAge has passed, the isolates together admit exactly the limit again", async () => {
    const f = await fleet({ denialCacheMaxAge: "2s", rules: [{ name: "hour", limit: 30, window: "1h" }] });
    const headers = { "cf-connecting-ip": "198.51.100.11" };
    expect(await flood(f, 200, headers)).toBe(30);
    await admin(f, "reset", { ip: "198.51.100.11" });
    // past the bound every isolate has forgotten its cached denial
    await new Promise((r) => setTimeout(r, 2_500));
    expect(await flood(f, 200, headers)).toBe(30);
  }, 120_000);
});
