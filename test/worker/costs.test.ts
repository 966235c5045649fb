import { Redis } from "@upstash/redis/cloudflare";
import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { rateLimit } from "../../src/adapters/hono.ts";
import { CostError, createRateLimiter } from "../../src/adapters/library.ts";
import { createLimiter } from "../../src/script/limiter.ts";
import { request, services } from "./helpers.ts";

const prefix = () => `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
const store = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });
/** Every key slidegate wrote under `p`: nothing, when a bad cost was refused in time. */
const written = (p: string) => store.keys(`${p}:*`);

// 0, negative, fractional, not a number, infinite, one over the whole limit (5)
const BAD_COSTS = [0, -1, -1_000_000, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 6];

describe("cost outside 1..limit", () => {
  it("the limiter refuses it with a CostError before Redis is asked", async () => {
    const p = prefix();
    const check = createLimiter({ url: services.shimUrl, token: services.shimToken, prefix: p });
    for (const cost of BAD_COSTS) {
      await expect(check("itag", "t", [{ name: "m", limit: 5, windowMs: 60_000, cost }], 1000)).rejects.toThrow(CostError);
    }
    expect(await written(p)).toEqual([]);
  });

  it("createRateLimiter().limit() throws a TypeError naming the cost, writes nothing and never fails open", async () => {
    const p = prefix();
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, prefix: p, rules: [{ name: "credits", limit: 5, window: "1m" }] });
    for (const cost of BAD_COSTS) {
      const attempt = limiter.limit("user-1", { cost });
      await expect(attempt).rejects.toThrow(TypeError);
      await expect(attempt).rejects.toThrow(/cost must be a whole number/);
    }
    // not a number at all, as a JavaScript caller may pass it
    await expect(limiter.limit("user-1", { cost: "3" as unknown as number })).rejects.toThrow(CostError);
    // …and named as what it is: "not 3" would read as a valid cost refused
    await expect(limiter.limit("user-1", { cost: "3" as unknown as number })).rejects.toThrow(/, not "3"$/);
    await expect(limiter.limit("user-1", { cost: Promise.resolve(3) as unknown as number })).rejects.toThrow(/, not a Promise$/);
    await expect(limiter.limit("user-1", { cost: 3n as unknown as number })).rejects.toThrow(/, not a bigint$/);
    expect(await written(p)).toEqual([]);
    // the quota is whole: five units are still there
    expect(await limiter.limit("user-1", { cost: 5 })).toMatchObject({ success: true, reason: "admitted" });
    expect((await limiter.limit("user-1")).reason).toBe("rate-limited");
  });

  it("a bad cost is refused even where no rule applies to the request", async () => {
    const limiter = createRateLimiter({
      url: services.shimUrl,
      token: services.shimToken,
      prefix: prefix(),
      rules: [{ name: "writes", limit: 5, window: "1m", methods: ["POST"] }],
    });
    await expect(limiter.limit(request("/", { method: "GET" }), { cost: 0 })).rejects.toThrow(CostError);
  });

  it("the Hono middleware answers a request whose cost is out of range with 400, and records nothing", async () => {
    const p = prefix();
    const app = new Hono();
    app.use(
      rateLimit({
        url: services.shimUrl,
        token: services.shimToken,
        prefix: p,
        rules: [{ name: "tokens", limit: 5, window: "1m" }],
        cost: (c) => Number(c.req.query("tokens") ?? 1),
      }),
    );
    let handled = 0;
    app.post("/complete", (c) => {
      handled++;
      return c.text("done");
    });
    const call = (tokens: string) => app.fetch(request(`/complete?tokens=${tokens}`, { method: "POST", ip: "198.51.100.77" }));
    for (const tokens of ["0", "-1", "-1000000", "1.5", "NaN", "Infinity", "6", "abc"]) {
      const res = await call(tokens);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ type: "urn:slidegate:invalid-cost", status: 400 });
    }
    expect(handled).toBe(0);
    expect(await written(p)).toEqual([]);
    const full = await call("5");
    expect(full.status).toBe(200);
    expect(full.headers.get("X-RateLimit-Remaining")).toBe("0");
  });
});
