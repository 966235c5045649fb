import fc from "fast-check";
import Redis from "ioredis";
import { Headers, type Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startGateIsolate } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";

// Hostile requests against the built Worker in workerd. The gate's own answers may only be
// 400 (a path or key header it refuses), 401, 429 or (failing closed) 503; everything else
// must be the origin's answer.
const PREFIX = `tfz${crypto.randomUUID().replace(/-/g, "").slice(0, 8)}`;
const RUNS = 250;

let optionalKey: Miniflare;
let requiredKey: Miniflare;
const secrets = new Set<string>();

beforeAll(async () => {
  const config = (required: boolean) =>
    JSON.stringify({
      prefix: PREFIX,
      fail: "closed",
      identity: { header: "x-api-key", required },
      rules: [
        { name: "tight", limit: 3, window: "1m" },
        { name: "post", limit: 2, window: "1m", methods: ["POST"], path: "/fuzz/*" },
      ],
    });
  [optionalKey, requiredKey] = await Promise.all([startGateIsolate({ RATE_LIMITS: config(false) }), startGateIsolate({ RATE_LIMITS: config(true) })]);
});
afterAll(async () => {
  await Promise.all([optionalKey?.dispose(), requiredKey?.dispose()]);
});

// Header values as a client can send them: visible ASCII and Latin-1, any length up to `max`
// (size "max": fast-check's default keeps arrays near ten elements, whatever maxLength says).
const headerValue = (max: number) =>
  fc
    .array(fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0xa0, max: 0xff })), { maxLength: max, size: "max" })
    .map((codes) => String.fromCharCode(...codes).trim());
// Odd methods too, among those workerd and the origin's HTTP parser accept (each refuses unknown ones itself, before any gate).
const method = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "PURGE", "PROPFIND", "MKCOL", "SEARCH", "REPORT");
const path = fc.oneof(
  fc.webPath().map((p) => `/fuzz${p.startsWith("/") ? p : `/${p}`}`),
  fc.string({ maxLength: 80, size: "max" }).map((s) => `/fuzz/${encodeURIComponent(s)}`),
  fc.constantFrom("/", "//", "/fuzz/..%2f..", "/fuzz/%00", "/fuzz/%E2%82%AC", `/fuzz/${"a".repeat(4000)}`),
);
const body = fc.oneof(fc.constant(undefined), fc.uint8Array({ maxLength: 4096, size: "max" }), fc.constant(new Uint8Array(1 << 20)));
const request = fc.record({
  required: fc.boolean(),
  method,
  path,
  body,
  key: fc.option(fc.oneof(headerValue(64), headerValue(2048), fc.constant("k".repeat(64 * 1024))), { nil: undefined }),
  duplicateKey: fc.option(headerValue(32), { nil: undefined }),
  ip: fc.oneof(fc.ipV4(), fc.ipV6(), headerValue(64)),
  extra: fc.array(fc.tuple(fc.constantFrom("x-forwarded-for", "x-real-ip", "x-odd", "accept", "cookie"), headerValue(8192)), { maxLength: 4 }),
});

describe("hostile requests (fast-check)", () => {
  it(`never get an unhandled error from the gate (${RUNS} cases)`, async () => {
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const headers = new Headers();
        headers.set("cf-connecting-ip", r.ip || "0.0.0.0");
        if (r.key !== undefined) headers.append("x-api-key", r.key);
        if (r.duplicateKey !== undefined) headers.append("x-api-key", r.duplicateKey);
        for (const [name, value] of r.extra) headers.append(name, value);
        for (const s of [r.key, r.duplicateKey, r.ip]) if (s && s.length >= 12) secrets.add(s);
        const hasBody = r.body !== undefined && r.method !== "GET" && r.method !== "HEAD";
        const res = await (r.required ? requiredKey : optionalKey).dispatchFetch(`http://gate.example${r.path}`, {
          method: r.method,
          headers,
          body: hasBody ? r.body : undefined,
        });
        await res.arrayBuffer();
        const fromOrigin = res.headers.get("x-origin") === "slidegate-demo";
        if (!fromOrigin) {
          expect(res.headers.get("content-type")).toBe("application/problem+json");
          expect([400, 401, 429, 503]).toContain(res.status);
        }
      }),
      { numRuns: RUNS },
    );
  }, 120_000);

  it("left only well-formed, bounded keys in Redis, with no raw key or IP in them", async () => {
    const redis = new Redis(services().redisUrl);
    try {
      const keys = await redis.keys(`${PREFIX}:*`);
      expect(keys.length).toBeGreaterThan(0);
      const members: string[] = [];
      for (const key of keys) {
        expect(key).toMatch(new RegExp(`^${PREFIX}:\\{[ki][A-Za-z0-9_-]{22}\\}:default:(tight|post)$`));
        expect(key.length).toBeLessThanOrEqual(PREFIX.length + 40);
        if ((await redis.type(key)) === "zset") members.push(...(await redis.zrange(key, "0", "-1")));
      }
      // a log member is the log's running total of cost before the entry, and its cost when above 1
      for (const m of members) expect(m).toMatch(/^\d{1,15}(:\d{1,7})?$/);
      const everything = keys.join("\n") + members.join("\n");
      for (const secret of secrets) expect(everything.includes(secret), "raw key material in Redis").toBe(false);
    } finally {
      redis.disconnect();
    }
  });
});
