import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { posix } from "node:path";
import fc from "fast-check";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawRequest, serverDecoded } from "../helpers/framework-origin.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// No way around a rule behind a stack that decodes the path twice: a proxy in front that
// decodes it once and sends it on so (Apache's mod_rewrite with [P] and no B flag), and an
// application server behind it that decodes it again and reads `\` as `/`, as IIS does. The
// gate matches the path decoded twice for such a stack; what that stack reads in it decides
// which handler runs, so the origin here is that stack, and the oracle.

/** The route the stack runs for a request target: decoded twice, `\` as `/`, dot segments resolved, case and a trailing slash ignored. */
const routed = (target: string) => {
  const path = posix.normalize(serverDecoded(serverDecoded(target.split("?")[0]!)).replaceAll("\\", "/"));
  return (path.length > 1 ? path.replace(/\/$/, "") : path).toLowerCase();
};

let origin: { url: string; hits: Map<string, number>; close(): Promise<void> };
let gate: Miniflare;
let base: string;

beforeAll(async () => {
  const hits = new Map<string, number>();
  const server = createServer((req, res) => {
    const route = routed(req.url ?? "/");
    hits.set(route, (hits.get(route) ?? 0) + 1);
    req.resume();
    res.writeHead(200, { "content-type": "application/json", "x-route": route });
    res.end(JSON.stringify({ target: req.url, route }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  origin = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  gate = await startGateIsolate({ ORIGIN_URL: origin.url, RATE_LIMITS: rateLimits({ timeout: 10_000, rules: [{ name: "users", limit: 1, window: "10m", path: "/v1/*" }] }) });
  base = (await gate.ready).href;
});

afterAll(async () => {
  await gate?.dispose();
  await origin?.close();
});

let next = 0;
const freshIpv4 = () => `100.${96 + ((++next >> 8) & 15)}.${next & 255}.7`;
const via = (target: string, ip: string) => rawRequest(base, { target, headers: [["cf-connecting-ip", ip]] });

describe("a path decoded twice: a backslash it decodes to is a slash to the stack behind", () => {
  const spellings = ["/v1%255Cusers", "/x/..%255C..%255Cv1/users", "/x/..%255c..%255cV1%255cUSERS", "/public%255C..%255Cv1/users", "/V1%255Cusers%255C"];

  it.each(spellings)("%s counts against the /v1/* rule once /v1/users spent it", async (spelling) => {
    // the stack runs the users handler for it, when sent to it directly
    expect((await rawRequest(origin.url, { target: spelling })).headers["x-route"]).toBe("/v1/users");
    const ip = freshIpv4();
    const before = origin.hits.get("/v1/users") ?? 0;
    expect((await via("/v1/users", ip)).status).toBe(200);
    const res = await via(spelling, ip);
    expect(res.status, `${spelling} reached ${res.body}`).toBe(429);
    expect((origin.hits.get("/v1/users") ?? 0) - before).toBe(1);
  });

  it("a path whose twice-decoded backslash leads elsewhere still reaches the origin, counted against no rule of /v1/*", async () => {
    const ip = freshIpv4();
    expect((await via("/v1/users", ip)).status).toBe(200);
    const res = await via("/v2%255Cusers", ip);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ target: "/v2%255Cusers", route: "/v2/users" });
  });

  // spellings of /v1/users built from what such a stack decodes twice: slashes and dot segments
  // spelt with backslashes, escaped once or twice, and letters escaped once or twice
  const slash = fc.constantFrom("/", "%252F", "%255C", "%255c", "/x/..%255C", "/x%255C..%255C", "%255Cx%255C%252e%252e%255C", "/x/%252e%252e%255C", "/./", "//");
  const word = (w: string) => fc.tuple(...[...w].map((c) => fc.constantFrom(c, c.toUpperCase(), `%25${c.charCodeAt(0).toString(16)}`))).map((cs) => cs.join(""));
  const spelling = fc.tuple(slash, word("v1"), slash, word("users"), fc.constantFrom("", "/", "%255C")).map((parts) => parts.join(""));

  it("no spelling the stack routes to /v1/users gets past the spent rule (fast-check)", async () => {
    await fc.assert(
      fc.asyncProperty(spelling, async (target) => {
        const ip = freshIpv4();
        expect((await via("/v1/users", ip)).status).toBe(200);
        const before = origin.hits.get("/v1/users") ?? 0;
        const res = await via(target, ip);
        expect((origin.hits.get("/v1/users") ?? 0) - before, `${target} reached the users handler (gate answered ${res.status})`).toBe(0);
      }),
      { numRuns: 150 },
    );
  }, 120_000);
});
