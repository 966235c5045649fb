import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import type { GateOptions } from "../../src/gateway/gateway.ts";
import { makeGate, request, services, statuses, testClock } from "./helpers.ts";

const sha256Hex = async (text: string) =>
  [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)))].map((b) => b.toString(16).padStart(2, "0")).join("");

/** An Analytics Engine dataset that keeps what is written, to read it back. */
function recordingDataset() {
  const points: AnalyticsEngineDataPoint[] = [];
  return { points, dataset: { writeDataPoint: (p?: AnalyticsEngineDataPoint) => void points.push(p!) } as AnalyticsEngineDataset };
}
const outcomes = (points: AnalyticsEngineDataPoint[]) => points.map((p) => p.blobs![0]);

describe("shadow mode", () => {
  it("a shadow rule never blocks, and its would-deny count is exact", async () => {
    const { points, dataset } = recordingDataset();
    const gate = makeGate({ rules: [{ name: "trial", limit: 3, window: "1m", shadow: true }] }, { metrics: dataset });
    const marked: boolean[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await gate(request());
      expect(res.status).toBe(200);
      await res.body?.cancel();
      marked.push(res.headers.get("X-Slidegate-Shadow-Denied") === "trial");
    }
    expect(marked).toEqual([false, false, false, true, true, true, true, true, true, true]);
    expect(outcomes(points)).toEqual([...Array(3).fill("admitted"), ...Array(7).fill("shadow-denied")]);
    // the first in full; the other six are counted for the summary
    expect(gate.logs.filter((l) => l.line.event === "slidegate.shadow_denied")).toHaveLength(1);
  });

  it("a flood of shadow denials writes a line per identity, rule and window, and counts every one", async () => {
    const clock = testClock();
    const gate = makeGate({ rules: [{ name: "trial", limit: 3, window: "1m", shadow: true }] }, { now: clock.now });
    expect(new Set(await statuses(gate, 203))).toEqual(new Set([200]));
    const shadowLines = () => gate.logs.map((l) => l.line).filter((l) => String(l.event).startsWith("slidegate.shadow_denied"));
    expect(shadowLines()).toEqual([expect.objectContaining({ event: "slidegate.shadow_denied", rules: ["trial"] })]);
    // a minute on, the next request (another caller, admitted) carries the summary out
    clock.advance(60_000);
    await (await gate(request("/", { ip: "198.51.100.20" }))).body?.cancel();
    const [full, summary] = shadowLines();
    expect(summary).toMatchObject({ event: "slidegate.shadow_denied_summary", tag: full!.tag, shadowDenied: 200, rules: { trial: 200 } });
    expect(shadowLines()).toHaveLength(2);
  });

  it("global shadow turns every rule into a report; enforced rules beside a shadow one still hold", async () => {
    const everything = makeGate({ shadow: true, rules: [{ name: "a", limit: 1, window: "1m" }] });
    expect(await statuses(everything, 4)).toEqual([200, 200, 200, 200]);

    const mixed = makeGate({
      rules: [
        { name: "enforced", limit: 5, window: "1m" },
        { name: "candidate", limit: 2, window: "1m", shadow: true },
      ],
    });
    const codes: number[] = [];
    let wouldDeny = 0;
    for (let i = 0; i < 7; i++) {
      const res = await mixed(request());
      await res.body?.cancel();
      codes.push(res.status);
      if (res.headers.has("X-Slidegate-Shadow-Denied")) wouldDeny++;
      if (i === 0) {
        expect(res.headers.get("RateLimit")).toBe('"enforced";r=4;t=60');
        expect(res.headers.get("X-Slidegate-Shadow")).toBe('"candidate";r=1;t=60');
      }
    }
    expect(codes).toEqual([200, 200, 200, 200, 200, 429, 429]);
    expect(wouldDeny).toBe(3); // admitted requests 3, 4 and 5 exceed the candidate's 2
  });
});

describe("allow and deny lists", () => {
  it("denies listed IPs and CIDR ranges (IPv4, IPv6) and key hashes with 403, allows listed ones past every limit", async () => {
    const gate = makeGate({
      identity: { header: "x-api-key" },
      rules: [{ name: "tight", limit: 1, window: "1m" }],
      deny: { ips: ["198.51.100.0/24", "2001:db8:bad::/48"], keys: [await sha256Hex("stolen-key")] },
      allow: { ips: ["192.0.2.10", "2001:db8:600d::/48"], keys: [await sha256Hex("partner-key")] },
    });
    for (const call of [{ ip: "198.51.100.77" }, { ip: "2001:db8:bad::1" }, { ip: "::ffff:198.51.100.5" }, { ip: "203.0.113.1", key: "stolen-key" }]) {
      const res = await gate(request("/", call));
      expect(res.status, JSON.stringify(call)).toBe(403);
      expect(await res.json()).toMatchObject({ type: "urn:slidegate:forbidden" });
    }
    for (const call of [{ ip: "192.0.2.10" }, { ip: "2001:db8:600d::42" }, { ip: "203.0.113.2", key: "partner-key" }]) {
      expect(await statuses(gate, 5, "/", call), JSON.stringify(call)).toEqual([200, 200, 200, 200, 200]);
    }
    expect(await statuses(gate, 2, "/", { ip: "203.0.113.3" })).toEqual([200, 429]);
  });

  it("denies a caller both lists hold: a denied address inside an allowed range, an allowed key from a denied address, a denied key from an allowed address", async () => {
    const gate = makeGate({
      identity: { header: "x-api-key" },
      rules: [{ name: "tight", limit: 1, window: "1m" }],
      deny: { ips: ["192.0.2.66", "198.51.100.0/24"], keys: [await sha256Hex("stolen-key")] },
      allow: { ips: ["192.0.2.0/24"], keys: [await sha256Hex("partner-key")] },
    });
    for (const call of [{ ip: "192.0.2.66" }, { ip: "198.51.100.9", key: "partner-key" }, { ip: "192.0.2.10", key: "stolen-key" }]) {
      const res = await gate(request("/", call));
      expect(res.status, JSON.stringify(call)).toBe(403);
      expect(await res.json()).toMatchObject({ type: "urn:slidegate:forbidden" });
    }
    // the allow list still lets the rest of its range through, past the limit
    expect(await statuses(gate, 3, "/", { ip: "192.0.2.10" })).toEqual([200, 200, 200]);
  });

  it("refuses list entries that are not addresses, naming the field", async () => {
    expect(() => makeGate({ rules: [{ name: "a", limit: 1, window: "1s" }], deny: { ips: ["10.0.0.0/8", "not-an-ip"] } })).toThrow(
      'RATE_LIMITS.deny.ips[1]: "not-an-ip" is not an IP address or CIDR range',
    );
  });
});

const ADMIN = "admin-secret-for-tests";
const admin = (gate: (r: Request) => Promise<Response>, route: string, body: unknown, token: string | null = ADMIN) =>
  gate(
    new Request(`https://gate.example/__slidegate/${route}`, {
      method: "POST",
      body: JSON.stringify(body),
      headers: { ...(token !== null && { authorization: `Bearer ${token}` }), "cf-connecting-ip": "203.0.113.250", "x-request-id": `admin-${route}-${crypto.randomUUID()}` },
    }),
  );
const originHits = async (id: string) => ((await (await fetch(`${services.originUrl}/__origin/hits/${id}`)).json()) as { hits: number }).hits;
const withAdmin = (extra: Partial<GateOptions> = {}) =>
  makeGate(
    {
      identity: { header: "x-api-key" },
      rules: [
        { name: "minute", limit: 3, window: "1m" },
        { name: "hour", limit: 10, window: "1h" },
      ],
    },
    { adminToken: ADMIN, ...extra },
  );

describe("admin API", () => {
  it("refuses a missing or wrong token with 401, and never forwards to the origin", async () => {
    const gate = withAdmin();
    for (const token of [null, "wrong", `${ADMIN}x`]) {
      const id = crypto.randomUUID();
      const res = await gate(
        new Request("https://gate.example/__slidegate/usage", {
          method: "POST",
          body: '{"ip":"203.0.113.9"}',
          headers: { ...(token !== null && { authorization: `Bearer ${token}` }), "x-request-id": id },
        }),
      );
      expect(res.status).toBe(401);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(await originHits(id)).toBe(0);
    }
  });

  it("answers 404 for unknown routes, and for every route when ADMIN_TOKEN is not set", async () => {
    const res = await admin(withAdmin(), "explode", { ip: "203.0.113.9" });
    expect(res.status).toBe(404);
    const off = makeGate({ rules: [{ name: "m", limit: 3, window: "1m" }] });
    const id = crypto.randomUUID();
    const disabled = await off(
      new Request("https://gate.example/__slidegate/usage", { method: "POST", body: "{}", headers: { authorization: `Bearer ${ADMIN}`, "x-request-id": id } }),
    );
    expect(disabled.status).toBe(404);
    expect(await originHits(id)).toBe(0);
  });

  it("answers a bad body with 400 naming what to send", async () => {
    const gate = withAdmin();
    for (const body of ["nope", {}, { key: "a", ip: "b" }, { key: "" }]) {
      const res = await admin(gate, "usage", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(((await res.json()) as { detail: string }).detail).toMatch(/JSON|exactly one of "key"/);
    }
    expect((await admin(gate, "block", { key: "k", seconds: 0 })).status).toBe(400);
  });

  it("reads an identity's usage per rule, then resets it", async () => {
    const gate = withAdmin();
    expect(await statuses(gate, 2, "/", { key: "customer-7" })).toEqual([200, 200]);
    const usage = (await (await admin(gate, "usage", { key: "customer-7" })).json()) as {
      tier: string;
      blockedForMs: number;
      identity: { kind: string };
      rules: { name: string; used: number; remaining: number; resetMs: number; oldestEntryAt: string }[];
    };
    expect(usage).toMatchObject({ tier: "default", blockedForMs: 0, identity: { kind: "key" } });
    expect(usage.rules.map((r) => [r.name, r.used, r.remaining])).toEqual([
      ["minute", 2, 1],
      ["hour", 2, 8],
    ]);
    expect(usage.rules[0]!.resetMs).toBeGreaterThan(55_000);
    expect(Date.now() - Date.parse(usage.rules[0]!.oldestEntryAt)).toBeLessThan(10_000);
    expect(JSON.stringify(usage)).not.toContain("customer-7");

    expect(await (await admin(gate, "reset", { key: "customer-7" })).json()).toMatchObject({ reset: true });
    const after = (await (await admin(gate, "usage", { key: "customer-7" })).json()) as { rules: { used: number }[] };
    expect(after.rules.map((r) => r.used)).toEqual([0, 0]);
    expect(await statuses(gate, 4, "/", { key: "customer-7" })).toEqual([200, 200, 200, 429]);
  });

  it("reads usage with a bounded read of the store, however many entries the window holds", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const gate = makeGate({ prefix, identity: { header: "x-api-key" }, rules: [{ name: "day", limit: 1_000_000, window: "1d" }] }, { adminToken: ADMIN });
    const { tag } = ((await (await admin(gate, "usage", { key: "heavy" })).json()) as { identity: { tag: string } }).identity;
    // a day's log of 50,000 requests, as the script writes it: each entry the running total before it
    const store = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });
    const [seconds] = (await store.time()) as [number, number];
    const start = (seconds - 3600) * 1_000_000;
    for (let i = 0; i < 50_000; i += 5000) {
      const members = Array.from({ length: 5000 }, (_, j) => ({ score: start + (i + j) * 1000, member: String(i + j) }));
      await store.zadd(`${prefix}:{${tag}}:default:day`, members[0]!, ...members.slice(1));
    }
    const real = globalThis.fetch;
    let read = 0;
    globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const res = await real(input as RequestInfo, init);
      read += (await res.clone().arrayBuffer()).byteLength;
      return res;
    }) as typeof fetch;
    let usage: { rules: { used: number; remaining: number; oldestEntryAt: string }[] };
    try {
      usage = (await (await admin(gate, "usage", { key: "heavy" })).json()) as typeof usage;
    } finally {
      globalThis.fetch = real;
    }
    expect(usage.rules[0]).toMatchObject({ used: 50_000, remaining: 950_000, oldestEntryAt: new Date(start / 1000).toISOString() });
    expect(read).toBeLessThan(16 * 1024);
  });

  it("a dynamic block takes effect on the next request, shows in usage, and ends on time", async () => {
    const clock = testClock();
    const gate = makeGate(
      {
        clock: "edge",
        identity: { header: "x-api-key" },
        rules: [
          { name: "minute", limit: 3, window: "1m" },
          { name: "hour", limit: 10, window: "1h" },
        ],
      },
      { adminToken: ADMIN, now: clock.now },
    );
    expect(await statuses(gate, 1, "/", { ip: "203.0.113.66" })).toEqual([200]);
    expect(await (await admin(gate, "block", { ip: "203.0.113.66", seconds: 1 })).json()).toEqual({ blocked: true, seconds: 1 });
    const res = await gate(request("/", { ip: "203.0.113.66" }));
    expect(res.status).toBe(403);
    expect(res.headers.get("Retry-After")).toBe("1");
    expect(await res.json()).toMatchObject({ type: "urn:slidegate:blocked" });
    const usage = (await (await admin(gate, "usage", { ip: "203.0.113.66" })).json()) as { blockedForMs: number };
    expect(usage.blockedForMs).toBe(1000); // on the edge clock, which has not moved
    expect(await statuses(gate, 1, "/", { ip: "203.0.113.67" })).toEqual([200]); // others unaffected
    clock.advance(999);
    expect(await statuses(gate, 1, "/", { ip: "203.0.113.66" })).toEqual([403]);
    clock.advance(1);
    expect(await statuses(gate, 1, "/", { ip: "203.0.113.66" })).toEqual([200]);
  });

  it("unblock lifts a block at once", async () => {
    const gate = withAdmin();
    await admin(gate, "block", { key: "abuser", seconds: 600 });
    expect(await statuses(gate, 1, "/", { key: "abuser" })).toEqual([403]);
    expect(await (await admin(gate, "unblock", { key: "abuser" })).json()).toEqual({ unblocked: true });
    expect(await statuses(gate, 1, "/", { key: "abuser" })).toEqual([200]);
  });
});

describe("metrics", () => {
  it("writes a data point per decision, and refusals (denied, denylisted) as a counted summary per identity", async () => {
    const { points, dataset } = recordingDataset();
    let clock = Date.UTC(2026, 10, 29, 12);
    const gate = makeGate(
      { rules: [{ name: "m", limit: 2, window: "1m" }], deny: { ips: ["198.51.100.1"] }, allow: { ips: ["192.0.2.1"] } },
      { metrics: dataset, redisUrl: services.slowShimUrl, now: () => clock },
    );
    await statuses(gate, 4, "/", { ip: "203.0.113.80" });
    await statuses(gate, 1, "/", { ip: "198.51.100.1" });
    await statuses(gate, 1, "/", { ip: "192.0.2.1" });
    expect(outcomes(points)).toEqual(["admitted", "admitted", "allowlisted"]);
    expect(points[0]).toMatchObject({ blobs: ["admitted", "default", "m", "ip"], indexes: [expect.stringMatching(/^i[A-Za-z0-9_-]{22}$/)] });
    // Redis latency, ms: the slow shim holds every call slowShimMs, so that is a floor
    expect(points[0]!.doubles![0]).toBeGreaterThanOrEqual(services.slowShimMs);
    expect(points[0]!.doubles![2]).toBe(1); // one request
    expect(points[2]!.doubles![0]).toBe(0); // an allowlisted request never reaches Redis
    // a minute on, the next request brings the summaries: the two denials in one point, the denylisted request in another
    clock += 61_000;
    await statuses(gate, 1, "/", { ip: "192.0.2.1" });
    const denied = points.filter((p) => p.blobs![0] === "denied");
    expect(denied).toEqual([expect.objectContaining({ blobs: ["denied", "default", "m", "ip"], doubles: [0, 0, 2], indexes: [points[0]!.indexes![0]] })]);
    const listed = points.filter((p) => p.blobs![0] === "denylisted");
    expect(listed).toEqual([expect.objectContaining({ blobs: ["denylisted", "default", "", "ip"], doubles: [0, 0, 1] })]);
  });

  it("records failures as failed-open and failed-closed", async () => {
    const { points, dataset } = recordingDataset();
    const broken = { redisUrl: "http://127.0.0.1:9", metrics: dataset };
    await statuses(makeGate({ fail: "open", timeout: 300, rules: [{ name: "m", limit: 2, window: "1m" }] }, broken), 1);
    await statuses(makeGate({ fail: "closed", timeout: 300, rules: [{ name: "m", limit: 2, window: "1m" }] }, broken), 1);
    expect(outcomes(points)).toEqual(["failed-open", "failed-closed"]);
  });

  it("records a store failure of shadow rules alone as failed-shadow (never failed-open), with no latency, and logs it as such a failure", async () => {
    const { points, dataset } = recordingDataset();
    const broken = { redisUrl: "http://127.0.0.1:9", metrics: dataset };
    const gate = makeGate({ fail: "closed", timeout: 300, rules: [{ name: "trial", limit: 2, window: "1m", shadow: true }] }, broken);
    const res = await gate(request());
    await res.body?.cancel();
    expect(res.status).toBe(200);
    expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
    expect(points).toEqual([expect.objectContaining({ blobs: ["failed-shadow", "default", "trial", "ip"], doubles: [0, 0, 1] })]);
    expect(gate.logs).toContainEqual({ level: "error", line: expect.objectContaining({ event: "slidegate.store_failure", fail: "shadow", rules: ["trial"] }) });
  });

  it("writes data points the runtime's own Analytics Engine binding accepts", async () => {
    const { env } = await import("cloudflare:workers");
    const real = (env as unknown as Env).SLIDEGATE_METRICS!;
    // through to the runtime's dataset, which refuses a malformed point by throwing; each call kept
    const written: AnalyticsEngineDataPoint[] = [];
    const dataset = {
      writeDataPoint: (p?: AnalyticsEngineDataPoint) => {
        real.writeDataPoint(p);
        written.push(p!);
      },
    } as AnalyticsEngineDataset;
    const clock = testClock();
    const gate = makeGate({ clock: "edge", rules: [{ name: "m", limit: 2, window: "1m" }] }, { metrics: dataset, now: clock.now });
    expect(await statuses(gate, 3)).toEqual([200, 200, 429]);
    clock.advance(61_000);
    expect(await statuses(gate, 1)).toEqual([200]); // brings the denial summary
    expect(outcomes(written)).toEqual(["admitted", "admitted", "admitted", "denied"]);
    expect(gate.logs.filter((l) => l.level === "error")).toEqual([]);
  });
});

describe("a flood of requests turned away before any rule", () => {
  it("5,000 requests without a key, with two keys, with invented keys or from a listed address write no line each and a data point per identity and reason, counting every one, invented keys as their address", async () => {
    const { points, dataset } = recordingDataset();
    const clock = testClock();
    const gate = makeGate(
      {
        clock: "edge",
        identity: { header: "x-api-key", required: true, unknownKeys: "reject" },
        tiers: { default: { rules: [{ name: "minute", limit: 100, window: "1m" }] } },
        defaultTier: "default",
        deny: { ips: ["198.51.100.7"] },
      },
      { metrics: dataset, now: clock.now },
    );
    const expected = { "key-required": 2000, "ambiguous-key": 1500, "unknown-key": 1000, denylisted: 500 };
    const send = async (headers: Record<string, string>, ip: string, status: number) => {
      const res = await gate(new Request("http://gate.test/", { headers: { "CF-Connecting-IP": ip, ...headers } }));
      await res.body?.cancel();
      expect(res.status).toBe(status);
      clock.advance(10);
    };
    for (let i = 0; i < expected["key-required"]; i++) await send({}, "203.0.113.1", 401);
    for (let i = 0; i < expected["ambiguous-key"]; i++) await send({ "x-api-key": "a, b" }, "203.0.113.2", 400);
    for (let i = 0; i < expected["unknown-key"]; i++) await send({ "x-api-key": `invented-${i}` }, "203.0.113.3", 401);
    for (let i = 0; i < expected.denylisted; i++) await send({ "x-api-key": "whoever" }, "198.51.100.7", 403);
    clock.advance(61_000);
    await send({}, "203.0.113.1", 401); // brings the last summary

    const summaries = gate.logs.filter((l) => l.line.event === "slidegate.refused_summary");
    expect(gate.logs.length).toBe(summaries.length); // no line per request
    // one summary per identity and reason per minute: an address each, over the flood's two minutes at most
    expect(summaries.length).toBeLessThanOrEqual(2 * 4 + 1);
    // 1,000 made-up keys name nobody: their refusals are their address's, which the operator can block
    const inventor = (await identify("i", ipIdentity("203.0.113.3", 64))).tag;
    const invented = summaries.filter((l) => l.line.reason === "unknown-key");
    expect(invented.map((l) => l.line.tag)).toEqual(invented.map(() => inventor));
    expect(invented.reduce((sum, l) => sum + Number(l.line.refused), 0)).toBe(expected["unknown-key"]);
    const counted = (reason: string) => points.filter((p) => p.blobs![0] === reason).reduce((sum, p) => sum + p.doubles![2]!, 0);
    expect(counted("key-required")).toBe(expected["key-required"] + 1);
    for (const reason of ["ambiguous-key", "unknown-key", "denylisted"] as const) expect(counted(reason), reason).toBe(expected[reason]);
    expect(points.length).toBe(summaries.length);
  });
});

/** 200 requests from `ip`, 10 ms apart, each with a key made up for it: their statuses. */
async function madeUpKeys(gate: ReturnType<typeof makeGate>, clock: ReturnType<typeof testClock>, ip: string): Promise<number[]> {
  const codes: number[] = [];
  for (let i = 0; i < 200; i++) {
    const res = await gate(request("/", { ip, key: `made-up-${i}` }));
    await res.body?.cancel();
    codes.push(res.status);
    clock.advance(10);
  }
  return codes;
}

describe("a flood of denied requests", () => {
  it("a flood of made-up keys from one address that its address rule denies is logged and counted as that address, not a line per key", async () => {
    const { points, dataset } = recordingDataset();
    const clock = testClock();
    const gate = makeGate(
      { clock: "edge", identity: { header: "x-api-key" }, rules: [{ name: "minute", limit: 100, window: "1m" }], addressRules: [{ name: "per-address", limit: 2, window: "1m" }] },
      { metrics: dataset, now: clock.now },
    );
    const ip = "203.0.113.97";
    const codes = await madeUpKeys(gate, clock, ip);
    expect(codes).toEqual([200, 200, ...Array(198).fill(429)]);
    clock.advance(61_000);
    await statuses(gate, 1, "/", { ip: "198.51.100.97" }); // another caller's request brings the summary
    const address = (await identify("i", ipIdentity(ip, 64))).tag;
    const lines = gate.logs.map((l) => l.line);
    expect(lines.filter((l) => l.event === "slidegate.denied")).toEqual([expect.objectContaining({ tag: address, rules: ["per-address"] })]);
    expect(lines.filter((l) => l.event === "slidegate.denied_summary")).toEqual([expect.objectContaining({ tag: address, denied: 198, rules: { "per-address": 198 } })]);
    expect(points.filter((p) => p.blobs![0] === "denied")).toEqual([
      expect.objectContaining({ blobs: ["denied", "default", "per-address", "ip"], indexes: [address], doubles: [0, 0, 198] }),
    ]);
  });

  it("a flood of made-up keys from one address that its shadow address rule would deny is logged and counted as that address, not a line per key", async () => {
    const { points, dataset } = recordingDataset();
    const clock = testClock();
    const gate = makeGate(
      {
        clock: "edge",
        identity: { header: "x-api-key" },
        rules: [{ name: "minute", limit: 100, window: "1m" }],
        addressRules: [{ name: "per-address", limit: 2, window: "1m", shadow: true }],
      },
      { metrics: dataset, now: clock.now },
    );
    const ip = "203.0.113.95";
    const codes = await madeUpKeys(gate, clock, ip);
    expect(new Set(codes)).toEqual(new Set([200]));
    clock.advance(61_000);
    await statuses(gate, 1, "/", { ip: "198.51.100.95" }); // another caller's request brings the summary
    const address = (await identify("i", ipIdentity(ip, 64))).tag;
    const lines = gate.logs.map((l) => l.line);
    expect(lines.filter((l) => l.event === "slidegate.shadow_denied")).toEqual([expect.objectContaining({ tag: address, rules: ["per-address"] })]);
    expect(lines.filter((l) => l.event === "slidegate.shadow_denied_summary")).toEqual([
      expect.objectContaining({ tag: address, shadowDenied: 198, rules: { "per-address": 198 } }),
    ]);
    const shadowPoints = points.filter((p) => p.blobs![0] === "shadow-denied");
    expect(shadowPoints).toHaveLength(198);
    expect(new Set(shadowPoints.map((p) => p.indexes![0]))).toEqual(new Set([address]));
  });

  it("keyed requests from an address the operator blocked are logged as that address's block, not a line per key", async () => {
    const clock = testClock();
    const admin = "admin-token-for-attribution-tests";
    const gate = makeGate(
      {
        clock: "edge",
        identity: { header: "x-api-key" },
        rules: [{ name: "minute", limit: 100, window: "1m" }],
        addressRules: [{ name: "per-address", limit: 100, window: "1m" }],
      },
      { now: clock.now, adminToken: admin },
    );
    const ip = "203.0.113.96";
    const block = await gate(
      new Request("https://gate.example/__slidegate/block", { method: "POST", body: JSON.stringify({ ip, seconds: 600 }), headers: { authorization: `Bearer ${admin}` } }),
    );
    expect(block.status).toBe(200);
    for (let i = 0; i < 50; i++) expect(await statuses(gate, 1, "/", { ip, key: `made-up-${i}` })).toEqual([403]);
    clock.advance(61_000);
    await statuses(gate, 1, "/", { ip: "198.51.100.96" });
    const address = (await identify("i", ipIdentity(ip, 64))).tag;
    const lines = gate.logs.map((l) => l.line);
    expect(lines.filter((l) => l.event === "slidegate.blocked")).toEqual([expect.objectContaining({ tag: address })]);
    expect(lines.filter((l) => l.event === "slidegate.blocked_summary")).toEqual([expect.objectContaining({ tag: address, blocked: 50 })]);
  });

  it("a burst of denials followed by silence still writes its summary, in the background of the burst's responses", async () => {
    const clock = testClock();
    // the gate's wait for another request, shortened: nothing here depends on how long it is
    const gate = makeGate({ clock: "edge", rules: [{ name: "minute", limit: 1, window: "1m" }] }, { now: clock.now, quietFlushMs: 1 });
    const background: Promise<unknown>[] = [];
    const ctx = { waitUntil: (promise: Promise<unknown>) => void background.push(promise) };
    expect(await statuses(gate, 1, "/", { ip: "203.0.113.98" })).toEqual([200]);
    for (let i = 0; i < 40; i++) {
      const res = await gate(request("/", { ip: "203.0.113.98" }), ctx);
      await res.body?.cancel();
      expect(res.status).toBe(429);
      clock.advance(10);
    }
    // no request comes after the burst, and the summary's interval never passes: the isolate goes idle
    while (background.length) await background.shift();
    const summaries = gate.logs.map((l) => l.line).filter((l) => l.event === "slidegate.denied_summary");
    expect(summaries.reduce((sum, l) => sum + Number(l.denied), 0)).toBe(40);
  });

  it("5,000 denials of one identity write a few log lines and data points per window, and the summaries count every one", async () => {
    const { points, dataset } = recordingDataset();
    const clock = testClock();
    const gate = makeGate({ clock: "edge", rules: [{ name: "minute", limit: 2, window: "1m" }] }, { metrics: dataset, now: clock.now });
    // 5,000 denials over three windows (25 ms apart): each window admits two, every other request is denied
    const counts = new Map<number, number>();
    let denied = 0;
    while (denied < 5000) {
      const res = await gate(request("/", { ip: "203.0.113.99" }));
      await res.body?.cancel();
      counts.set(res.status, (counts.get(res.status) ?? 0) + 1);
      if (res.status === 429) denied++;
      clock.advance(25);
    }
    // a minute on, one more request brings the last summary
    clock.advance(61_000);
    await statuses(gate, 1, "/", { ip: "203.0.113.99" });

    expect([...counts.keys()].sort()).toEqual([200, 429]);
    const windows = Math.ceil((5000 * 25 + 61_000) / 60_000); // the windows the flood spans
    const full = gate.logs.filter((l) => l.line.event === "slidegate.denied");
    const summaries = gate.logs.filter((l) => l.line.event === "slidegate.denied_summary");
    // one full line per identity, rule and window; one summary per identity and rule per minute
    expect(full.length).toBeGreaterThanOrEqual(1);
    expect(full.length).toBeLessThanOrEqual(windows);
    expect(summaries.length).toBeGreaterThanOrEqual(1);
    expect(summaries.length).toBeLessThanOrEqual(windows);
    expect(gate.logs.length).toBe(full.length + summaries.length); // nothing else was written
    // the summaries' counts are exact: every denial, once
    expect(summaries.reduce((sum, l) => sum + Number(l.line.denied), 0)).toBe(5000);
    // data points: one per admitted request, and per summary one point weighted by its count
    const deniedPoints = points.filter((p) => p.blobs![0] === "denied");
    expect(deniedPoints.length).toBe(summaries.length);
    expect(deniedPoints.reduce((sum, p) => sum + p.doubles![2]!, 0)).toBe(5000);
    expect(points.length - deniedPoints.length).toBe(counts.get(200)! + 1);
  });
});
