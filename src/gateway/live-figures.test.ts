import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { createRegistry } from "../admin/registry.ts";
import { type GateConfig, parseRateLimits } from "../config/rate-limits.ts";
import { quantile, readFigures, TOP_MINUTES } from "../console/figures.ts";
import { keyIdentity } from "../decision/identity.ts";
import type { Step } from "../decision/pipeline.ts";
import { LimiterError } from "../script/limiter.ts";
import { createLiveFigures, FIGURES_DEFAULTS, FLUSH_SCRIPT, figureKeys, LATENCY_BUCKETS_MS, type LiveFiguresOptions, latencyBucket } from "./live-figures.ts";

// the test shim, as the test setup hands it to every Worker test (test/setup/services.ts)
const services = JSON.parse((env as unknown as { TEST_SERVICES: string }).TEST_SERVICES) as { shimUrl: string; shimToken: string };
const redis = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

/** A configuration with a key prefix of its own, and a clock the test moves. */
function setup(options: Partial<LiveFiguresOptions> = {}) {
  const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const parsed = parseRateLimits({
    prefix,
    rules: [
      { name: "minute", limit: 5, window: "1m" },
      { name: "hour", limit: 50, window: "1h" },
    ],
  });
  if (!parsed.ok) throw new Error(parsed.errors.join("; "));
  const config: GateConfig = parsed.config;
  const clock = { ms: T0 + 5_000 };
  const isolate = () => createLiveFigures({ redisUrl: services.shimUrl, redisToken: services.shimToken, prefix, now: () => clock.ms, ...options });
  const read = (minutes = 60) => readFigures({ redis, registry: createRegistry({ config, redis }), config, now: clock.ms }, minutes);
  return { prefix, config, clock, isolate, read };
}

const caller = (tag = "iAAAAAAAAAAAAAAAAAAAAAA", keyHash?: string) =>
  ({ identity: { kind: keyHash ? "k" : "i", tag, keyHash }, tier: "default", client: { bucket: "192.0.2.1" } }) as const;
const RULES = [{ name: "minute" }, { name: "hour" }] as unknown as Extract<Step, { kind: "decided" }>["rules"];
const decision = (admitted: boolean) => ({
  admitted,
  retryAfterMs: admitted ? 0 : 1000,
  wouldDeny: [],
  limits: [{ name: "minute", limit: 5, windowMs: 60_000, shadow: false, remaining: 0, resetMs: 1000, retryMs: admitted ? 0 : 1000 }],
});
const admitted = (redisMs = 3): Step => ({ kind: "decided", caller: caller(), rules: RULES, verdict: { kind: "admitted", decision: decision(true), redisMs } });
const denied = (tag?: string, keyHash?: string, redisMs = 2, fromCache = false): Step => ({
  kind: "decided",
  caller: caller(tag, keyHash),
  rules: RULES,
  verdict: { kind: "denied", decision: decision(false), redisMs, elapsedMs: 0, fromCache },
});

describe("live figures", () => {
  it("N decisions counted by two isolates appear as exactly N once both have flushed", async () => {
    const { isolate, read } = setup();
    const [a, b] = [isolate(), isolate()];
    for (let i = 0; i < 37; i++) a.record(admitted());
    for (let i = 0; i < 25; i++) b.record(i % 5 === 0 ? denied() : admitted());
    await Promise.all([a.flush(), b.flush()]);
    expect([a.unsent, b.unsent]).toEqual([0, 0]);
    const figures = await read();
    expect(figures.totals.decisions.admitted).toBe(37 + 20);
    expect(figures.totals.decisions.denied).toBe(5);
    expect(figures.totals.all).toBe(62);
    expect(figures.totals.flushes).toBe(2);
    expect(figures.totals.lost).toBe(0);
    // per rule: an admitted request counts against both of its rules, a denial against the one that denied
    expect(figures.totals.byRule).toEqual(
      expect.arrayContaining([
        { outcome: "admitted", tier: "default", rule: "minute", count: 57 },
        { outcome: "admitted", tier: "default", rule: "hour", count: 57 },
        { outcome: "denied", tier: "default", rule: "minute", count: 5 },
      ]),
    );
    expect(figures.minutes.at(-1)!.decisions.admitted).toBe(57);
  });

  it("counts requests turned away before any rule under their own outcome, and a request no rule covers not at all", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    const kinds = ["denylisted", "allowlisted", "ambiguous-key", "key-required", "unknown-key", "disabled-key"] as const;
    for (const [i, kind] of kinds.entries()) for (let n = 0; n <= i; n++) figures.record({ kind, caller: caller(), address: caller().identity } as Step);
    figures.record({ kind: "no-rule", caller: caller() });
    await figures.flush();
    const { decisions, all } = (await read()).totals;
    expect(Object.fromEntries(kinds.map((k) => [k, decisions[k]]))).toEqual({
      denylisted: 1,
      allowlisted: 2,
      "ambiguous-key": 3,
      "key-required": 4,
      "unknown-key": 5,
      "disabled-key": 6,
    });
    expect(all).toBe(21);
  });

  it("takes a batch out of memory before the call: decisions counted while it is in flight go in the next one, none twice", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    for (let i = 0; i < 10; i++) figures.record(admitted());
    const first = figures.flush();
    for (let i = 0; i < 7; i++) figures.record(admitted());
    expect(figures.unsent).toBe(7);
    await first;
    await figures.flush();
    expect((await read()).totals.decisions.admitted).toBe(17);
  });

  it("files decisions under the minute the isolate's clock names, and reads them back per minute", async () => {
    const { isolate, read, clock } = setup();
    const figures = isolate();
    figures.record(admitted());
    clock.ms += 60_000;
    figures.record(admitted());
    figures.record(admitted());
    await figures.flush();
    const per = (await read(3)).minutes.map((m) => [m.at, m.decisions.admitted]);
    expect(per).toEqual([
      [new Date(T0 - 60_000).toISOString(), 0],
      [new Date(T0).toISOString(), 1],
      [new Date(T0 + 60_000).toISOString(), 2],
    ]);
  });

  it("keeps each minute's counts three days after its last write, and its most refused identities only as long as the console reads them", async () => {
    const { isolate, prefix, read } = setup();
    const figures = isolate();
    const top = `i${"T".repeat(22)}`;
    for (let i = 0; i < 10; i++) figures.record(denied(top));
    const refused = FIGURES_DEFAULTS.trackedPerMinute + 300;
    for (let i = 0; i < refused; i++) figures.record(denied(`i${String(i).padStart(22, "0")}`));
    await figures.flush();
    const minute = Math.floor(T0 / 60_000);
    const ttl = await redis.ttl(figureKeys.minute(prefix, minute));
    expect(ttl).toBeGreaterThan(FIGURES_DEFAULTS.retainMinutes * 60 - 60);
    expect(ttl).toBeLessThanOrEqual(FIGURES_DEFAULTS.retainMinutes * 60);
    // a flood of made-up refused callers fills a minute's set: it must not stay for days
    // (1,000 names a minute for three days is most of a gigabyte), only while "refused now" reads it
    const topTtl = await redis.ttl(figureKeys.top(prefix, minute));
    expect(topTtl).toBeGreaterThan(TOP_MINUTES * 60);
    expect(topTtl).toBeLessThanOrEqual(FIGURES_DEFAULTS.topRetainMinutes * 60);
    expect(FIGURES_DEFAULTS.topRetainMinutes * 60).toBeLessThan(3600);
    expect(await redis.zcard(figureKeys.top(prefix, minute))).toBe(FIGURES_DEFAULTS.topPerFlush);
    const read1 = await read();
    // every refusal is counted: named, or in the untracked total
    expect(read1.totals.decisions.denied).toBe(refused + 10);
    // named: the top one and the next most refused up to the flush's share; the rest counted
    expect(read1.totals.untracked).toBe(refused - (FIGURES_DEFAULTS.topPerFlush - 1));
    expect(read1.top.identities[0]).toEqual({ tag: top, kind: "ip", refused: 10, tier: "default", registered: false });
  });

  it("names the caller refused most in a minute even when a thousand callers refused once came first", async () => {
    const { isolate, prefix } = setup();
    const figures = isolate();
    for (let i = 0; i < FIGURES_DEFAULTS.trackedPerMinute; i++) figures.record(denied(`i${String(i).padStart(22, "0")}`));
    const flooder = `i${"F".repeat(22)}`;
    for (let i = 0; i < 2999; i++) figures.record(denied(flooder));
    await figures.flush();
    const minute = Math.floor(T0 / 60_000);
    expect(await redis.zscore(figureKeys.top(prefix, minute), flooder)).toBe(2999);
  });

  it("names a refused API key by its SHA-256 and an address by its tag, never a raw key or address", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    const hash = "ab".repeat(32);
    const { tag } = keyIdentity(hash);
    figures.record(denied(tag, hash));
    figures.record(denied("iBBBBBBBBBBBBBBBBBBBBBB"));
    await figures.flush();
    const top = (await read()).top.identities;
    expect(top).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: "key", hash, tag, registered: false, tier: "default" }),
        expect.objectContaining({ kind: "ip", tag: "iBBBBBBBBBBBBBBBBBBBBBB" }),
      ]),
    );
  });

  it("applies a batch sent twice once: a resend after a lost reply changes nothing", async () => {
    const { prefix } = setup();
    const keys = [figureKeys.batch(prefix, "b1"), figureKeys.minute(prefix, 1), figureKeys.top(prefix, 1)];
    const args = ["60", "120", "90", "1000", "h", "2", "d|admitted|default", "4", "z", "3", "iX", "2"];
    expect(await redis.eval(FLUSH_SCRIPT, keys, args)).toBe(1);
    expect(await redis.eval(FLUSH_SCRIPT, keys, args)).toBe(0);
    expect(await redis.hget(keys[1]!, "d|admitted|default")).toBe(4);
    expect(await redis.zscore(keys[2]!, "iX")).toBe(2);
  });

  it("keeps a batch the store refused and offers it again; past its time its decisions are counted as lost, not dropped silently", async () => {
    const { prefix, clock } = setup();
    const figures = createLiveFigures({ redisUrl: services.shimUrl, redisToken: "not-the-token", prefix, now: () => clock.ms, retryForMs: 60_000 });
    for (let i = 0; i < 4; i++) figures.record(admitted());
    await figures.flush();
    expect(figures.unsent).toBe(4);
    figures.record(admitted());
    await figures.flush(); // the same batch again (still refused); the new decision waits
    expect(figures.unsent).toBe(5);
    clock.ms += 61_000;
    await figures.flush(); // given up: 4 lost, and the lost count itself now waits to be sent
    expect(figures.unsent).toBe(1);
    expect(await redis.exists(figureKeys.minute(prefix, Math.floor(T0 / 60_000)))).toBe(0);
  });

  it("counts store latency per fixed bucket, and a denial answered from the isolate's cache waited on nothing", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    for (const ms of [0.4, 1.5, 1.7, 4, 4, 9, 40, 40, 2500]) figures.record(admitted(ms));
    // a store that answered within the clock's resolution waited all the same
    figures.record(denied(undefined, undefined, 0));
    figures.record(denied(undefined, undefined, 0, true));
    await figures.flush();
    const { storeLatencyMs } = (await read()).totals;
    expect(storeLatencyMs).toEqual({ count: 10, p50: 5, p99: 3000 });
  });

  it("counts a store failure of shadow rules alone as failed-shadow, an outage the operator sees, never failed-open, and with no latency (no answer came)", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    const error = new LimiterError("rate-limit store failed: injected");
    const failed = (shadowOnly: boolean): Step => ({
      kind: "decided",
      caller: caller(),
      rules: RULES,
      verdict: { kind: "failed", closed: false, error, ...(shadowOnly ? { shadowOnly } : {}) },
    });
    figures.record(failed(true));
    figures.record(failed(false));
    await figures.flush();
    const { decisions, storeLatencyMs } = (await read()).totals;
    expect([decisions.admitted, decisions["failed-shadow"], decisions["failed-open"]]).toEqual([0, 1, 1]);
    expect(storeLatencyMs.count).toBe(0);
  });

  it("counts a store failure of the shadow call beside an admission as one store failure and one admitted, and each failed decision as one store failure, beside the outcomes", async () => {
    const { isolate, read, clock } = setup();
    const figures = isolate();
    const error = new LimiterError("rate-limit store failed: injected");
    const failed = (closed: boolean, shadowOnly?: true): Step => ({
      kind: "decided",
      caller: caller(),
      rules: RULES,
      verdict: { kind: "failed", closed, error, ...(shadowOnly && { shadowOnly }) },
    });
    // an API key's call answered, its address's call for shadow rules alone failed
    const besideAdmission: Step = {
      kind: "decided",
      caller: caller(),
      rules: RULES,
      verdict: { kind: "admitted", decision: decision(true), redisMs: 3, shadowFailure: { error, address: true } },
    };
    figures.record(besideAdmission);
    figures.record(failed(false));
    figures.record(failed(true));
    figures.record(failed(false, true));
    figures.record(admitted());
    figures.record(denied());
    clock.ms += 60_000;
    figures.record(besideAdmission);
    await figures.flush();
    const { minutes, totals } = await read(2);
    expect(totals.storeFailures).toBe(5);
    expect(minutes.map((m) => m.storeFailures)).toEqual([4, 1]);
    expect(totals.decisions).toMatchObject({ admitted: 3, denied: 1, "failed-open": 1, "failed-closed": 1, "failed-shadow": 1 });
    // one outcome per decision: the store failures are no decisions of their own
    expect(totals.all).toBe(7);
    expect(totals.lost).toBe(0);
    // the admissions beside a failed call still waited on the store that answered them
    expect(totals.storeLatencyMs.count).toBe(4);
  });

  it("counts a key refused by its own call, its address rules' call failing beside it, as one refusal and one store failure", async () => {
    const { isolate, read } = setup();
    const figures = isolate();
    const addressFailure = { error: new LimiterError("rate-limit store failed: injected"), rules: [] };
    figures.record({ kind: "unknown-key", caller: caller(), address: caller().identity, addressFailure });
    figures.record({ kind: "disabled-key", caller: caller(), addressFailure });
    figures.record({ kind: "disabled-key", caller: caller() });
    await figures.flush();
    const { totals } = await read();
    expect(totals.decisions).toMatchObject({ "unknown-key": 1, "disabled-key": 2 });
    expect(totals.storeFailures).toBe(2);
  });

  it("reads a minute counted without store failures (by an earlier build) as none", async () => {
    const { prefix, read } = setup();
    await redis.hincrby(figureKeys.minute(prefix, Math.floor(T0 / 60_000)), "d|admitted|default", 3);
    const { minutes, totals } = await read(2);
    expect([totals.decisions.admitted, totals.all, totals.storeFailures]).toEqual([3, 3, 0]);
    expect(minutes.map((m) => m.storeFailures)).toEqual([0, 0]);
  });
});

describe("latency buckets", () => {
  it("puts a latency in the first bucket whose bound holds it, and anything past the last in the last", () => {
    expect(latencyBucket(0)).toBe(0);
    expect(latencyBucket(1)).toBe(0);
    expect(latencyBucket(1.01)).toBe(1);
    expect(latencyBucket(30_000)).toBe(LATENCY_BUCKETS_MS.length - 1);
    expect(latencyBucket(99_999)).toBe(LATENCY_BUCKETS_MS.length - 1);
  });

  it("gives a quantile as the upper bound of the bucket holding the ⌈q·n⌉-th latency", () => {
    expect(quantile([], 0.5)).toBe(null);
    expect(quantile([0, 3, 1], 0.5)).toBe(2);
    expect(quantile([0, 3, 1], 0.99)).toBe(3);
    // 99 fast and 1 slow: p99 is still the fast bucket, p99 of 98+2 is not
    expect(quantile([99, 0, 0, 1], 0.99)).toBe(1);
    expect(quantile([98, 0, 0, 2], 0.99)).toBe(5);
  });
});
