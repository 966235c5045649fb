import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FaultProxy, startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";
import { identify } from "../../src/decision/identity.ts";
import { SLIDING_WINDOW_SCRIPT } from "../../src/script/sliding-window.ts";
import { rateLimits, startGateFleet, startGateIsolate } from "../helpers/miniflare.ts";
import { type OwnShim, startOwnShim } from "../helpers/shim.ts";
import { until as waitUntil } from "../helpers/until.ts";

// The console's live figures across isolates of the built Worker: a Redis and a shim of this
// file's own (so every call the shim counts is this file's), a fault proxy between the gate
// and that shim, and a reader — a gate isolate on a second shim in front of the same Redis —
// whose reads the counting shim never sees.
const ADMIN_TOKEN = crypto.randomUUID();
let own: OwnShim;
let readerShim: RunningShim;
let proxy: FaultProxy;
const started: { dispose(): Promise<void> }[] = [];

interface Figures {
  minutes: { storeFailures: number }[];
  totals: { all: number; flushes: number; lost: number; storeFailures: number; decisions: Record<string, number> };
}

beforeAll(async () => {
  own = await startOwnShim();
  readerShim = await startShim({ token: own.token, redisUrl: own.redis.url, log: () => {} });
  proxy = await startFaultProxy(own.shim.url);
}, 60_000);

afterAll(async () => {
  await Promise.all(started.map((s) => s.dispose()));
  await proxy?.close();
  await readerShim?.close();
  await own?.close();
});

/** A fleet through the proxy and a reader of its figures, on one configuration. */
async function setup(k: number, limits: Record<string, unknown>) {
  const RATE_LIMITS = rateLimits({ timeout: 30_000, denialCacheSize: 0, ...limits });
  const [fleet, reader] = await Promise.all([
    startGateFleet(k, { UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: own.token, ADMIN_TOKEN, RATE_LIMITS }),
    startGateIsolate({ UPSTASH_REDIS_REST_URL: readerShim.url, UPSTASH_REDIS_REST_TOKEN: own.token, ADMIN_TOKEN, RATE_LIMITS }),
  ]);
  started.push(fleet, reader);
  return { fleet, figures: () => figuresOf(reader) };
}

async function figuresOf(reader: Miniflare): Promise<Figures> {
  const res = await reader.dispatchFetch("http://gate.example/__slidegate/figures", {
    method: "POST",
    body: '{"minutes":10}',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Figures;
}

/** Reads the figures until `done` holds (isolates flush within seconds), or for 60 s at most. */
async function until(read: () => Promise<Figures>, done: (f: Figures) => boolean): Promise<Figures> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const f = await read();
    if (done(f) || Date.now() > deadline) return f;
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Then waits past every isolate's next flush round, so a count sent twice would show. */
const settle = () => new Promise((r) => setTimeout(r, 12_000));

/** Once the figures count `all`, and past every isolate's next flush: exactly these decisions, and none lost. */
async function expectSettledFigures(figures: () => Promise<Figures>, all: number, decisions: Record<string, number>) {
  await until(figures, (f) => f.totals.all >= all);
  await settle();
  const f = await figures();
  expect(f.totals.all).toBe(all);
  expect(f.totals.decisions).toMatchObject(decisions);
  expect(f.totals.lost).toBe(0);
}

async function send(fleet: Fleet, n: number, ip: (i: number) => string, offset = 0): Promise<number[]> {
  const codes: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await fleet.isolates[(offset + i) % fleet.isolates.length]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": ip(i) } });
    await res.arrayBuffer();
    codes.push(res.status);
  }
  return codes;
}

describe("live figures across isolates", () => {
  it("N decisions across three isolates appear as exactly N, and their flushes add no Redis call to any request", async () => {
    const { fleet, figures } = await setup(3, { rules: [{ name: "hour", limit: 20, window: "1h" }] });
    // loaded ahead, as a running Redis holds it: a first decision would cost NOSCRIPT, then EVAL
    await own.client().scriptLoad(SLIDING_WINDOW_SCRIPT);
    const before = (await own.stats()).requests;
    const n = 90;
    // three callers, 30 requests each: 20 admitted and 10 denied each, every one asking Redis once
    const codes = await send(fleet, n, (i) => `198.51.100.${i % 3}`);
    expect(codes.filter((c) => c === 200)).toHaveLength(60);
    expect(codes.filter((c) => c === 429)).toHaveLength(30);

    await until(figures, (f) => f.totals.all >= n);
    await settle();
    const after = (await own.stats()).requests;
    const f = await figures();
    expect(f.totals.all).toBe(n);
    expect(f.totals.decisions.admitted).toBe(60);
    expect(f.totals.decisions.denied).toBe(30);
    expect(f.totals.lost).toBe(0);
    // every isolate flushed, and the shim saw one call per request and one per flush: no more
    expect(f.totals.flushes).toBeGreaterThanOrEqual(3);
    expect(after - before).toBe(n + f.totals.flushes);
  }, 120_000);

  it("a flush whose reply was lost is sent again and applied once", async () => {
    const { fleet, figures } = await setup(1, { fail: "open", rules: [{ name: "hour", limit: 100, window: "1h" }] });
    // every reply is lost on its way back: the decisions fail open (and are counted), and so
    // does each flush, which Redis has applied all the same
    const faulted = proxy.faulted;
    proxy.set({ kind: "lost-reply" });
    expect(await send(fleet, 4, () => "198.51.100.20")).toEqual([200, 200, 200, 200]);
    const applied = await until(figures, (f) => f.totals.all >= 4 && proxy.faulted > faulted + 4);
    proxy.set({ kind: "none" });
    expect(proxy.faulted, "a flush met the fault").toBeGreaterThan(faulted + 4);
    expect(applied.totals.all).toBe(4);

    // the next flushes send that batch again (a no-op), then what came since
    expect(await send(fleet, 2, () => "198.51.100.20")).toEqual([200, 200]);
    await expectSettledFigures(figures, 6, { "failed-open": 4, admitted: 2 });
  }, 120_000);

  it("a flush the store answers with a reply its script never gives is sent again, not taken as applied", async () => {
    const { fleet, figures } = await setup(1, { fail: "open", rules: [{ name: "hour", limit: 100, window: "1h" }] });
    // every call answered 200 {"result":"surprise"}: the decisions fail open (and are counted),
    // and a flush that took that for "applied" would drop its batch without counting it lost
    const faulted = proxy.faulted;
    proxy.set({ kind: "wrong-shape" });
    try {
      expect(await send(fleet, 3, () => "198.51.100.40")).toEqual([200, 200, 200]);
      // the three decisions, then at least one flush
      await waitUntil("a flush met the fault", () => proxy.faulted >= faulted + 4, 60_000);
    } finally {
      proxy.set({ kind: "none" });
    }
    // a request re-arms the flush of the batch the store never applied
    expect(await send(fleet, 2, () => "198.51.100.40")).toEqual([200, 200]);
    await expectSettledFigures(figures, 5, { "failed-open": 3, admitted: 2 });
  }, 150_000);

  it("decisions made while the store is unreachable fail open, are counted, and reach the figures once it is back", async () => {
    const { fleet, figures } = await setup(2, { fail: "open", timeout: 5000, rules: [{ name: "hour", limit: 100, window: "1h" }] });
    expect(await send(fleet, 2, () => "198.51.100.30")).toEqual([200, 200]);
    const faulted = proxy.faulted;
    proxy.set({ kind: "drop" });
    expect(await send(fleet, 3, () => "198.51.100.30", 0)).toEqual([200, 200, 200]);
    // the three decisions, then at least one flush the store never saw
    const deadline = Date.now() + 60_000;
    while (proxy.faulted < faulted + 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    proxy.set({ kind: "none" });
    expect(proxy.faulted).toBeGreaterThanOrEqual(faulted + 4);
    // a request re-arms the flush of what the store missed
    expect(await send(fleet, 2, () => "198.51.100.30")).toEqual([200, 200]);
    await expectSettledFigures(figures, 7, { "failed-open": 3, admitted: 4 });
  }, 120_000);

  it("an API key admitted while its address's call for shadow rules fails: one admitted, and one store failure beside it", async () => {
    const { fleet, figures } = await setup(1, {
      identity: { header: "x-api-key" },
      rules: [{ name: "per-key", limit: 100, window: "1h" }],
      addressRules: [{ name: "trial-address", limit: 100, window: "1h", shadow: true }],
    });
    const key = `key-${crypto.randomUUID()}`;
    const keyTag = (await identify("k", key)).tag;
    // the key's call reaches the store; the address's (and a flush, should one come meanwhile) does not
    proxy.set({ kind: "status", status: 503 }, (body) => body.includes(keyTag));
    let res: Awaited<ReturnType<Miniflare["dispatchFetch"]>>;
    try {
      res = await fleet.isolates[0]!.dispatchFetch("http://gate.example/", { headers: { "cf-connecting-ip": "198.51.100.50", "x-api-key": key } });
      await res.arrayBuffer();
    } finally {
      proxy.set({ kind: "none" });
    }
    expect(res.status).toBe(200);
    expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
    expect(res.headers.get("RateLimit")).toContain('"per-key"');
    await expectSettledFigures(figures, 1, { admitted: 1 });
    const f = await figures();
    expect(f.totals.storeFailures).toBe(1);
    expect(f.minutes.reduce((sum, m) => sum + m.storeFailures, 0)).toBe(1);
  }, 120_000);
});
