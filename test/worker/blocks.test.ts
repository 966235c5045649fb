import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import { makeGate, request, services } from "./helpers.ts";

const ADMIN = "admin-token-for-block-tests";

describe("operator blocks on the edge clock", () => {
  // The gate's clock seam: the script decides by this clock, so a block's end is exact.
  let clock = Date.UTC(2026, 10, 29, 12, 0, 0);
  const gate = makeGate({ clock: "edge", rules: [{ name: "minute", limit: 100, window: "1m" }] }, { adminToken: ADMIN, now: () => clock });
  const admin = (route: string, body: unknown) =>
    gate(new Request(`https://gate.example/__slidegate/${route}`, { method: "POST", body: JSON.stringify(body), headers: { authorization: `Bearer ${ADMIN}` } }));

  it("answers 403 up to and including the block's last millisecond, then admits", async () => {
    const ip = "203.0.113.91";
    const start = clock;
    expect((await admin("block", { ip, seconds: 2 })).status).toBe(200);

    clock = start + 1999; // the last millisecond
    const last = await gate(request("/", { ip }));
    expect(last.status).toBe(403);
    expect(last.headers.get("Retry-After")).toBe("1");
    expect(await last.json()).toMatchObject({ type: "urn:slidegate:blocked" });

    clock = start + 1999.5; // within it still
    expect((await gate(request("/", { ip }))).status).toBe(403);

    clock = start + 2000;
    const after = await gate(request("/", { ip }));
    expect(after.status).toBe(200);
    expect(after.headers.get("X-RateLimit-Remaining")).toBe("99");
  });

  it("usage and the gate read a value of another type at an identity's keys as the script does: a block by its TTL, a log as none", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const own = makeGate({ prefix, clock: "edge", rules: [{ name: "minute", limit: 100, window: "1m" }] }, { adminToken: ADMIN, now: () => clock });
    const usage = async (ip: string) => {
      const res = await own(new Request("https://gate.example/__slidegate/usage", { method: "POST", body: JSON.stringify({ ip }), headers: { authorization: `Bearer ${ADMIN}` } }));
      expect(res.status).toBe(200);
      return (await res.json()) as { blockedForMs: number | null; rules: { used: number }[] };
    };
    const redis = new Redis({ url: services.shimUrl, token: services.shimToken });
    const ip = "203.0.113.93";
    const keys = `${prefix}:{${(await identify("i", ipIdentity(ip, 64))).tag}}`;
    await redis.hset(`${keys}:default:minute`, { written: "by hand" });
    expect(await usage(ip)).toMatchObject({ blockedForMs: 0, rules: [{ used: 0 }] });
    await redis.hset(`${keys}:block`, { written: "by hand" });
    await redis.pexpire(`${keys}:block`, 30_000);
    const { blockedForMs } = await usage(ip);
    expect(blockedForMs).toBeGreaterThan(20_000);
    expect(blockedForMs).toBeLessThanOrEqual(30_000);
    expect((await own(request("/", { ip }))).status).toBe(403);
  });

  it("usage reports the block's time left on the same clock", async () => {
    const key = "203.0.113.92";
    const start = clock;
    await admin("block", { ip: key, seconds: 60 });
    const left = async () => ((await (await admin("usage", { ip: key })).json()) as { blockedForMs: number }).blockedForMs;
    expect(await left()).toBe(60_000);
    clock = start + 30_000;
    expect(await left()).toBe(30_000);
    clock = start + 59_999;
    expect(await left()).toBe(1);
  });
});
