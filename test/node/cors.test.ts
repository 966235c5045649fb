import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Miniflare } from "miniflare";
import { type Browser, chromium } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RawAnswer, rawRequest } from "../helpers/framework-origin.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// Browsers and CORS: the built Worker in workerd, the real shim and Redis, an origin that
// answers with CORS headers of its own, and Debian's Chromium as the browser on another site.

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const APP = "https://app.example.com";
const GATE_EXPOSED = "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset";
const RATE_LIMIT_NAMES = "X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, RateLimit-Policy, RateLimit";

/**
 * The API origin: `?acao=` and `?aceh=` are the Access-Control-Allow-Origin and
 * -Expose-Headers it answers with (`acao=origin`: the request's Origin echoed); a preflight
 * (OPTIONS with Access-Control-Request-Method) gets 204 allowing what it asks. `/page` is the
 * browser app's page: the origin's own site is the "other site" the gate is called from.
 */
function serve(req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url ?? "/", "http://origin.test");
  if (url.pathname === "/page") return res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>app</title>");
  const headers: Record<string, string> = { "content-type": "application/json", "x-request-id": "r-1" };
  const acao = url.searchParams.get("acao");
  if (acao) headers["access-control-allow-origin"] = acao === "origin" ? (req.headers.origin ?? "null") : acao;
  const aceh = url.searchParams.get("aceh");
  if (aceh !== null) headers["access-control-expose-headers"] = aceh;
  if (req.method === "OPTIONS" && req.headers["access-control-request-method"]) {
    headers["access-control-allow-methods"] = String(req.headers["access-control-request-method"]);
    headers["access-control-allow-headers"] = String(req.headers["access-control-request-headers"] ?? "");
    return res.writeHead(204, headers).end();
  }
  res.writeHead(200, headers).end(JSON.stringify({ handler: "things" }));
}

let originUrl: string;
const origin = createServer(serve);
const isolates: Miniflare[] = [];

beforeAll(async () => {
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await Promise.all(isolates.map((mf) => mf.dispose()));
  origin.closeAllConnections();
  await new Promise<void>((resolve) => origin.close(() => resolve()));
});

/** A built gate in front of the CORS origin: its base URL. */
async function gate(config: Record<string, unknown>, bindings: Record<string, string> = {}): Promise<string> {
  const mf = await startGateIsolate({ ORIGIN_URL: originUrl, RATE_LIMITS: rateLimits({ timeout: 10_000, ...config }), ...bindings });
  isolates.push(mf);
  return (await mf.ready).href;
}

let next = 0;
const freshIp = () => `100.66.${(++next >> 8) & 255}.${next & 255}`;

/** One request from `ip` with these header lines (an Origin among them, or several). */
const call = (base: string, target: string, ip: string, headers: [string, string][] = [], method = "GET") =>
  rawRequest(base, { method, target, headers: [["cf-connecting-ip", ip], ...headers] });

const CORS_HEADERS = ["access-control-allow-origin", "access-control-allow-credentials", "access-control-expose-headers", "vary"];
const corsOf = (res: RawAnswer) => Object.fromEntries(CORS_HEADERS.filter((h) => res.headers[h] !== undefined).map((h) => [h, res.headers[h]]));
/** An answer less what differs from one request to the next, to compare with another. */
const sameness = (res: RawAnswer) => {
  const { date: _d, ...headers } = res.headers;
  return { status: res.status, headers, body: res.body };
};

describe("an admitted request: the origin's answer", () => {
  let base: string;
  beforeAll(async () => {
    base = await gate({ rules: [{ name: "minute", limit: 100, window: "10m" }] });
  });

  it("exposes the gate's rate-limit headers after the origin's own, when the origin opened its answer to the site", async () => {
    const res = await call(base, `/v1/things?acao=origin&aceh=X-Request-Id`, freshIp(), [["origin", APP]]);
    expect(res.status).toBe(200);
    expect(res.headers["access-control-allow-origin"]).toBe(APP);
    expect(res.headers["access-control-expose-headers"]).toBe(`X-Request-Id, ${RATE_LIMIT_NAMES}`);
    expect(res.headers["x-ratelimit-remaining"]).toBe("99");
  });

  it("names none twice, in any case, and leaves the list alone when the origin exposes them all", async () => {
    const some = await call(base, `/v1/things?acao=origin&aceh=${encodeURIComponent("x-ratelimit-remaining,RATELIMIT")}`, freshIp(), [["origin", APP]]);
    expect(some.headers["access-control-expose-headers"]).toBe("x-ratelimit-remaining,RATELIMIT, X-RateLimit-Limit, X-RateLimit-Reset, RateLimit-Policy");
    const all = RATE_LIMIT_NAMES.toUpperCase();
    const every = await call(base, `/v1/things?acao=origin&aceh=${encodeURIComponent(all)}`, freshIp(), [["origin", APP]]);
    expect(every.headers["access-control-expose-headers"]).toBe(all);
  });

  it("appends the names beside the origin's wildcard, which browsers honour only without credentials", async () => {
    const res = await call(base, "/v1/things?acao=*&aceh=*", freshIp(), [["origin", APP]]);
    expect(res.headers["access-control-expose-headers"]).toBe(`*, ${RATE_LIMIT_NAMES}`);
  });

  it("changes nothing when the origin sends no CORS headers", async () => {
    const res = await call(base, "/v1/things?aceh=X-Request-Id", freshIp(), [["origin", APP]]);
    expect(corsOf(res)).toEqual({ "access-control-expose-headers": "X-Request-Id" });
    const bare = await call(base, "/v1/things", freshIp(), [["origin", APP]]);
    expect(corsOf(bare)).toEqual({});
  });
});

describe("the gate's own answers", () => {
  const deny = "192.0.2.66";
  const config = (cors?: Record<string, unknown>) => ({
    identity: { header: "x-api-key" },
    addressRules: [{ name: "address", limit: 1, window: "10m", path: "/v1/*" }],
    rules: [{ name: "minute", limit: 100, window: "10m" }],
    deny: { ips: [deny] },
    ...(cors ? { cors } : {}),
  });

  /** A 429 (address rule spent), a 403 (deny list) and a 400 (invalid path) for `origin`'s headers. */
  async function answers(base: string, headers: [string, string][]) {
    const ip = freshIp();
    await call(base, "/v1/things", ip);
    return {
      429: await call(base, "/v1/things", ip, headers),
      403: await call(base, "/v1/things", deny, headers),
      400: await call(base, "/v1/a%2Fb", freshIp(), headers),
    };
  }

  it("carry no CORS headers unless cors is configured, as before", async () => {
    const base = await gate(config());
    for (const [status, res] of Object.entries(await answers(base, [["origin", APP]]))) {
      expect(res.status).toBe(Number(status));
      expect(corsOf(res), status).toEqual({});
    }
  });

  it("open to an allowed Origin: that origin echoed, Vary: Origin, credentials when configured, Retry-After and the rate-limit headers exposed", async () => {
    const base = await gate(config({ origins: ["https://other.example", "https://APP.example.com"], credentials: true }));
    for (const [status, res] of Object.entries(await answers(base, [["origin", APP]]))) {
      expect(res.status).toBe(Number(status));
      expect(corsOf(res), status).toEqual({
        "access-control-allow-origin": APP,
        "access-control-allow-credentials": "true",
        "access-control-expose-headers": GATE_EXPOSED,
        vary: "Origin",
      });
    }
  });

  it('answer "*" to any Origin, null included, when configured "*", without credentials or Vary', async () => {
    const base = await gate(config({ origins: ["*"] }));
    for (const origin of ["https://anyone.example", "null"]) {
      const res = (await answers(base, [["origin", origin]]))[429];
      expect(res.status).toBe(429);
      expect(corsOf(res), origin).toEqual({ "access-control-allow-origin": "*", "access-control-expose-headers": GATE_EXPOSED });
    }
  });

  it("open the 401, the 503 of a store that fails closed, and the 502 of an origin out of reach too", async () => {
    const required = await gate({ ...config({ origins: [APP] }), identity: { header: "x-api-key", required: true } });
    expect(corsOf(await call(required, "/v1/things", freshIp(), [["origin", APP]]))).toMatchObject({ "access-control-allow-origin": APP });
    const closed = await gate({ ...config({ origins: [APP] }), fail: "closed", timeout: 2000 }, { UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9" });
    const failed = await call(closed, "/v1/things", freshIp(), [["origin", APP]]);
    expect(failed.status).toBe(503);
    expect(corsOf(failed)).toMatchObject({ "access-control-allow-origin": APP, "access-control-expose-headers": GATE_EXPOSED });
    const unreachable = await gate(config({ origins: [APP] }), { ORIGIN_URL: "http://127.0.0.1:9" });
    const bad = await call(unreachable, "/v1/things", freshIp(), [["origin", APP]]);
    expect(bad.status).toBe(502);
    expect(corsOf(bad)).toMatchObject({ "access-control-allow-origin": APP });
  });

  it("answer a request whose Origin is not allowed exactly as without cors: no origin is reflected by a trick", async () => {
    const base = await gate(config({ origins: [APP], credentials: true }));
    const ip = freshIp();
    await call(base, "/v1/things", ip);
    const plain = await call(base, "/v1/things", ip);
    expect(plain.status).toBe(429);
    const tricks: [string, string][][] = [
      [["origin", "https://app.example.com.evil.net"]],
      [["origin", "https://evilapp.example.com"]],
      [["origin", "https://APP.EXAMPLE.COM"]],
      [["origin", "https://app.example.com/"]],
      [["origin", "https://app.example.com/v1"]],
      [["origin", "https://user@app.example.com"]],
      [["origin", "http://app.example.com"]],
      [["origin", "https://app.example.com:443"]],
      [["origin", "null"]],
      [["origin", "*"]],
      [["origin", "https://app.example.com%0d%0aSet-Cookie: a=1"]],
      [["origin", `${APP}${"x".repeat(30_000)}`]],
      // a header sent twice arrives as one joined value
      [
        ["origin", APP],
        ["origin", "https://evil.example"],
      ],
      [
        ["origin", APP],
        ["origin", APP],
      ],
      [["origin", `${APP}, https://evil.example`]],
    ];
    for (const headers of tricks) {
      const res = await call(base, "/v1/things", ip, headers);
      expect(sameness(res), JSON.stringify(headers).slice(0, 80)).toEqual(sameness(plain));
    }
    // the admin API is no answer for browser code
    const admin = await call(base, "/__slidegate/usage", freshIp(), [["origin", APP]]);
    expect(corsOf(admin)).toEqual({});
  });

  it("keep a cached denial's headers its own: a 429 without an Origin after one with carries no CORS headers", async () => {
    const base = await gate(config({ origins: [APP] }));
    const ip = freshIp();
    await call(base, "/v1/things", ip);
    const opened = await call(base, "/v1/things", ip, [["origin", APP]]);
    expect(opened.headers["access-control-allow-origin"]).toBe(APP);
    // the same decision, from the denial cache: its headers are worked out once per second of its wait
    const after = await call(base, "/v1/things", ip);
    expect(after.status).toBe(429);
    expect(corsOf(after)).toEqual({});
  });
});

describe("preflights", () => {
  const preflight: [string, string][] = [
    ["origin", APP],
    ["access-control-request-method", "PUT"],
    ["access-control-request-headers", "x-api-key"],
  ];

  it("are counted by a rule that names no methods, so a flood of OPTIONS is limited; the denied one is the gate's 429", async () => {
    const base = await gate({ rules: [{ name: "minute", limit: 2, window: "10m" }], cors: { origins: [APP] } });
    const ip = freshIp();
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await call(base, "/v1/things?acao=origin", ip, preflight, "OPTIONS")).status);
    expect(statuses).toEqual([204, 204, 429]);
  });

  it("need the key under identity.required, cors or not: no keyless request reaches the origin, whose handlers may not check for OPTIONS", async () => {
    const identity = { header: "x-api-key", required: true };
    const base = await gate({ identity, rules: [{ name: "minute", limit: 5, window: "10m" }], cors: { origins: [APP] } });
    const res = await call(base, "/v1/things?acao=origin", freshIp(), preflight, "OPTIONS");
    expect(res.status).toBe(401);
    expect(res.headers["access-control-request-method"]).toBeUndefined();
    // the gate's own 401, opened to the configured site: not the origin's 204
    expect(res.headers["access-control-allow-origin"]).toBe(APP);
    expect(res.headers["access-control-allow-methods"]).toBeUndefined();
  });

  it("are not counted by rules that name their methods", async () => {
    const base = await gate({ rules: [{ name: "writes", limit: 1, window: "10m", methods: ["GET", "PUT", "POST", "PATCH", "DELETE"] }] });
    const ip = freshIp();
    for (let i = 0; i < 3; i++) expect((await call(base, "/v1/things?acao=origin", ip, preflight, "OPTIONS")).status).toBe(204);
    expect((await call(base, "/v1/things", ip, [], "PUT")).status).toBe(200);
    expect((await call(base, "/v1/things", ip, [], "PUT")).status).toBe(429);
  });
});

describe("in a browser on another site", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"] });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  it("reads the rate-limit headers of an admitted answer, then the 429 and its Retry-After; a denied preflight is a network error", async () => {
    const page = await browser.newPage();
    await page.goto(`${originUrl}/page`);
    // the page's site is the origin's own host and port; the gate is another
    const base = await gate({ rules: [{ name: "minute", limit: 2, window: "10m" }], cors: { origins: [originUrl] } });
    const seen = await page.evaluate(async (base) => {
      const read = async (init?: RequestInit) => {
        try {
          const res = await fetch(`${base}v1/things?acao=origin&aceh=X-Request-Id`, init);
          return {
            status: res.status,
            remaining: res.headers.get("X-RateLimit-Remaining"),
            retryAfter: res.headers.get("Retry-After"),
            requestId: res.headers.get("X-Request-Id"),
          };
        } catch (e) {
          return { error: String(e) };
        }
      };
      return [await read(), await read(), await read(), await read({ method: "PUT", headers: { "x-custom": "1" } })];
    }, base);
    expect(seen[0]).toEqual({ status: 200, remaining: "1", retryAfter: null, requestId: "r-1" });
    expect(seen[1]).toEqual({ status: 200, remaining: "0", retryAfter: null, requestId: "r-1" });
    expect(seen[2]).toMatchObject({ status: 429, remaining: "0", retryAfter: expect.stringMatching(/^\d+$/) });
    // the preflight of the PUT is denied too: a 429 is no answer a preflight may have
    expect(seen[3]).toEqual({ error: expect.stringMatching(/TypeError: Failed to fetch/) });
    await page.close();
  }, 60_000);
});
