import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { makeGate, request, services, statuses, testClock } from "./helpers.ts";

const store = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });

const perIp = (limit: number, window: string, extra: Record<string, unknown> = {}) => makeGate({ rules: [{ name: "default", limit, window }], ...extra });

describe("gate: the example configurations", () => {
  it("5 per 10 s: six requests answer 200, 200, 200, 200, 200, 429", async () => {
    const gate = perIp(5, "10s");
    expect(await statuses(gate, 6)).toEqual([200, 200, 200, 200, 200, 429]);
  });

  it("answers a denial with Retry-After, rate-limit headers and a problem+json body", async () => {
    const gate = perIp(2, "10s");
    const admitted = await gate(request());
    expect(admitted.headers.get("X-RateLimit-Limit")).toBe("2");
    expect(admitted.headers.get("X-RateLimit-Remaining")).toBe("1");
    expect(admitted.headers.get("X-RateLimit-Reset")).toBe("10");
    expect(admitted.headers.get("RateLimit-Policy")).toBe('"default";q=2;w=10');
    expect(admitted.headers.get("RateLimit")).toBe('"default";r=1;t=10');
    await gate(request());
    const denied = await gate(request());
    expect(denied.status).toBe(429);
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
    expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(9);
    expect(Number(denied.headers.get("Retry-After"))).toBeLessThanOrEqual(10);
    expect(denied.headers.get("X-RateLimit-Remaining")).toBe("0");
    expect(denied.headers.get("RateLimit")).toMatch(/^"default";r=0;t=(9|10)$/);
    expect(await denied.json()).toEqual({
      type: "urn:slidegate:rate-limited",
      title: "Too Many Requests",
      status: 429,
      detail: expect.stringContaining('"default"'),
    });
  });

  it("100 per 60 s by X-API-Key: 100 admitted, the 101st denied, a later denial waits less", async () => {
    const clock = testClock();
    const gate = makeGate({ clock: "edge", identity: { header: "x-api-key" }, rules: [{ name: "minute", limit: 100, window: "60s" }] }, { now: clock.now });
    const codes = await statuses(gate, 101, "/v1/completions", { key: "sk-live-123" });
    expect(codes.slice(0, 100).every((c) => c === 200)).toBe(true);
    const first = await gate(request("/v1/completions", { key: "sk-live-123" }));
    expect(codes[100]).toBe(429);
    expect(first.status).toBe(429);
    const firstWait = Number(first.headers.get("Retry-After"));
    expect(firstWait).toBeGreaterThan(0);
    expect(firstWait).toBeLessThanOrEqual(60);
    clock.advance(1100);
    const later = await gate(request("/v1/completions", { key: "sk-live-123" }));
    expect(later.status).toBe(429);
    expect(Number(later.headers.get("Retry-After"))).toBe(firstWait - 1);
  });

  it("selects free 10/min, paid 100/min and enterprise 1000/min by the key's SHA-256", async () => {
    const sha = async (key: string) => {
      const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key)));
      return [...d].map((b) => b.toString(16).padStart(2, "0")).join("");
    };
    const gate = makeGate({
      identity: { header: "x-api-key", required: true },
      defaultTier: "free",
      tiers: {
        free: { rules: [{ name: "minute", limit: 10, window: "60s" }] },
        paid: { rules: [{ name: "minute", limit: 100, window: "60s" }] },
        enterprise: { rules: [{ name: "minute", limit: 1000, window: "60s" }] },
      },
      keys: { [await sha("key-paid")]: "paid", [await sha("key-ent")]: "enterprise" },
    });
    const admittedOf = async (key: string, total: number) => {
      let admitted = 0;
      for (let sent = 0; sent < total; sent += 50) {
        const batch = await Promise.all(Array.from({ length: Math.min(50, total - sent) }, () => gate(request("/", { key }))));
        admitted += batch.filter((r) => r.status === 200).length;
        expect(batch.every((r) => r.status === 200 || r.status === 429)).toBe(true);
      }
      return admitted;
    };
    expect(await admittedOf("key-unlisted", 15)).toBe(10);
    expect(await admittedOf("key-paid", 120)).toBe(100);
    expect(await admittedOf("key-ent", 1010)).toBe(1000);
    expect((await gate(request("/", { key: "key-paid" }))).headers.get("X-RateLimit-Limit")).toBe("100");
  });
});

describe("gate: identity", () => {
  it("answers 401 problem+json when a required key is missing or blank", async () => {
    const gate = makeGate({ identity: { header: "x-api-key", required: true }, rules: [{ name: "m", limit: 5, window: "1m" }] });
    for (const headers of [{}, { "x-api-key": "   " }] as Record<string, string>[]) {
      const res = await gate(request("/", { headers }));
      expect(res.status).toBe(401);
      expect(res.headers.get("Content-Type")).toBe("application/problem+json");
      expect(await res.json()).toMatchObject({ status: 401, detail: expect.stringContaining("x-api-key") });
    }
  });

  it("falls back to the client IP when the key is optional and absent", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, rules: [{ name: "m", limit: 2, window: "1m" }] });
    expect(await statuses(gate, 3, "/", { ip: "198.51.100.1" })).toEqual([200, 200, 429]);
    expect(await statuses(gate, 1, "/", { ip: "198.51.100.2" })).toEqual([200]);
    expect(await statuses(gate, 1, "/", { ip: "198.51.100.1", key: "k1" })).toEqual([200]);
  });

  it("ignores a forged X-Forwarded-For or X-Real-IP", async () => {
    const gate = perIp(2, "1m");
    const forged = (i: number) => ({ ip: "192.0.2.9", headers: { "x-forwarded-for": `10.0.0.${i}`, "x-real-ip": `10.1.0.${i}` } });
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await gate(request("/", forged(i)))).status);
    expect(codes).toEqual([200, 200, 429, 429]);
  });

  it("keeps identities apart", async () => {
    const gate = perIp(3, "1m");
    expect(await statuses(gate, 4, "/", { ip: "192.0.2.1" })).toEqual([200, 200, 200, 429]);
    expect(await statuses(gate, 4, "/", { ip: "192.0.2.2" })).toEqual([200, 200, 200, 429]);
    expect(await statuses(gate, 1, "/", { ip: "2001:db8::1" })).toEqual([200]);
  });
});

/** Two rules that see the same requests: they share the minute's log. */
const SECOND_AND_MINUTE = [
  { name: "second", limit: 2, window: "1s" },
  { name: "minute", limit: 4, window: "60s" },
];

describe("gate: the window and its rules", () => {
  it("slides: once the oldest entry leaves the window, exactly one more request is admitted", async () => {
    const clock = testClock();
    const gate = makeGate({ clock: "edge", rules: [{ name: "default", limit: 3, window: "2s" }] }, { now: clock.now });
    expect(await statuses(gate, 1)).toEqual([200]);
    clock.advance(700);
    expect(await statuses(gate, 3)).toEqual([200, 200, 429]);
    const denied = await gate(request());
    // the first request (t=0) leaves at t=2000: 1.3 s from now, rounded up
    expect(denied.headers.get("Retry-After")).toBe("2");
    clock.advance(1299);
    expect(await statuses(gate, 1)).toEqual([429]);
    clock.advance(1); // t=2000: the others stay until t=2700
    expect(await statuses(gate, 2)).toEqual([200, 429]);
  });

  it("two rules: a request denied by one consumes nothing in the other", async () => {
    const clock = testClock();
    const gate = makeGate(
      {
        clock: "edge",
        rules: [
          { name: "second", limit: 3, window: "1s" },
          { name: "minute", limit: 10, window: "60s" },
        ],
      },
      { now: clock.now },
    );
    expect(await statuses(gate, 3)).toEqual([200, 200, 200]);
    const denied = await gate(request());
    expect(denied.status).toBe(429);
    expect(denied.headers.get("RateLimit")).toMatch(/"second";r=0;t=1, "minute";r=7;t=60/);
    expect(await statuses(gate, 3)).toEqual([429, 429, 429]);
    // the three were recorded 1 µs apart (one clock reading, arrivals strictly increase): all gone a second on
    clock.advance(1001);
    const next = await gate(request());
    expect(next.status).toBe(200);
    expect(next.headers.get("RateLimit")).toBe('"second";r=2;t=1, "minute";r=6;t=59');
  });

  it("counts rules that see the same requests in one log, each rule over its own window", async () => {
    const clock = testClock();
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const rules = [...SECOND_AND_MINUTE, { name: "posts", limit: 9, window: "60s", methods: ["POST"] }, { name: "trial", limit: 1, window: "60s", shadow: true }];
    const gate = makeGate({ prefix, clock: "edge", rules }, { now: clock.now });
    expect(await statuses(gate, 3)).toEqual([200, 200, 429]);
    clock.advance(1001); // the two were recorded 1 µs apart
    expect(await statuses(gate, 3)).toEqual([200, 200, 429]);
    const last = await gate(request());
    expect(last.headers.get("RateLimit")).toBe('"second";r=0;t=1, "minute";r=0;t=59');
    // one log for "second" and "minute", the shadow rule's own; none for the rule no request matched
    const keys = (await store.keys(`${prefix}:*`)).map((k) => k.slice(k.lastIndexOf(":") + 1)).sort();
    expect(keys).toEqual(["minute", "trial"]);
    expect(await store.zcard((await store.keys(`${prefix}:*:minute`))[0]!)).toBe(4);
  });

  it("keeps counting in the longest rule's log when rules come to share it, as on an upgrade from a log per rule", async () => {
    const clock = testClock();
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const before = makeGate({ prefix, clock: "edge", rules: [{ name: "minute", limit: 4, window: "60s" }] }, { now: clock.now });
    expect(await statuses(before, 3)).toEqual([200, 200, 200]);
    clock.advance(5000);
    const after = makeGate({ prefix, clock: "edge", rules: SECOND_AND_MINUTE }, { now: clock.now });
    const admitted = await after(request());
    expect(admitted.headers.get("RateLimit")).toBe('"second";r=1;t=1, "minute";r=0;t=55');
    expect(await statuses(after, 1)).toEqual([429]);
  });

  it("rules match by path and method; unmatched requests pass without limits", async () => {
    const gate = makeGate({ rules: [{ name: "writes", limit: 1, window: "1m", path: "/v1/*", methods: ["POST"] }] });
    expect(await statuses(gate, 2, "/v1/items", { method: "POST" })).toEqual([200, 429]);
    const read = await gate(request("/v1/items"));
    expect(read.status).toBe(200);
    expect(read.headers.has("X-RateLimit-Limit")).toBe(false);
    expect(await statuses(gate, 1, "/other", { method: "POST" })).toEqual([200]);
  });

  it("weighs a request by its cost", async () => {
    const gate = makeGate({ rules: [{ name: "tokens", limit: 10, window: "1m", cost: 3 }] });
    const codes = [];
    let last: Response | undefined;
    for (let i = 0; i < 4; i++) {
      last = await gate(request());
      codes.push(last.status);
    }
    expect(codes).toEqual([200, 200, 200, 429]);
    expect(last!.headers.get("X-RateLimit-Remaining")).toBe("1");
  });
});

describe("gate: Redis's clock decides", () => {
  const skew = 24 * 3600 * 1000;
  // Two isolates of one deployment (one key prefix) whose clocks are a day apart.
  const isolates = (clock: "redis" | "edge") => {
    const config = { prefix: `t${crypto.randomUUID().slice(0, 8)}`, clock, rules: [{ name: "m", limit: 5, window: "10s" }] };
    return [makeGate(config, { now: () => Date.now() - skew }), makeGate(config, { now: () => Date.now() + skew })] as const;
  };

  it("counts a Worker whose clock is a day off in the same window as the rest of the fleet", async () => {
    const [behind, ahead] = isolates("redis");
    expect(await statuses(behind, 3)).toEqual([200, 200, 200]);
    expect(await statuses(ahead, 3)).toEqual([200, 200, 429]);
    expect(await statuses(behind, 1)).toEqual([429]);
  });

  it("(the edge-clock fallback, by contrast, lets the skew through)", async () => {
    const [behind, ahead] = isolates("edge");
    expect(await statuses(behind, 3)).toEqual([200, 200, 200]);
    // the entries of the clock a day behind look a day old to this one, and are evicted
    expect(await statuses(ahead, 6)).toEqual([200, 200, 200, 200, 200, 429]);
  });
});
