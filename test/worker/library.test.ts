import { Redis } from "@upstash/redis/cloudflare";
import { Hono } from "hono";
import { cors } from "hono/cors";
import { HTTPException } from "hono/http-exception";
import { methodOverride } from "hono/method-override";
import { describe, expect, it, vi } from "vitest";
import * as honoEntry from "../../src/adapters/hono.ts";
import { rateLimit } from "../../src/adapters/hono.ts";
import * as libraryEntry from "../../src/adapters/library.ts";
import { createRateLimiter, type RateLimits } from "../../src/adapters/library.ts";
import { identify } from "../../src/decision/identity.ts";
import { redisKeys } from "../../src/script/limiter.ts";
import { request, services, sha256Hex } from "./helpers.ts";

const store = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });
const prefix = () => `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;

/** The middleware on the test store, with a key prefix of its own. */
const onTestStore = (options: Omit<Parameters<typeof rateLimit>[0], "url" | "token" | "prefix">) =>
  rateLimit({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), ...options });

/** The error an app whose middleware is built with `options` meets on its first request (its onError answers 500), as text. */
async function storeError(options: Parameters<typeof rateLimit>[0], env?: unknown): Promise<{ status: number; message: string }> {
  const app = new Hono();
  let error: unknown;
  app.onError((e, c) => {
    error = e;
    return c.text("error", 500);
  });
  app.use(rateLimit(options));
  app.get("/", (c) => c.text("ok"));
  const { status } = await app.fetch(request("/"), env);
  return { status, message: String(error) };
}

describe("Hono middleware", () => {
  it("limits a Hono app 5 per 10 s: 200 ×5 then 429, with the rate-limit headers", async () => {
    type Bindings = { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
    const app = new Hono<{ Bindings: Bindings }>();
    app.use("/api/*", rateLimit({ prefix: prefix(), rules: [{ name: "default", limit: 5, window: "10s" }] }));
    app.get("/api/hello", (c) => c.json({ hello: "world" }));
    app.get("/health", (c) => c.text("ok"));
    const env = { UPSTASH_REDIS_REST_URL: services.shimUrl, UPSTASH_REDIS_REST_TOKEN: services.shimToken };

    const responses = [];
    for (let i = 0; i < 6; i++) responses.push(await app.fetch(request("/api/hello", { ip: "198.51.100.30" }), env));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429]);
    expect(await responses[0]!.json()).toEqual({ hello: "world" });
    expect(responses[0]!.headers.get("RateLimit")).toBe('"default";r=4;t=10');
    expect(responses[4]!.headers.get("X-RateLimit-Remaining")).toBe("0");
    expect(responses[5]!.headers.get("Retry-After")).toMatch(/^(9|10)$/);
    expect(responses[5]!.headers.get("Content-Type")).toBe("application/problem+json");
    // routes outside the middleware are untouched
    expect((await app.fetch(request("/health", { ip: "198.51.100.30" }), env)).status).toBe(200);
  });

  it("takes an identity and a cost of the app's choosing", async () => {
    const app = new Hono();
    app.use(onTestStore({ rules: [{ name: "tokens", limit: 10, window: "1m" }], identify: (c) => c.req.header("x-user"), cost: (c) => Number(c.req.query("tokens") ?? 1) }));
    app.post("/complete", (c) => c.text("done"));
    const call = (user: string, tokens: number) => app.fetch(request(`/complete?tokens=${tokens}`, { method: "POST", headers: { "x-user": user } }));
    expect((await call("ada", 6)).status).toBe(200);
    expect((await call("ada", 6)).status).toBe(429);
    expect((await call("ada", 4)).status).toBe(200);
    expect((await call("grace", 10)).status).toBe(200);
  });

  it("with an identity of the app's, still matches rules by path and method and applies the lists and address rules by client IP", async () => {
    const app = new Hono();
    app.use(
      onTestStore({
        rules: [
          { name: "login", limit: 2, window: "1m", path: "/login", methods: ["POST"] },
          { name: "api", limit: 100, window: "1m" },
        ],
        addressRules: [{ name: "per-address", limit: 6, window: "1m" }],
        deny: { ips: ["203.0.113.66"] },
        identify: (c) => c.req.header("x-user"),
      }),
    );
    app.get("/profile", (c) => c.text("me"));
    app.post("/login", (c) => c.text("in"));
    const call = (method: string, path: string, user: string, ip: string) => app.fetch(request(path, { method, ip, headers: { "x-user": user } }));
    // a GET is not counted against a rule on POST /login
    const gets = [];
    for (let i = 0; i < 3; i++) gets.push(await call("GET", "/profile", "ada", "198.51.100.40"));
    expect(gets.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(gets[0]!.headers.get("RateLimit-Policy")).toBe('"api";q=100;w=60, "per-address";q=6;w=60');
    expect([(await call("POST", "/login", "ada", "198.51.100.40")).status, (await call("POST", "/login", "ada", "198.51.100.40")).status]).toEqual([200, 200]);
    expect((await call("POST", "/login", "ada", "198.51.100.40")).status).toBe(429);
    // the deny list by IP holds whoever the app says the caller is
    expect((await call("GET", "/profile", "grace", "203.0.113.66")).status).toBe(403);
    // the address floor counts every identity from one address: 6 so far from .40 (5 admitted, the denied login too)
    expect((await call("GET", "/profile", "grace", "198.51.100.40")).status).toBe(429);
    expect((await call("GET", "/profile", "grace", "198.51.100.41")).status).toBe(200);
  });

  it("with an identity of the app's, still refuses an API key the deny list holds, sent once or twice, and lets an allowed one through", async () => {
    const app = new Hono();
    app.use(
      onTestStore({
        identity: { header: "x-api-key" },
        rules: [{ name: "api", limit: 100, window: "1m" }],
        deny: { keys: [await sha256Hex(new TextEncoder().encode("revoked-key"))] },
        allow: { keys: [await sha256Hex(new TextEncoder().encode("trusted-key"))] },
        identify: (c) => c.req.header("x-user"),
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const call = (key: string) => app.fetch(request("/", { ip: "198.51.100.120", headers: { "x-user": "ada", "x-api-key": key } }));
    // a session's user id does not let a revoked key through, and neither does sending it twice
    expect([(await call("revoked-key")).status, (await call("revoked-key, revoked-key")).status, (await call("some-key")).status]).toEqual([403, 400, 200]);
    expect((await call("trusted-key")).headers.get("RateLimit")).toBeNull();
  });

  it("counts by the address the app reads with clientIp, never by a CF-Connecting-IP the client wrote, for its bucket, lists and address rules", async () => {
    type Env = { remote?: unknown };
    const app = new Hono<{ Bindings: Env }>();
    let error: unknown;
    app.onError((e, c) => {
      if (e instanceof HTTPException) return e.getResponse();
      error = e;
      return c.text("error", 500);
    });
    app.use(
      onTestStore({
        rules: [{ name: "login", limit: 2, window: "1m" }],
        addressRules: [{ name: "per-address", limit: 3, window: "1m" }],
        deny: { ips: ["203.0.113.66"] },
        identity: { header: "x-api-key" },
        clientIp: (c) => c.env.remote as string | null | undefined,
      }),
    );
    app.post("/login", (c) => c.text("in"));
    // a client on Node writes a fresh CF-Connecting-IP each time: the socket's address counts
    const call = (remote: unknown, forged: string, key?: string) => app.fetch(request("/login", { method: "POST", ip: forged, key }), { remote });
    const codes = [];
    for (const forged of ["198.51.100.1", "198.51.100.2", "198.51.100.3"]) codes.push((await call("2001:db8:5:5::1", forged)).status);
    // and every spelling of one /64 is one caller
    codes.push((await call("2001:0DB8:5:5:0:0:0:abcd", "198.51.100.4")).status);
    expect(codes).toEqual([200, 200, 429, 429]);
    // the deny list reads the app's address, not the header
    expect((await call("203.0.113.66", "198.51.100.9")).status).toBe(403);
    expect((await call("198.51.100.9", "203.0.113.66")).status).toBe(200);
    // the address rule counts every key from one address: three keys, and a fourth is refused
    expect((await call("192.0.2.77", "x", "key-a")).status).toBe(200);
    expect((await call("192.0.2.77", "x", "key-b")).status).toBe(200);
    expect((await call("192.0.2.77", "x", "key-c")).status).toBe(200);
    expect((await call("192.0.2.77", "x", "key-d")).status).toBe(429);
    // no address known (a Unix socket): one shared bucket, whatever header the client wrote
    const unknown = [];
    for (const [remote, forged] of [
      [undefined, "198.51.100.20"],
      [null, "198.51.100.21"],
      ["not an address", "198.51.100.22"],
    ] as const)
      unknown.push((await call(remote, forged)).status);
    expect(unknown).toEqual([200, 200, 429]);
    // anything else is the app's mistake, for app.onError
    expect((await call(42, "198.51.100.30")).status).toBe(500);
    expect(String(error)).toMatch(/options\.clientIp must return a string, undefined or null, not number/);
    expect(() => rateLimit({ rules: [{ name: "a", limit: 1, window: "1m" }], clientIp: "10.0.0.1" as never })).toThrow(/options\.clientIp must be a function/);
  });

  it("refuses a missing options object with a TypeError that says what to pass, at construction and in limit()", async () => {
    expect(() => createRateLimiter(undefined as never)).toThrow(/^slidegate: createRateLimiter\(\) takes an options object \(\{ url, token, rules \}\), not undefined$/);
    expect(() => createRateLimiter(null as never)).toThrow(/takes an options object .*, not null$/);
    expect(() => rateLimit(undefined as never)).toThrow(/^slidegate: rateLimit\(\) takes an options object \(\{ url, token, rules \}\), not undefined$/);
    // the rules alone, passed as the options: said so, not as a store that is missing
    const rules = [{ name: "a", limit: 1, window: "1m" }];
    expect(() => createRateLimiter(rules as never)).toThrow(/^slidegate: createRateLimiter\(\) takes an options object \(\{ url, token, rules \}\), not Array$/);
    expect(() => rateLimit(rules as never)).toThrow(/^slidegate: rateLimit\(\) takes an options object \(\{ url, token, rules \}\), not Array$/);
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules: [{ name: "a", limit: 1, window: "1m" }] });
    await expect(l.limit(request("/"), null as never)).rejects.toThrow(
      /^slidegate: limit\(\)'s options must be an object \(\{ cost, identity, clientIp \}\) or left out, not null$/,
    );
  });

  it("takes clientIp beside a Request only, as a string or null, in the library", async () => {
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules: [{ name: "a", limit: 1, window: "1m" }] });
    await expect(l.limit(request("/"), { clientIp: 42 as unknown as string })).rejects.toThrow(/the clientIp option must be a string, null or undefined, not number/);
    await expect(l.limit("user-1", { clientIp: "192.0.2.1" } as never)).rejects.toThrow(/the clientIp option goes with a Request/);
    expect((await l.limit(request("/", { ip: "198.51.100.60" }), { clientIp: "192.0.2.61" })).success).toBe(true);
    // the same forged header, another address: a bucket of its own
    expect((await l.limit(request("/", { ip: "198.51.100.60" }), { clientIp: "192.0.2.62" })).success).toBe(true);
    expect((await l.limit(request("/", { ip: "198.51.100.61" }), { clientIp: "192.0.2.61" })).success).toBe(false);
  });

  it("refuses in its types what limit() refuses at run time: an identity or a clientIp beside an identity of your own", async () => {
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules: [{ name: "a", limit: 5, window: "1m" }] });
    // each line is a type error (npm run typecheck fails on a @ts-expect-error that has none), and throws
    // @ts-expect-error an identity of your own takes a cost alone
    await expect(l.limit("user-1", { clientIp: "192.0.2.1" })).rejects.toThrow(TypeError);
    // @ts-expect-error an identity of your own takes a cost alone
    await expect(l.limit("user-1", { identity: "user-2" })).rejects.toThrow(TypeError);
    const either = "user-1" as Request | string;
    // @ts-expect-error which of the two it is is known only at run time: a cost alone
    await expect(l.limit(either, { identity: "user-2" })).rejects.toThrow(TypeError);
    // what it takes still type-checks
    expect((await l.limit(either, { cost: 1 })).reason).toBe("admitted");
    expect((await l.limit(request("/"), { identity: "user-2", clientIp: null, cost: 1 })).reason).toBe("admitted");
  });

  it("refuses an option of limit() it does not know (clientIP for clientIp, a misspelt cost), naming it, and records nothing", async () => {
    const p = prefix();
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: p, rules: [{ name: "a", limit: 5, window: "1m" }] });
    // taken silently, the request would count by the CF-Connecting-IP any client writes, and by a cost of 1
    await expect(l.limit(request("/", { ip: "198.51.100.70" }), { clientIP: "192.0.2.70" } as never)).rejects.toThrow(
      /^slidegate: limit\(\)'s options: "clientIP": unknown option \(allowed: cost, identity, clientIp\); did you mean "clientIp"\?$/,
    );
    await expect(l.limit("user-1", { cst: 5 } as never)).rejects.toThrow(/"cst": unknown option/);
    expect(await store.keys(`${p}:*`)).toEqual([]);
  });

  it("refuses an identity option beside an identity of your own, which would leave one of the two uncounted", async () => {
    const p = prefix();
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: p, rules: [{ name: "a", limit: 5, window: "1m" }] });
    await expect(l.limit("user-1", { identity: "user-2" } as never)).rejects.toThrow(
      /^slidegate: the identity option goes with a Request: limit\("user-1"\) is counted as "user-1" already$/,
    );
    expect(await store.keys(`${p}:*`)).toEqual([]);
    // none at all is no other identity
    for (const identity of [undefined, null, " "]) expect((await l.limit("user-1", { identity } as never)).reason).toBe("admitted");
  });

  it("refuses an object that is no Request (a url alone, a URL) with the TypeError that says what to pass, not a crash inside", async () => {
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules: [{ name: "a", limit: 5, window: "1m" }] });
    for (const input of [{ url: "https://app.example/x" }, { url: "https://app.example/x", method: "GET" }, new URL("https://app.example/x")])
      await expect(l.limit(input as never)).rejects.toThrow(/^slidegate: limit\(\) takes a Request or an identity of your own \(a non-empty string\), not (Object|URL)$/);
  });

  it("takes no identity (undefined, null, blank) as the request's own key or IP, and refuses one that is not a string with a TypeError that says so", async () => {
    const app = new Hono();
    let error: unknown;
    app.onError((e, c) => {
      if (e instanceof HTTPException) return e.getResponse();
      error = e;
      return c.text("error", 500);
    });
    const answers: Record<string, unknown> = { anonymous: null, blank: " ", number: 42 };
    app.use(onTestStore({ rules: [{ name: "a", limit: 2, window: "1m" }], identify: (c) => answers[c.req.header("x-user") ?? ""] as string | null }));
    app.get("/", (c) => c.text("ok"));
    // null and blank: one client IP's bucket, whichever of the two it sends
    const codes = [];
    for (const user of ["anonymous", "blank", "anonymous"]) codes.push((await app.fetch(request("/", { ip: "198.51.100.50", headers: { "x-user": user } }))).status);
    expect(codes).toEqual([200, 200, 429]);
    error = undefined;
    expect((await app.fetch(request("/", { headers: { "x-user": "number" } }))).status).toBe(500);
    expect(error).toBeInstanceOf(TypeError);
    expect(String(error)).toMatch(/slidegate: options\.identify must return a string, undefined or null, not number/);
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules: [{ name: "a", limit: 5, window: "1m" }] });
    await expect(l.limit("")).rejects.toThrow(/limit\(identity\) must be a non-empty string, not ""/);
    await expect(l.limit(42 as unknown as string)).rejects.toThrow(/limit\(\) takes a Request or an identity of your own \(a non-empty string\), not number/);
  });

  it("counts an identity of the app's apart from an API key of the same text: a made-up key that spells a user id spends nothing of the user's", async () => {
    const app = new Hono();
    app.use(
      onTestStore({
        identity: { header: "x-api-key" },
        rules: [{ name: "api", limit: 3, window: "1m" }],
        addressRules: [{ name: "floor", limit: 1000, window: "1m" }],
        identify: (c) => c.req.header("x-session-user"),
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const attacker = [];
    for (let i = 0; i < 4; i++) attacker.push((await app.fetch(request("/", { ip: "203.0.113.90", headers: { "x-api-key": "user-42" } }))).status);
    expect(attacker).toEqual([200, 200, 200, 429]);
    const victim = await app.fetch(request("/", { ip: "198.51.100.91", headers: { "x-session-user": "user-42" } }));
    expect(victim.status).toBe(200);
    expect(victim.headers.get("RateLimit")).toContain('"api";r=2;');
  });

  it("sets its headers on a route that returns fetch() of a real origin", async () => {
    const app = new Hono();
    app.use(onTestStore({ rules: [{ name: "default", limit: 2, window: "1m" }] }));
    // a fetch() response's headers are immutable: writing to them after next() would throw
    app.get("/proxy/*", () => fetch(`${services.originUrl}/v1/echo`));
    const first = await app.fetch(request("/proxy/x", { ip: "198.51.100.31" }));
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({ path: "/v1/echo" });
    expect(first.headers.get("RateLimit")).toBe('"default";r=1;t=60');
    expect(first.headers.get("X-RateLimit-Remaining")).toBe("1");
  });

  it("puts its headers on every kind of response a route gives (a Response of its own, a stream, HEAD, a 404 under app.use('*'), a thrown error app.onError answers), and a refused request never runs the handler", async () => {
    const app = new Hono();
    app.onError((err, c) => (err instanceof HTTPException ? err.getResponse() : c.text("handled", 500)));
    app.use("*", onTestStore({ rules: [{ name: "default", limit: 6, window: "1m" }] }));
    let ran = 0;
    app.get("/own", () => {
      ran++;
      return new Response("own", { headers: { "x-own": "1" } });
    });
    app.get("/stream", () => {
      ran++;
      return new Response(
        new ReadableStream({
          start(controller) {
            controller.enqueue(new TextEncoder().encode("streamed"));
            controller.close();
          },
        }),
      );
    });
    app.get("/throws", () => {
      ran++;
      throw new Error("the handler failed");
    });
    const ip = "198.51.100.37";
    const answers = [];
    for (const [path, method] of [
      ["/own", "GET"],
      ["/stream", "GET"],
      ["/own", "HEAD"],
      ["/missing", "GET"],
      ["/throws", "GET"],
      ["/own", "GET"],
    ] as const) {
      const res = await app.fetch(request(path, { ip, method }));
      answers.push({ path, method, status: res.status, remaining: res.headers.get("X-RateLimit-Remaining"), own: res.headers.get("x-own"), body: await res.text() });
    }
    expect(answers).toEqual([
      { path: "/own", method: "GET", status: 200, remaining: "5", own: "1", body: "own" },
      { path: "/stream", method: "GET", status: 200, remaining: "4", own: null, body: "streamed" },
      { path: "/own", method: "HEAD", status: 200, remaining: "3", own: "1", body: "" },
      { path: "/missing", method: "GET", status: 404, remaining: "2", own: null, body: "404 Not Found" },
      { path: "/throws", method: "GET", status: 500, remaining: "1", own: null, body: "handled" },
      { path: "/own", method: "GET", status: 200, remaining: "0", own: "1", body: "own" },
    ]);
    expect(ran).toBe(5);
    for (const [path, method] of [
      ["/own", "GET"],
      ["/own", "HEAD"],
      ["/throws", "GET"],
      ["/missing", "GET"],
    ] as const) {
      const res = await app.fetch(request(path, { ip, method }));
      await res.body?.cancel();
      expect(res.status, `${method} ${path}`).toBe(429);
      expect(res.headers.get("Retry-After"), `${method} ${path}`).toMatch(/^(59|60)$/);
    }
    expect(ran).toBe(5);
  });

  it("throws an HTTPException carrying its 429, so app.onError can restyle it", async () => {
    const app = new Hono();
    app.use(onTestStore({ rules: [{ name: "default", limit: 1, window: "1m" }] }));
    app.get("/", (c) => c.text("ok"));
    app.onError((err, c) => {
      if (err instanceof HTTPException) {
        const original = err.getResponse();
        return c.json({ error: "slow down", was: original.status, retryAfter: original.headers.get("Retry-After") }, 429);
      }
      return c.text("unexpected", 500);
    });
    expect((await app.fetch(request("/", { ip: "198.51.100.32" }))).status).toBe(200);
    const denied = await app.fetch(request("/", { ip: "198.51.100.32" }));
    expect(denied.status).toBe(429);
    expect(await denied.json()).toEqual({ error: "slow down", was: 429, retryAfter: expect.stringMatching(/^(59|60)$/) });
  });

  it("keeps Retry-After and its rate-limit headers on a refusal app.onError answers with a response of its own (c.json(…, err.status)), alone as when stacked", async () => {
    const app = new Hono();
    // Hono's usual error handler: its own body for any HTTPException, with the exception's status
    app.onError((err, c) => (err instanceof HTTPException ? c.json({ error: err.message }, err.status) : c.text("unexpected", 500)));
    app.use(onTestStore({ rules: [{ name: "default", limit: 1, window: "1m" }] }));
    app.get("/", (c) => c.text("ok"));
    expect((await app.fetch(request("/", { ip: "198.51.100.35" }))).status).toBe(200);
    const denied = await app.fetch(request("/", { ip: "198.51.100.35" }));
    expect(denied.status).toBe(429);
    expect(await denied.json()).toEqual({ error: "rate-limited" });
    expect(denied.headers.get("Retry-After")).toMatch(/^(59|60)$/);
    expect(denied.headers.get("RateLimit")).toMatch(/^"default";r=0;t=(59|60)$/);
    expect(denied.headers.get("X-RateLimit-Remaining")).toBe("0");
  });

  it("stacked on one request (a global limit, a stricter one on a route), shows the tightest of both: never the global's remaining on the route's 429", async () => {
    const app = new Hono();
    app.use(onTestStore({ rules: [{ name: "global", limit: 100, window: "1m" }] }));
    app.use("/login", onTestStore({ rules: [{ name: "login", limit: 2, window: "1m" }] }));
    app.post("/login", (c) => c.text("in"));
    app.get("/", (c) => c.text("ok"));
    const call = (method: string, path: string) => app.fetch(request(path, { method, ip: "198.51.100.34" }));
    const answers = [await call("POST", "/login"), await call("POST", "/login"), await call("POST", "/login")];
    expect(answers.map((r) => r.status)).toEqual([200, 200, 429]);
    const [, last, denied] = answers;
    expect([last!.headers.get("X-RateLimit-Limit"), last!.headers.get("X-RateLimit-Remaining")]).toEqual(["2", "0"]);
    expect(last!.headers.get("RateLimit")).toBe('"global";r=98;t=60, "login";r=0;t=60');
    expect(last!.headers.get("RateLimit-Policy")).toBe('"global";q=100;w=60, "login";q=2;w=60');
    expect([denied!.headers.get("X-RateLimit-Limit"), denied!.headers.get("X-RateLimit-Remaining")]).toEqual(["2", "0"]);
    expect(denied!.headers.get("RateLimit")).toMatch(/^"global";r=97;t=60, "login";r=0;t=(59|60)$/);
    expect(denied!.headers.get("Retry-After")).toMatch(/^(59|60)$/);
    expect(denied!.headers.get("Content-Type")).toBe("application/problem+json");
    // a route the stricter one does not cover: the global's alone
    const other = await call("GET", "/");
    expect(other.headers.get("X-RateLimit-Remaining")).toBe("96");
    expect(other.headers.get("RateLimit")).toBe('"global";r=96;t=60');
  });

  it("stacked on one request, keeps the fail-open mark on a request a store failure let through: an outage under a global and a route limit is never an unmarked admission", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      // the shim refuses a wrong token: every decision of both middlewares a store failure, and fail "open" lets it through
      const failing = (rules: RateLimits["rules"]) => rateLimit({ url: services.shimUrl, token: `${services.shimToken}-but-wrong`, prefix: prefix(), rules });
      const app = new Hono();
      app.use(failing([{ name: "global", limit: 100, window: "1m" }]));
      app.use("/login", failing([{ name: "login", limit: 2, window: "1m" }]));
      app.post("/login", (c) => c.text("in"));
      const res = await app.fetch(request("/login", { method: "POST", ip: "198.51.100.36" }));
      expect(res.status).toBe(200);
      expect(res.headers.get("X-Slidegate-Fail-Open")).toBe("store-unavailable");
    } finally {
      logged.mockRestore();
    }
  });

  it("stacked on one request, reports the shadow rules of both: a route's shadow rule is not hidden by the global one's", async () => {
    const app = new Hono();
    app.use(
      onTestStore({
        rules: [
          { name: "global", limit: 100, window: "1m" },
          { name: "global-trial", limit: 1, window: "1m", shadow: true },
        ],
      }),
    );
    app.use(
      "/login",
      onTestStore({
        rules: [
          { name: "login", limit: 5, window: "1m" },
          { name: "login-trial", limit: 1, window: "1m", shadow: true },
        ],
      }),
    );
    app.post("/login", (c) => c.text("in"));
    const call = () => app.fetch(request("/login", { method: "POST", ip: "198.51.100.37" }));
    await call();
    // both shadow rules would refuse the second: each middleware's report reaches the response
    const second = await call();
    expect(second.status).toBe(200);
    const names = (header: string) => (second.headers.get(header) ?? "").split(/,\s*/).filter(Boolean);
    expect(names("X-Slidegate-Shadow-Denied").sort()).toEqual(["global-trial", "login-trial"]);
    expect(
      names("X-Slidegate-Shadow")
        .map((item) => item.split(";")[0])
        .sort(),
    ).toEqual(['"global-trial"', '"login-trial"']);
  });

  it("refuses to count one request twice in one log: stacked middlewares that name a rule alike on one prefix are an error naming the rule, apart ones are not", async () => {
    const store = { url: services.shimUrl, token: services.shimToken, prefix: prefix() };
    const errors: string[] = [];
    const app = new Hono();
    app.onError((err, c) => {
      errors.push(err.message);
      return c.text("unexpected", 500);
    });
    app.use(rateLimit({ ...store, rules: [{ name: "default", limit: 100, window: "1m" }] }));
    app.use("/login", rateLimit({ ...store, rules: [{ name: "default", limit: 5, window: "1m" }] }));
    // the same name on the same prefix, but counted per user where the global one counts per address: two logs
    app.use("/me", rateLimit({ ...store, rules: [{ name: "default", limit: 5, window: "1m" }], identify: () => "user-7" }));
    app.use("/orders", rateLimit({ ...store, rules: [{ name: "orders", limit: 5, window: "1m" }] }));
    for (const path of ["/login", "/me", "/orders"]) app.get(path, (c) => c.text("ok"));
    const status = async (path: string) => (await app.fetch(request(path, { ip: "198.51.100.140" }))).status;
    expect([await status("/me"), await status("/orders")]).toEqual([200, 200]);
    expect(errors).toEqual([]);
    expect(await status("/login")).toBe(500);
    expect(errors).toEqual([
      expect.stringMatching(
        /two rateLimit middlewares on this request count in one log, rule "default" on prefix "t[0-9a-f]+": .*different names, or each middleware a prefix of its own/,
      ),
    ]);
  });

  it("refuses one middleware registered twice on a request's way (on an app and on a sub-app mounted in it) before it counts the request a second time, saying to register it once", async () => {
    const p = prefix();
    const limit = rateLimit({ url: services.shimUrl, token: services.shimToken, prefix: p, rules: [{ name: "default", limit: 5, window: "1m" }] });
    const errors: string[] = [];
    const inner = new Hono();
    inner.use(limit);
    inner.get("/x", (c) => c.text("ok"));
    const app = new Hono();
    app.onError((err, c) => {
      errors.push(err.message);
      return c.text("app error", 500);
    });
    app.use(limit);
    app.route("/in", inner);
    expect((await app.fetch(request("/in/x", { ip: "198.51.100.141" }))).status).toBe(500);
    expect(errors).toEqual([expect.stringMatching(/^slidegate: one rateLimit middleware runs twice on this request: .*register it once/)]);
    // counted once, by its first run
    const [log] = await store.keys(`${p}:*`);
    expect(await store.zcard(log!)).toBe(1);
  });

  it("answers 401 with WWW-Authenticate when an API key is required and missing", async () => {
    const app = new Hono();
    app.use(onTestStore({ identity: { header: "x-api-key", required: true }, rules: [{ name: "default", limit: 5, window: "1m" }] }));
    app.get("/", (c) => c.text("ok"));
    const res = await app.fetch(request("/"));
    expect(res.status).toBe(401);
    expect(res.headers.get("WWW-Authenticate")).toMatch(/^Bearer /);
    expect((await app.fetch(request("/", { key: "k1" }))).status).toBe(200);
  });

  it("keeps Retry-After, its rate-limit headers and a 401's WWW-Authenticate on a refusal app.onError answers with a Response it builds itself (new Response(…, { status: err.status }))", async () => {
    const app = new Hono();
    app.onError((err) => (err instanceof HTTPException ? new Response(`refused: ${err.message}`, { status: err.status }) : new Response("unexpected", { status: 500 })));
    app.use("/open", onTestStore({ rules: [{ name: "default", limit: 1, window: "1m" }] }));
    app.use("/keyed", onTestStore({ identity: { header: "x-api-key", required: true }, rules: [{ name: "default", limit: 5, window: "1m" }] }));
    app.get("/open", (c) => c.text("ok"));
    app.get("/keyed", (c) => c.text("ok"));
    expect((await app.fetch(request("/open", { ip: "198.51.100.36" }))).status).toBe(200);
    const denied = await app.fetch(request("/open", { ip: "198.51.100.36" }));
    expect(denied.status).toBe(429);
    expect(await denied.text()).toBe("refused: rate-limited");
    expect(denied.headers.get("Retry-After")).toMatch(/^(59|60)$/);
    expect(denied.headers.get("RateLimit")).toMatch(/^"default";r=0;t=(59|60)$/);
    expect(denied.headers.get("X-RateLimit-Remaining")).toBe("0");
    const unauthenticated = await app.fetch(request("/keyed"));
    expect(unauthenticated.status).toBe(401);
    expect(unauthenticated.headers.get("WWW-Authenticate")).toMatch(/^Bearer /);
  });

  it("keeps WWW-Authenticate on a 401 that app.onError answers with a response of its own (c.json(…, err.status))", async () => {
    const app = new Hono();
    app.onError((err, c) => (err instanceof HTTPException ? c.json({ error: err.message }, err.status) : c.text("unexpected", 500)));
    app.use(onTestStore({ identity: { header: "x-api-key", required: true }, rules: [{ name: "default", limit: 5, window: "1m" }] }));
    app.get("/", (c) => c.text("ok"));
    const res = await app.fetch(request("/"));
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({ error: "key-required" });
    // a 401 must say how to authenticate (RFC 9110 §15.5.2)
    expect(res.headers.get("WWW-Authenticate")).toMatch(/^Bearer /);
  });

  it("refuses a bad option when the middleware is built, naming it, not on the first request", () => {
    expect(() => rateLimit({ rules: [{ name: "default", limit: 0, window: "10s" }] })).toThrow("options.rules[0].limit: must be at least 1");
    expect(() => rateLimit({ rules: [{ name: "default", limit: 2000, window: 1 }] })).toThrow(
      "options.rules[0].limit: must be at most 1000 per millisecond of the window, 1000 in 1 ms, not 2000",
    );
    expect(() => rateLimit({ rules: [{ name: "default", limit: 5, window: "10 seconds" }] })).toThrow(/options\.rules\[0\]\.window/);
    expect(() => rateLimit({ rules: [{ name: "default", limit: 5, window: "10s" }], keyHeader: "x" } as never)).toThrow(/options: .*unknown field|options\.keyHeader/);
  });

  it("answers its 429 with CORS headers from Hono's cors middleware registered before it, exposing what the app lists", async () => {
    const app = new Hono();
    const exposeHeaders = ["Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"];
    app.use(cors({ origin: "https://app.example.com", exposeHeaders }));
    app.use(onTestStore({ rules: [{ name: "default", limit: 1, window: "1m" }] }));
    app.get("/", (c) => c.text("ok"));
    const call = () => app.fetch(request("/", { ip: "198.51.100.33", headers: { origin: "https://app.example.com" } }));
    const admitted = await call();
    const denied = await call();
    expect([admitted.status, denied.status]).toEqual([200, 429]);
    for (const res of [admitted, denied]) {
      expect(res.headers.get("Access-Control-Allow-Origin")).toBe("https://app.example.com");
      expect(res.headers.get("Access-Control-Expose-Headers")).toBe(exposeHeaders.join(","));
    }
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
  });

  it("names every option it takes when it refuses a misspelt one: the store's and the middleware's own, never the cors it refuses", () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    const allowed = (build: () => unknown) => {
      try {
        build();
      } catch (e) {
        return /\(allowed: ([^)]*)\)/.exec(String(e))?.[1]?.split(", ");
      }
    };
    const middleware = allowed(() => rateLimit({ rules, identfy: () => "u" } as never));
    expect(middleware).toEqual(expect.arrayContaining(["url", "token", "identify", "cost", "clientIp", "rules", "fail"]));
    for (const refused of ["cors", "clientIpHeader", "passForwardedHeaders", "originTimeout"]) expect(middleware).not.toContain(refused);
    const library = allowed(() => createRateLimiter({ url: services.shimUrl, token: services.shimToken, rules, failmode: "closed" } as never));
    expect(library).toEqual(expect.arrayContaining(["url", "token", "rules", "fail"]));
    for (const refused of ["cors", "clientIpHeader", "passForwardedHeaders", "originTimeout", "identify"]) expect(library).not.toContain(refused);
    // and the one meant, among the caller's own options too
    const said = (build: () => unknown) => {
      try {
        build();
      } catch (e) {
        return String(e);
      }
    };
    expect(said(() => rateLimit({ rules, identfy: () => "u" } as never))).toMatch(/options\.identfy: unknown field \(allowed: [^)]*\); did you mean "identify"\?$/);
    expect(said(() => createRateLimiter({ url: services.shimUrl, token: services.shimToken, rules, clok: "edge" } as never))).toMatch(
      /options\.clok: unknown field \(allowed: [^)]*\); did you mean "clock"\?$/,
    );
  });

  it("refuses the gateway's cors option, which an app's own CORS middleware stands for", () => {
    expect(() => onTestStore({ rules: [{ name: "default", limit: 5, window: "10s" }], cors: { origins: ["https://app.example.com"] } } as never)).toThrow(
      /options\.cors: is the gateway's alone: .*hono\/cors/,
    );
  });

  it("matches a rule's path against the whole URL path in a sub-app mounted with app.route, as the README says to write it", async () => {
    const auth = new Hono();
    auth.use(onTestStore({ rules: [{ name: "login", limit: 1, window: "1m", path: "/v1/auth/login" }] }));
    auth.post("/login", (c) => c.text("in"));
    const app = new Hono().route("/v1/auth", auth);
    const login = async () => (await app.fetch(request("/v1/auth/login", { method: "POST", ip: "198.51.100.130" }))).status;
    expect([await login(), await login()]).toEqual([200, 429]);
  });

  it("refuses a rule path written as a route pattern (/v1/users/:id), which would match no request the route serves, naming the field and the glob to write", async () => {
    const told = {
      "/v1/users/:id": /^slidegate: invalid options: options\.rules\[0\]\.path: ":id" is a route parameter.*\* for any text.*write "\/v1\/users\/\*"/,
      "/v1/users/:id{[0-9]+}/avatar": /write "\/v1\/users\/\*\/avatar"/,
      "/files/:name?": /write "\/files\/\*"/,
      // a Hono regex holding braces, an Express regex: a route parameter all the same
      "/v1/users/:id{[0-9]{4}}": /":id\{\[0-9\]\{4\}\}" is a route parameter.*write "\/v1\/users\/\*"/,
      "/v1/users/:id([0-9]+)/avatar": /write "\/v1\/users\/\*\/avatar"/,
    };
    for (const [path, message] of Object.entries(told)) {
      expect(() => onTestStore({ rules: [{ name: "r", limit: 1, window: "1m", path }] }), path).toThrow(message);
      expect(() => createRateLimiter({ url: services.shimUrl, token: "t", rules: [{ name: "r", limit: 1, window: "1m", path }] }), path).toThrow(message);
    }
    const keyed = { identity: { header: "x-api-key" }, defaultTier: "free", tiers: { free: { rules: [{ name: "r", limit: 1, window: "1m", path: "/a/:b" }] } } };
    expect(() => onTestStore(keyed)).toThrow(/options\.tiers\.free\.rules\[0\]\.path: ":b" is a route parameter/);
    expect(() => onTestStore({ rules: [{ name: "r", limit: 1, window: "1m" }], addressRules: [{ name: "a", limit: 1, window: "1m", path: "/a/:b/c" }] })).toThrow(
      /options\.addressRules\[0\]\.path: ":b" is a route parameter/,
    );
    // a colon inside a segment, and a segment that is no name after it, are text of a path
    for (const path of ["/v1/users/1:undelete", "/ip/::1", "/a/%3Aid"]) expect(() => onTestStore({ rules: [{ name: "r", limit: 1, window: "1m", path }] }), path).not.toThrow();
    // written as the glob, the rule counts the route's requests
    const app = new Hono();
    app.use(onTestStore({ rules: [{ name: "user", limit: 1, window: "1m", path: "/v1/users/*" }] }));
    app.get("/v1/users/:id", (c) => c.text(c.req.param("id")));
    const get = async (path: string) => (await app.fetch(request(path, { ip: "198.51.100.142" }))).status;
    expect([await get("/v1/users/1"), await get("/v1/users/2")]).toEqual([200, 429]);
  });

  it("counts a form's overridden method once behind Hono's methodOverride, registered before it as the README says; after it, twice (its body may name any method, then the app runs again as the one named)", async () => {
    const counted = async (overrideFirst: boolean) => {
      const app = new Hono();
      app.onError((err, c) => c.text(err.message, (err as HTTPException).status ?? 500));
      const limit = onTestStore({ rules: [{ name: "delete", limit: 3, window: "1m", methods: ["DELETE"], path: "/v1/users/*" }] });
      const override = methodOverride({ app });
      for (const middleware of overrideFirst ? [override, limit] : [limit, override]) app.use(middleware);
      app.delete("/v1/users/:id", (c) => c.text("deleted"));
      const out: number[] = [];
      for (let i = 0; i < 4; i++) {
        const form = new URLSearchParams({ _method: "DELETE" });
        out.push(
          (await app.fetch(request("/v1/users/1", { method: "POST", ip: "198.51.100.143", body: form, headers: { "content-type": "application/x-www-form-urlencoded" } }))).status,
        );
      }
      return out;
    };
    expect(await counted(true)).toEqual([200, 200, 200, 429]);
    expect(await counted(false)).toEqual([200, 429, 429, 429]);
  });

  it("refuses clientIpHeader and passForwardedHeaders, which only a gateway that forwards can honour, pointing a client address to clientIp", () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    // taken, clientIpHeader read as where the address comes from, and the count went on by CF-Connecting-IP
    expect(() => onTestStore({ rules, clientIpHeader: "x-forwarded-for" } as never)).toThrow(/options\.clientIpHeader: .*give clientIp/);
    expect(() => createRateLimiter({ url: services.shimUrl, token: services.shimToken, rules, clientIpHeader: "x-real-ip" } as never)).toThrow(
      /options\.clientIpHeader: .*give clientIp/,
    );
    expect(() => onTestStore({ rules, passForwardedHeaders: true } as never)).toThrow(/options\.passForwardedHeaders: is the gateway's alone/);
  });

  it("refuses originTimeout, which only a gateway that waits on an origin can honour, pointing to a time limit on the app's own calls", () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    // taken, it would bound nothing: the library forwards no request
    expect(() => onTestStore({ rules, originTimeout: "30s" } as never)).toThrow(/options\.originTimeout: is the gateway's alone: .*AbortSignal\.timeout/);
    expect(() => createRateLimiter({ url: services.shimUrl, token: services.shimToken, rules, originTimeout: 30_000 } as never)).toThrow(
      /options\.originTimeout: is the gateway's alone/,
    );
  });

  it("refuses an async identify, cost or clientIp when the middleware is built, naming it: each is called synchronously, and would fail every request", () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    for (const name of ["identify", "cost", "clientIp"]) {
      expect(() => rateLimit({ rules, [name]: async () => "x" })).toThrow(
        new RegExp(`^slidegate: options\\.${name} is an async function: it is called synchronously, and its Promise would fail every request`),
      );
    }
  });

  it("refuses a store given in code that no request could use when the middleware is built, not on each request", () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    expect(() => rateLimit({ url: "localhost:8079", rules })).toThrow(/options\.url: must be an http\(s\) URL/);
    expect(() => rateLimit({ url: 8079 as unknown as string, rules })).toThrow(/options\.url: must be an http\(s\) URL/);
    expect(() => rateLimit({ token: "", rules })).toThrow(/options\.token: must be a non-empty string/);
    expect(() => rateLimit({ url: services.shimUrl, token: {} as unknown as string, rules })).toThrow(/options\.token: must be a non-empty string/);
    // an empty variable (UPSTASH_REDIS_REST_URL= in a .env file) is said to be empty, not a URL kept back as a secret
    for (const url of ["", "  "])
      expect(() => rateLimit({ url, rules })).toThrow(/^slidegate: options\.url: must be an http\(s\) URL, like https:\/\/example\.upstash\.io, not an empty string$/);
    // what comes from the bindings is known only per request
    expect(() => rateLimit({ rules })).not.toThrow();
  });

  it("refuses a store URL with credentials in it, given in code or read from the bindings, and never repeats them", async () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    // fetch() refuses a URL with credentials: every decision would be a store failure, and fail open
    expect(() => rateLimit({ url: services.shimUrl.replace("://", "://default:pw-in-url@"), rules })).toThrow(/options\.url: /);
    // the Redis URL in place of the REST one (its password in it): refused, and the password not repeated
    let thrown: unknown;
    try {
      rateLimit({ url: "rediss://default:AYb3redis-password@eu1-fine-cat.upstash.io:6379", rules });
    } catch (e) {
      thrown = e;
    }
    expect(String(thrown)).toMatch(/options\.url: must be an http\(s\) URL/);
    expect(String(thrown)).not.toContain("AYb3redis-password");
    // from the bindings: the app's error, for app.onError (and its log), without the password
    const app = new Hono<{ Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string } }>();
    let error: unknown;
    app.onError((e, c) => {
      error = e;
      return c.text("error", 500);
    });
    app.use(rateLimit({ prefix: prefix(), rules }));
    app.get("/", (c) => c.text("ok"));
    const env = { UPSTASH_REDIS_REST_URL: services.shimUrl.replace("://", "://default:pw-in-binding@"), UPSTASH_REDIS_REST_TOKEN: services.shimToken };
    expect((await app.fetch(request("/"), env)).status).toBe(500);
    expect(String(error)).toMatch(/the binding UPSTASH_REDIS_REST_URL: must hold no credentials/);
    expect(String(error)).not.toContain("pw-in-binding");
  });

  it("refuses a store binding that is no string (a Secrets Store binding, read with get()) on the first request, not String() of it, which would fail every decision", async () => {
    const app = new Hono<{ Bindings: Record<string, unknown> }>();
    let error: unknown;
    app.onError((e, c) => {
      error = e;
      return c.text("error", 500);
    });
    app.use(rateLimit({ prefix: prefix(), rules: [{ name: "default", limit: 5, window: "10s" }] }));
    app.get("/", (c) => c.text("ok"));
    const secret = { get: async () => services.shimToken };
    const res = await app.fetch(request("/"), { UPSTASH_REDIS_REST_URL: services.shimUrl, UPSTASH_REDIS_REST_TOKEN: secret });
    expect(res.status).toBe(500);
    expect(String(error)).toMatch(/^TypeError: slidegate: the binding UPSTASH_REDIS_REST_TOKEN: must be a string \(a variable or a secret\), not Object;/);
  });

  it("names the binding it read and found unset, and the option that stands for it, when a request finds no store: not options it was never given", async () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    // env as each runtime hands it: a Worker without the variables, @hono/node-server's ({ incoming, outgoing }), none (Bun, Deno, app.request)
    const cases = [
      { options: {}, env: {}, missing: ["URL", "TOKEN"] },
      { options: {}, env: { incoming: {}, outgoing: {} }, missing: ["URL", "TOKEN"] },
      { options: {}, env: undefined, missing: ["URL", "TOKEN"] },
      { options: { url: services.shimUrl }, env: {}, missing: ["TOKEN"] },
      { options: {}, env: { UPSTASH_REDIS_REST_URL: services.shimUrl }, missing: ["TOKEN"] },
      { options: { token: services.shimToken }, env: { UPSTASH_REDIS_REST_URL: "" }, missing: ["URL"] },
    ];
    for (const { options, env, missing } of cases) {
      const what = JSON.stringify({ options: Object.keys(options), env });
      const { status, message } = await storeError({ prefix: prefix(), rules, ...options }, env);
      expect(status, what).toBe(500);
      for (const name of ["URL", "TOKEN"]) {
        const option = `options.${name.toLowerCase()}`;
        if (missing.includes(name)) {
          expect(message, what).toContain(`the binding UPSTASH_REDIS_REST_${name} is unset`);
          expect(message, what).toContain(`${option} `);
        } else expect(message, what).not.toContain(`UPSTASH_REDIS_REST_${name}`);
      }
      expect(message, what).not.toMatch(/options\.url and options\.token are required/);
      expect(message, what).not.toContain(services.shimToken);
    }
  });

  it("says an option the app wrote but that holds undefined (process.env read before it was loaded) is undefined, not that it was not given", async () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    // as a Node app writes it, with the variable unset: url: process.env.UPSTASH_REDIS_REST_URL
    const cases = [
      { options: { url: undefined, token: services.shimToken }, missing: "url" },
      { options: { url: services.shimUrl, token: undefined }, missing: "token" },
    ];
    for (const { options, missing } of cases) {
      const { status, message } = await storeError({ prefix: prefix(), rules, ...options });
      expect(status).toBe(500);
      expect(message, missing).toContain(`options.${missing} is undefined`);
      expect(message, missing).not.toContain(`options.${missing} was not given`);
      expect(message, missing).not.toContain(services.shimToken);
    }
  });

  it("refuses a store token no request header can carry (a line break inside, a character past U+00FF), without repeating it", async () => {
    const rules = [{ name: "default", limit: 5, window: "10s" }];
    for (const token of [`${services.shimToken.slice(0, 8)}\n${services.shimToken.slice(8)}`, `${services.shimToken}\u20ac`, `${services.shimToken}\0`]) {
      let thrown: unknown;
      try {
        rateLimit({ url: services.shimUrl, token, rules });
      } catch (e) {
        thrown = e;
      }
      expect(String(thrown)).toMatch(/options\.token: /);
      expect(String(thrown)).not.toContain(services.shimToken.slice(8));
    }
    // white space around it is what the store's client trims, and the store takes
    const l = createRateLimiter({ url: services.shimUrl, token: `${services.shimToken}\n`, prefix: prefix(), rules });
    expect((await l.limit("u")).reason).toBe("admitted");
  });

  it("names its 400 for a cost out of range in the HTTPException's message, as every refusal names its reason, for Hono's usual error handler", async () => {
    const app = new Hono();
    app.onError((err, c) => (err instanceof HTTPException ? c.json({ error: err.message }, err.status) : c.text("unexpected", 500)));
    app.use(onTestStore({ rules: [{ name: "default", limit: 5, window: "1m" }], cost: (c) => Number(c.req.query("tokens")) }));
    app.get("/", (c) => c.text("ok"));
    const refused = await app.fetch(request("/?tokens=-1000000", { ip: "198.51.100.36" }));
    expect([refused.status, await refused.json()]).toEqual([400, { error: "invalid-cost" }]);
  });

  it("answers a cost callback that returns no number (a Promise, a string) with the app's error, not a 400 that blames the client, and records nothing", async () => {
    const p = prefix();
    const app = new Hono();
    const seen: unknown[] = [];
    app.onError((err, c) => {
      seen.push(err);
      return c.text("app error", 500);
    });
    const costs: Record<string, unknown> = { promise: Promise.resolve(1), string: "1", throws: undefined };
    app.use(
      rateLimit({
        url: services.shimUrl,
        token: services.shimToken,
        prefix: p,
        rules: [{ name: "default", limit: 5, window: "1m" }],
        cost: (c) => {
          const kind = c.req.query("kind")!;
          if (kind === "throws") throw new Error("the app's own bug");
          return costs[kind] as number;
        },
      }),
    );
    app.get("/", (c) => c.text("ok"));
    for (const kind of Object.keys(costs)) expect((await app.fetch(request(`/?kind=${kind}`))).status).toBe(500);
    expect(seen.map((e) => (e as Error).message)).toEqual([
      "slidegate: options.cost must return a number or undefined, not a Promise (it is called synchronously)",
      'slidegate: options.cost must return a number or undefined, not "1"',
      "the app's own bug",
    ]);
    expect(seen.slice(0, 2).every((e) => e instanceof TypeError && !(e instanceof HTTPException))).toBe(true);
    expect(await store.keys(`${p}:*`)).toEqual([]);
  });

  it("says what a cost callback returned that prints as a number but is none (a bigint, a Number object), as limit() says it", async () => {
    const app = new Hono();
    const seen: string[] = [];
    app.onError((err, c) => {
      seen.push(err.message);
      return c.text("app error", 500);
    });
    const costs: Record<string, unknown> = { bigint: 3n, boxed: Object(3), object: { tokens: 3 } };
    app.use(onTestStore({ rules: [{ name: "default", limit: 5, window: "1m" }], cost: (c) => costs[c.req.query("kind")!] as number }));
    app.get("/", (c) => c.text("ok"));
    for (const kind of Object.keys(costs)) expect((await app.fetch(request(`/?kind=${kind}`))).status).toBe(500);
    expect(seen).toEqual([
      "slidegate: options.cost must return a number or undefined, not a bigint",
      "slidegate: options.cost must return a number or undefined, not a Number",
      "slidegate: options.cost must return a number or undefined, not an Object",
    ]);
  });
});

describe("createRateLimiter", () => {
  const limiter = (rules: NonNullable<RateLimits["rules"]>, extra: Partial<RateLimits> = {}) =>
    createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: prefix(), rules, ...extra });

  it("decides for an identity of your own, by cost, with headers and Retry-After ready", async () => {
    const l = limiter([{ name: "credits", limit: 10, window: "1m" }]);
    const results = [];
    for (let i = 0; i < 4; i++) results.push(await l.limit("user-42", { cost: 3 }));
    expect(results.map((r) => r.reason)).toEqual(["admitted", "admitted", "admitted", "rate-limited"]);
    expect(results[2]!.headers.get("X-RateLimit-Remaining")).toBe("1");
    expect(results[3]!.success).toBe(false);
    expect(results[3]!.retryAfter).toBeGreaterThanOrEqual(59);
    expect(results[3]!.headers.get("Retry-After")).toBe(String(results[3]!.retryAfter));
    const denied = results[3]!.response();
    expect(denied.status).toBe(429);
    expect((await l.limit("user-43", { cost: 1 })).success).toBe(true);
  });

  it("gives a denial answered from the isolate's cache a decision as of now, as its headers are: its waits and resets less the time it was held", async () => {
    const l = limiter([{ name: "hourly", limit: 1, window: "1h" }]);
    expect((await l.limit("user-held")).success).toBe(true);
    const fresh = (await l.limit("user-held")).decision!;
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const held = await l.limit("user-held");
    expect(held.reason).toBe("rate-limited");
    // at least the 1.1 s slept, however slow the machine (the cached decision said what it did then)
    expect(held.decision!.retryAfterMs).toBeLessThanOrEqual(fresh.retryAfterMs - 1100);
    expect(held.decision!.limits[0]!.resetMs).toBeLessThanOrEqual(fresh.limits[0]!.resetMs - 1100);
    expect(Math.ceil(held.decision!.retryAfterMs / 1000)).toBe(held.retryAfter);
  });

  it("takes a Request: identity from the key header or IP, rules by path and method", async () => {
    const l = limiter([{ name: "writes", limit: 1, window: "1m", methods: ["POST"] }], { identity: { header: "x-api-key" } });
    expect((await l.limit(request("/x", { method: "GET" }))).reason).toBe("no-rule");
    expect((await l.limit(request("/x", { method: "POST", key: "k1" }))).success).toBe(true);
    expect((await l.limit(request("/x", { method: "POST", key: "k1" }))).success).toBe(false);
    expect((await l.limit(request("/x", { method: "POST", key: "k2" }))).success).toBe(true);
  });

  it("counts a query-routed Request (?rest_route=, a front script's ?q= and ?r=) against the rules of the path it routes to, as the gateway does", async () => {
    const l = limiter([
      { name: "users", limit: 1, window: "1m", path: "/v1/users" },
      { name: "wp-json", limit: 1, window: "1m", path: "/wp-json/*" },
    ]);
    const from = (path: string, ip: string) => l.limit(request(path, { ip }));
    for (const [i, spelling] of ["/?q=v1/users", "/index.php?r=v1/users", "/?%71=/v1/%75sers", "/?q=x&q=v1/users"].entries()) {
      const ip = `198.51.100.${60 + i}`;
      expect((await from("/v1/users", ip)).success).toBe(true);
      expect((await from(spelling, ip)).success, spelling).toBe(false);
    }
    expect((await from("/wp-json/wp/v2/users", "198.51.100.90")).success).toBe(true);
    expect((await from("/blog/?rest.route=/wp/v2/users", "198.51.100.90")).success).toBe(false);
    // a routed path the gate would refuse counts against every rule
    expect((await from("/?q=a%5Cb", "198.51.100.91")).success).toBe(true);
    expect((await from("/v1/users", "198.51.100.91")).success).toBe(false);
  });

  it("counts a Request whose URL carries a fragment against every rule of its method: a router that reads the path up to '?' alone (Hono before it stopped at '#') serves /v1/users/1#/avatar as /v1/users/:id/avatar", async () => {
    const l = limiter([
      { name: "avatar", limit: 1, window: "1m", path: "/v1/users/*/avatar", methods: ["POST"] },
      { name: "reads", limit: 1, window: "1m", path: "/v1/reads", methods: ["GET"] },
    ]);
    // as @hono/node-server hands a Hono app `POST /v1/users/1#/avatar`, fragment and all
    const post = (path: string, ip: string) => l.limit(new Request(`http://app.example${path}`, { method: "POST", headers: { "cf-connecting-ip": ip } }));
    expect((await post("/v1/users/1/avatar", "198.51.100.92")).success).toBe(true);
    for (const spelling of ["/v1/users/1#/avatar", "/v1/users/1#/x/../avatar", "/v1/users/#1/avatar", "/v1/users/1#"]) {
      expect((await post(spelling, "198.51.100.92")).reason, spelling).toBe("rate-limited");
    }
    // its own method's rules alone: a GET rule never counts a POST
    expect((await post("/v1/reads#/x", "198.51.100.93")).success).toBe(true);
    expect((await l.limit(request("/v1/reads", { ip: "198.51.100.93" }))).success).toBe(true);
    // a fragment after a query is no part of the path to any router
    expect((await post("/v1/users/1?x#/avatar", "198.51.100.94")).reason).toBe("no-rule");
  });

  it("puts an operator block's Retry-After in the headers it gives, as on its 403", async () => {
    const p = prefix();
    const l = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: p, rules: [{ name: "a", limit: 5, window: "1m" }] });
    const { tag } = await identify("u", "blocked-user");
    // as the admin API writes a block: when it ends, in µs on the store's clock
    const [seconds] = (await store.time()) as [number, number];
    await store.set(redisKeys.block(p, tag), String((seconds + 120) * 1_000_000), { ex: 120 });
    const result = await l.limit("blocked-user");
    expect([result.reason, result.response().status]).toEqual(["blocked", 403]);
    const wait = result.response().headers.get("Retry-After");
    expect(Number(wait)).toBeGreaterThan(100);
    expect([result.headers.get("Retry-After"), result.retryAfter]).toEqual([wait, Number(wait)]);
  });

  it("fails as configured when the store is unreachable", async () => {
    const rules = [{ name: "a", limit: 1, window: "1m" }];
    const open = await createRateLimiter({ url: "http://127.0.0.1:9", token: "t", rules, timeout: 300 }).limit("u");
    expect(open).toMatchObject({ success: true, reason: "failed-open" });
    const closed = await createRateLimiter({ url: "http://127.0.0.1:9", token: "t", rules, timeout: 300, fail: "closed" }).limit("u");
    expect(closed).toMatchObject({ success: false, reason: "failed-closed" });
    expect(closed.response().status).toBe(503);
  });

  it("adds no exit listener to workerd's process (nodejs_compat), where no exit ever comes: a limiter made per request is not kept alive by one", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const p = (globalThis as { process?: { listenerCount?: (event: string) => number } }).process;
    // the runtime's process must be an emitter, or this proves nothing
    expect(typeof p?.listenerCount).toBe("function");
    const before = p!.listenerCount!("exit");
    try {
      for (let i = 0; i < 12; i++) {
        const l = createRateLimiter({ url: "http://127.0.0.1:9", token: "t", rules: [{ name: "a", limit: 1, window: "1m" }], timeout: 300 });
        await Promise.all([l.limit("u"), l.limit("u")]);
      }
      expect(p!.listenerCount!("exit")).toBe(before);
    } finally {
      logged.mockRestore();
    }
  });

  it("says when the store fails, as the gateway does: a line for the first failure of each second, the rest counted, never the token", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      // the shim refuses a wrong token: every decision a store failure, and fail "open" lets each through
      const wrong = `${services.shimToken}-but-wrong`;
      const l = createRateLimiter({ url: services.shimUrl, token: wrong, prefix: prefix(), rules: [{ name: "a", limit: 1, window: "1m" }] });
      const results = await Promise.all(Array.from({ length: 20 }, () => l.limit("u")));
      expect(results.map((r) => r.reason)).toEqual(Array(20).fill("failed-open"));
      const lines = logged.mock.calls.map((c) => String(c[0]));
      expect(lines[0]).toMatch(/^\{"event":"slidegate\.store_failure".*"fail":"open"/);
      // the other 19 are counted, for a summary line once the second is over: not a line each
      expect(lines.length).toBeLessThanOrEqual(3);
      for (const line of lines) expect(line).not.toContain(wrong.slice(0, 8));
    } finally {
      logged.mockRestore();
    }
  });

  it("warns when it is built, not per request, that made-up API keys buy fresh quota when no address floor bounds them", () => {
    const warned = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const rules = [{ name: "a", limit: 5, window: "1m" }];
      createRateLimiter({ url: services.shimUrl, token: services.shimToken, identity: { header: "x-api-key" }, rules });
      rateLimit({ identity: { header: "x-api-key" }, rules });
      expect(warned.mock.calls.map((c) => String(c[0]))).toEqual([
        expect.stringMatching(/^slidegate: identity\.unknownKeys is "defaultTier" and no addressRules rule/),
        expect.stringMatching(/^slidegate: identity\.unknownKeys/),
      ]);
      warned.mockClear();
      createRateLimiter({ url: services.shimUrl, token: services.shimToken, identity: { header: "x-api-key" }, rules, addressRules: [{ name: "floor", limit: 50, window: "1m" }] });
      createRateLimiter({ url: services.shimUrl, token: services.shimToken, identity: { header: "x-api-key", unknownKeys: "reject" }, rules });
      createRateLimiter({ url: services.shimUrl, token: services.shimToken, rules });
      expect(warned).not.toHaveBeenCalled();
    } finally {
      warned.mockRestore();
    }
  });

  it("refuses a store URL that is no URL without repeating it: with the two secrets swapped, it is the token", () => {
    const swapped = () => createRateLimiter({ url: services.shimToken, token: services.shimUrl, rules: [{ name: "a", limit: 1, window: "1m" }] });
    expect(swapped).toThrow(/options\.url: must be an http\(s\) URL/);
    expect(swapped).not.toThrow(services.shimToken.slice(0, 8));
    // a URL of another scheme is shown, without its credentials, as a help to spot it
    expect(() => createRateLimiter({ url: "rediss://default:hunter2@eu1.upstash.io:6379", token: "t", rules: [{ name: "a", limit: 1, window: "1m" }] })).toThrow(
      /"rediss:\/\/…@eu1\.upstash\.io:6379"/,
    );
  });

  it("exports createRateLimiter and CostError alone from slidegate, and rateLimit alone from slidegate/hono: no helper that builds a limiter past the checks", () => {
    expect(Object.keys(libraryEntry).sort()).toEqual(["CostError", "createRateLimiter"]);
    expect(Object.keys(honoEntry)).toEqual(["rateLimit"]);
  });

  it("names the one store option missing, not both: a url given without a token is told of the token alone", () => {
    const rules = [{ name: "a", limit: 1, window: "1m" }];
    // as the README builds it from a binding that is unset: undefined
    expect(() => createRateLimiter({ url: services.shimUrl, token: undefined as unknown as string, rules })).toThrow(
      /^slidegate: options\.token is required \(the UPSTASH_REDIS_REST_TOKEN of your database\)$/,
    );
    expect(() => createRateLimiter({ url: undefined as unknown as string, token: "t", rules })).toThrow(
      /^slidegate: options\.url is required \(the UPSTASH_REDIS_REST_URL of your database\)$/,
    );
    expect(() => createRateLimiter({ rules } as never)).toThrow(/^slidegate: options\.url and options\.token are required/);
    // a misspelt one is the one missing
    expect(() => createRateLimiter({ uri: services.shimUrl, token: "t", rules } as never)).toThrow(
      /^slidegate: options\.url is required \(the UPSTASH_REDIS_REST_URL of your database\); "uri" is no option: did you mean "url"\?$/,
    );
    expect(() => createRateLimiter({ URL: services.shimUrl, tokn: "t", rules } as never)).toThrow(
      /^slidegate: options\.url and options\.token are required \(.*\); "URL" is no option: did you mean "url"\?; "tokn" is no option: did you mean "token"\?$/,
    );
  });

  it("refuses the middleware's per-request options (cost, identify, clientIp) when the limiter is built, saying they go with each limit() call", () => {
    const rules = [{ name: "a", limit: 1, window: "1m" }];
    const told = {
      cost: /^slidegate: invalid options: options\.cost: .*limiter\.limit\(request, \{ cost \}\)/,
      identify: /^slidegate: invalid options: options\.identify: .*limiter\.limit\(request, \{ identity \}\)/,
      clientIp: /^slidegate: invalid options: options\.clientIp: .*limiter\.limit\(request, \{ clientIp \}\)/,
    };
    for (const [option, message] of Object.entries(told)) {
      expect(() => createRateLimiter({ url: services.shimUrl, token: "t", rules, [option]: () => undefined } as never), option).toThrow(message);
    }
  });

  it("tells an identity option given as a function (the limiter's per-call identity, the middleware's identify) from the identity configuration it names, when built", () => {
    const rules = [{ name: "a", limit: 1, window: "1m" }];
    const userOf = () => "user-42";
    // "must be an object" alone would send the app to make its callback an object
    expect(() => rateLimit({ rules, identity: userOf } as never)).toThrow(
      /^slidegate: invalid options: options\.identity: is the identity configuration \(\{ header, unknownKeys, … \}\), not a function: count each request as an identity of your own with options\.identify: \(c\) => …$/,
    );
    expect(() => createRateLimiter({ url: services.shimUrl, token: "t", rules, identity: userOf } as never)).toThrow(
      /^slidegate: invalid options: options\.identity: is the identity configuration \(\{ header, unknownKeys, … \}\), not a function: an identity of your own goes with each call: limiter\.limit\(request, \{ identity \}\)$/,
    );
  });

  it("refuses bad options at once, naming the field", () => {
    // the gateway's answers' CORS: the application's own answers are its to open
    expect(() => createRateLimiter({ url: services.shimUrl, token: "t", rules: [{ name: "a", limit: 1, window: "1m" }], cors: { origins: ["*"] } } as never)).toThrow(
      /options\.cors: is the gateway's alone/,
    );
    expect(() => limiter([{ name: "a", limit: 0, window: "1m" }])).toThrow("options.rules[0].limit: must be at least 1");
    expect(() => limiter([{ name: "a", limit: 2000, window: "1ms" }])).toThrow(
      "options.rules[0].limit: must be at most 1000 per millisecond of the window, 1000 in 1 ms, not 2000",
    );
    expect(() => createRateLimiter({ url: "", token: "", rules: [] })).toThrow(/options.url and options.token are required/);
    expect(() => createRateLimiter({ url: "localhost:8079", token: "t", rules: [{ name: "a", limit: 1, window: "1m" }] })).toThrow(/options\.url: must be an http\(s\) URL/);
    expect(() => createRateLimiter({ url: services.shimUrl, token: 42 as unknown as string, rules: [{ name: "a", limit: 1, window: "1m" }] })).toThrow(
      /options\.token: must be a non-empty string/,
    );
  });
});
