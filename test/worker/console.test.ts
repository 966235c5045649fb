import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import type { Gate } from "../../src/gateway/gateway.ts";
import { makeGate, request, services } from "./helpers.ts";

const TOKEN = "console-admin-token";
const auth = { authorization: `Bearer ${TOKEN}` };

/** Work a request leaves behind (ctx.waitUntil), to wait for before reading the figures. */
function background() {
  const promises: Promise<unknown>[] = [];
  return { waitUntil: (p: Promise<unknown>) => void promises.push(p), settled: () => Promise.all(promises) };
}

const admin = (gate: Gate, route: string, body: unknown = {}, headers: Record<string, string> = auth) =>
  gate(new Request(`https://gate.example/__slidegate/${route}`, { method: "POST", body: JSON.stringify(body), headers }));

async function send(gate: Gate, ctx: ReturnType<typeof background>, n: number, ip: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const res = await gate(request("/", { ip }), ctx);
    await res.body?.cancel();
    out.push(res.status);
  }
  return out;
}

const sha256Base64 = async (text: string) => btoa(String.fromCharCode(...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)))));

describe("the console page", () => {
  it("is served by the gate at GET /__slidegate/, with a policy that allows its own inline script and style and nothing else", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: TOKEN });
    const res = await gate(new Request("https://gate.example/__slidegate/"));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const html = await res.text();
    expect(html).toContain("<title>slidegate console</title>");
    expect(html).not.toContain(TOKEN);
    const csp = res.headers.get("content-security-policy")!;
    const script = /<script>([\s\S]*)<\/script>/.exec(html)![1]!;
    const style = /<style>([\s\S]*)<\/style>/.exec(html)![1]!;
    expect(csp).toContain(`script-src 'sha256-${await sha256Base64(script)}'`);
    expect(csp).toContain(`style-src 'sha256-${await sha256Base64(style)}'`);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("connect-src 'self'");
    // no external resource of any kind (the SVG namespace is a name, not a fetch), and no
    // favicon request: it would reach the origin, and count as a decision in the figures
    expect(html).not.toMatch(/\bsrc=|https?:\/\/(?!www\.w3\.org\/2000\/svg")/);
    expect(html.match(/<link\b[^>]*>/g)).toEqual(['<link rel="icon" href="data:,">']);
    expect(res.headers.get("x-frame-options")).toBe("DENY");
    expect(res.headers.get("cross-origin-opener-policy")).toBe("same-origin");
    const head = await gate(new Request("https://gate.example/__slidegate/", { method: "HEAD" }));
    expect(head.status).toBe(200);
  });

  it("sends every other spelling of its path to /__slidegate/, so a crafted link cannot point the page's calls (and the token) at another host", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: TOKEN });
    // "//evil.example/…" as a page's own path would make its relative calls protocol-relative
    for (const spelling of ["//evil.example/%252e%252e/__slidegate/", "/////__slidegate/", "/__SLIDEGATE/", "/x/..%252f__slidegate/"]) {
      for (const method of ["GET", "HEAD"]) {
        const res = await gate(new Request(`https://gate.example${spelling}`, { method }));
        expect([spelling, method, res.status, res.headers.get("location")]).toEqual([spelling, method, 308, "/__slidegate/"]);
        // the Location alone: never the page
        expect(await res.text()).toBe(method === "HEAD" ? "" : "/__slidegate/\n");
      }
    }
  });

  it("is never served over plain HTTP to another machine: it sends the browser to its https:// URL before a token can be typed in it", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: TOKEN });
    for (const url of ["http://gate.example/__slidegate/", "http://gate.example:8080/__slidegate/?x=1", "http://192.0.2.10/__slidegate/", "http://[2001:db8::1]/__slidegate/"]) {
      for (const method of ["GET", "HEAD"]) {
        const res = await gate(new Request(url, { method, headers: { "cf-connecting-ip": "203.0.113.7" } }));
        const text = await res.text();
        const secure = new URL(url);
        secure.protocol = "https:";
        secure.port = "";
        secure.search = "";
        expect([url, method, res.status, res.headers.get("location")]).toEqual([url, method, 308, secure.href]);
        expect(text).not.toContain("<form");
      }
    }
    // this machine (npm run dev, a tunnel's end): nothing crosses a network. wrangler dev gives a
    // route's host in the URL (http://api.example.com/…) and the browser's address as 127.0.0.1
    const served: [string, string][] = [
      ["http://127.0.0.1:8787/__slidegate/", "127.0.0.1"],
      ["http://localhost:8787/__slidegate/", "::1"],
      ["http://[::1]:8787/__slidegate/", "::1"],
      ["http://api.example.com/__slidegate/", "127.0.0.1"],
      ["http://api.example.com/__slidegate/", "::ffff:127.0.0.1"],
      ["https://gate.example/__slidegate/", "203.0.113.7"],
    ];
    for (const [url, client] of served) {
      const res = await gate(new Request(url, { headers: { "cf-connecting-ip": client } }));
      expect([url, client, res.status]).toEqual([url, client, 200]);
      expect(await res.text()).toContain("<title>slidegate console</title>");
    }
  });

  it("answers 404 like every admin path when the admin API is off", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] });
    const res = await gate(new Request("https://gate.example/__slidegate/"));
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
  });
});

describe("the console's admin routes", () => {
  it("figures and configuration take the admin token like every admin route", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: TOKEN });
    for (const route of ["figures", "configuration"]) {
      const res = await admin(gate, route, {}, { "cf-connecting-ip": "192.0.2.200" });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe('Bearer realm="slidegate-admin"');
    }
  });

  it("figures count every decision the gate answered, once its flushes have run after the responses", async () => {
    // the denial log's wait for a later request is background work too: shortened, as the figures' interval is
    const gate = makeGate({ rules: [{ name: "minute", limit: 4, window: "1m" }] }, { adminToken: TOKEN, figuresIntervalMs: 20, quietFlushMs: 20 });
    const ctx = background();
    expect(await send(gate, ctx, 6, "192.0.2.10")).toEqual([200, 200, 200, 200, 429, 429]);
    expect(await send(gate, ctx, 3, "192.0.2.11")).toEqual([200, 200, 200]);
    await ctx.settled();
    const figures = (await (await admin(gate, "figures", { minutes: 5 })).json()) as {
      totals: { decisions: Record<string, number>; all: number; lost: number; storeLatencyMs: { count: number } };
      minutes: unknown[];
      top: { identities: { tag: string; kind: string; refused: number }[] };
    };
    expect(figures.minutes).toHaveLength(5);
    expect(figures.totals.decisions.admitted).toBe(7);
    expect(figures.totals.decisions.denied).toBe(2);
    expect(figures.totals.all).toBe(9);
    expect(figures.totals.lost).toBe(0);
    // the second denial came from the isolate's cache: it waited on no store call
    expect(figures.totals.storeLatencyMs.count).toBe(8);
    expect(figures.top.identities).toEqual([expect.objectContaining({ kind: "ip", refused: 2 })]);

    // the console acts on an address known by its tag alone
    const { tag } = figures.top.identities[0]!;
    const usage = (await (await admin(gate, "usage", { tag })).json()) as { identity: { tag: string }; rules: { used: number }[] };
    expect(usage.identity.tag).toBe(tag);
    expect(usage.rules[0]!.used).toBe(4);
    expect((await admin(gate, "reset", { tag })).status).toBe(200);
    expect((await admin(gate, "block", { tag, seconds: 60 })).status).toBe(200);
    expect(await send(gate, ctx, 1, "192.0.2.10")).toEqual([403]);
    expect((await admin(gate, "unblock", { tag })).status).toBe(200);
    expect(await send(gate, ctx, 1, "192.0.2.10")).toEqual([200]);
    await ctx.settled();
  });

  it("figures name the top refused keys when one of their registry entries holds a value of another type: that key reads as unregistered, the rest as they are", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const tiers = { free: { rules: [{ name: "minute", limit: 1, window: "1m" }] }, paid: { rules: [{ name: "minute", limit: 1, window: "1m" }] } };
    const gate = makeGate({ prefix, identity: { header: "x-api-key" }, defaultTier: "free", tiers }, { adminToken: TOKEN, figuresIntervalMs: 20, quietFlushMs: 20 });
    const ctx = background();
    for (const key of ["typed-top-1", "typed-top-2"]) {
      expect((await admin(gate, "keys/set", { key, tier: "paid", label: key })).status).toBe(200);
      for (let i = 0; i < 3; i++) await (await gate(request("/", { key }), ctx)).body?.cancel();
    }
    await ctx.settled();
    // another application on the same prefix writes a string where the first key's entry was
    const tag = ((await (await admin(gate, "usage", { key: "typed-top-1" })).json()) as { identity: { tag: string } }).identity.tag;
    await new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false }).set(`${prefix}:{${tag}}:key`, "written by hand");
    const res = await admin(gate, "figures", { minutes: 5 });
    // one such key among the top refused would otherwise fail the console's figures whole (409)
    expect(res.status).toBe(200);
    const { identities } = ((await res.json()) as { top: { identities: { tag: string; refused: number; registered: boolean; label?: string }[] } }).top;
    expect(identities.map((i) => [i.tag === tag, i.refused, i.registered, i.label]).sort()).toEqual([
      [false, 2, true, "typed-top-2"],
      [true, 2, false, undefined],
    ]);
  });

  it("refuses a bad figures request or tag with a problem naming the field", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: TOKEN });
    for (const [route, body, field] of [
      ["figures", { minutes: 0 }, '"minutes"'],
      ["figures", { minutes: 1441 }, '"minutes"'],
      ["figures", { hours: 1 }, '"hours"'],
      ["usage", { tag: "kAAAAAAAAAAAAAAAAAAAAAA" }, '"tag"'],
      ["usage", { tag: "iAAAAAAAAAAAAAAAAAAAAAA", ip: "192.0.2.1" }, '"tag"'],
    ] as const) {
      const res = await admin(gate, route, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.headers.get("content-type")).toBe("application/problem+json");
      expect(((await res.json()) as { detail: string }).detail).toContain(field);
    }
  });

  it("configuration shows the effective configuration — tiers, rules, shadow rules, lists — and no secret", async () => {
    const hash = "cd".repeat(32);
    const gate = makeGate(
      {
        identity: { header: "x-api-key" },
        defaultTier: "free",
        tiers: {
          free: {
            rules: [
              { name: "minute", limit: 10, window: "1m", path: "/v1/*" },
              { name: "burst", limit: 3, window: "1s", shadow: true },
            ],
          },
          paid: { rules: [{ name: "minute", limit: 100, window: "1m", methods: ["POST"] }] },
        },
        keys: { [hash]: "paid" },
        allow: { ips: ["192.0.2.0/24"] },
        deny: { keys: ["ef".repeat(32)], ips: ["198.51.100.7"] },
      },
      { adminToken: TOKEN },
    );
    const res = await admin(gate, "configuration");
    expect(res.status).toBe(200);
    const text = await res.text();
    for (const secret of [TOKEN, services.shimToken, services.shimUrl, services.originUrl]) expect(text).not.toContain(secret);
    const config = JSON.parse(text);
    expect(config.defaultTier).toBe("free");
    expect(config.tiers.free[0]).toEqual({ name: "minute", limit: 10, windowMs: 60_000, cost: 1, path: "/v1/*", methods: null, fail: "open", timeoutMs: 1000, shadow: false });
    expect(config.tiers.paid[0].methods).toEqual(["POST"]);
    expect(config.shadowRules).toEqual(["free/burst"]);
    expect(config.keys).toEqual({ [hash]: "paid" });
    expect(config.allow).toEqual({ keys: [], ips: ["192.0.2.0/24"] });
    expect(config.deny).toEqual({ keys: ["ef".repeat(32)], ips: ["198.51.100.7"] });
    expect(config.identity).toEqual({ header: "x-api-key", required: false, unknownKeys: "defaultTier" });
    expect(config.cors).toBeNull();
    // no time limit on the origin unless one is set
    expect(config.originTimeoutMs).toBeNull();
  });

  it("configuration shows the origin's time limit in milliseconds", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 1, window: "1m" }], originTimeout: "30s" }, { adminToken: TOKEN });
    const config = (await (await admin(gate, "configuration")).json()) as { originTimeoutMs: unknown };
    expect(config.originTimeoutMs).toBe(30_000);
  });

  it("configuration shows the origins the gate's own answers are opened to, as the gate compares them", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 1, window: "1m" }], cors: { origins: ["https://App.Example.com"], credentials: true } }, { adminToken: TOKEN });
    const config = (await (await admin(gate, "configuration")).json()) as { cors: unknown };
    expect(config.cors).toEqual({ origins: ["https://app.example.com"], credentials: true });
  });
});
