import { createHash, randomBytes } from "node:crypto";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startShim } from "../../scripts/shim/server.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";

const logs: string[] = [];
let gate: Miniflare;
let brokenStore: Miniflare;
const RULES = { fail: "open", identity: { header: "x-api-key" }, rules: [{ name: "default", limit: 20, window: "1m" }] };

beforeAll(async () => {
  gate = await startGateIsolate({ RATE_LIMITS: rateLimits(RULES) }, (l) => logs.push(l));
  // a wrong token: every store call fails (401 from the shim), and the gate fails open and logs
  brokenStore = await startGateIsolate({ RATE_LIMITS: rateLimits(RULES), UPSTASH_REDIS_REST_TOKEN: `${services().shimToken}-stale` }, (l) => logs.push(l));
});
afterAll(async () => {
  await Promise.all([gate?.dispose(), brokenStore?.dispose()]);
});

const sha256 = (data: Uint8Array) => createHash("sha256").update(data).digest("hex");

describe("security", () => {
  it("the shim binds loopback unless told otherwise", async () => {
    const shim = await startShim({ token: "t", redisUrl: services().redisUrl, log: () => {} });
    expect(new URL(shim.url).hostname).toBe("127.0.0.1");
    await shim.close();
  });

  it("never puts the Upstash token in a response or a log line", async () => {
    const token = services().shimToken;
    const bodies: string[] = [];
    for (const mf of [gate, brokenStore]) {
      for (let i = 0; i < 25; i++) {
        const res = await mf.dispatchFetch("http://gate.example/v1/echo", { headers: { "cf-connecting-ip": "198.51.100.9", "x-api-key": "security-key" } });
        bodies.push(await res.text(), JSON.stringify([...res.headers]));
      }
    }
    expect(bodies.some((b) => b.includes("slidegate-demo") || b.includes('"method"'))).toBe(true);
    // workerd's output reaches this process a moment after the answers
    await vi.waitFor(() => expect(logs.some((l) => l.includes("slidegate.store_failure")) && logs.some((l) => l.includes("slidegate.denied"))).toBe(true), { timeout: 10_000 });
    for (const text of [...bodies, ...logs]) expect(text.includes(token)).toBe(false);
    for (const text of logs) expect(text.includes("security-key")).toBe(false);
  });

  it("passes a 10 MB upload and a 10 MB download byte for byte", async () => {
    const upload = randomBytes(10 * 1024 * 1024);
    const up = await gate.dispatchFetch("http://gate.example/upload", { method: "POST", body: upload, headers: { "cf-connecting-ip": "198.51.100.10" } });
    expect(up.status).toBe(200);
    expect(await up.json()).toEqual({ sha256: sha256(upload), bytes: upload.length });

    const down = await gate.dispatchFetch(`http://gate.example/bytes/${10 * 1024 * 1024}`, { headers: { "cf-connecting-ip": "198.51.100.10" } });
    const body = new Uint8Array(await down.arrayBuffer());
    expect(body.length).toBe(10 * 1024 * 1024);
    expect(sha256(body)).toBe(down.headers.get("x-origin-sha256"));
  }, 60_000);

  it("sends an admitted request to the origin exactly once, and a denied one never", async () => {
    const ids = Array.from({ length: 25 }, () => crypto.randomUUID());
    const statuses = [];
    for (const id of ids) {
      const res = await gate.dispatchFetch("http://gate.example/v1/echo", { method: "POST", body: "x", headers: { "cf-connecting-ip": "198.51.100.11", "x-request-id": id } });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(20);
    const hits = await Promise.all(ids.map(async (id) => ((await (await fetch(`${services().originUrl}/__origin/hits/${id}`)).json()) as { hits: number }).hits));
    expect(hits).toEqual(statuses.map((s) => (s === 200 ? 1 : 0)));
  });

  it("answers a denied 1 MB upload with its 429, not a connection reset", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      const res = await gate.dispatchFetch("http://gate.example/upload", { method: "POST", body: new Uint8Array(1 << 20), headers: { "cf-connecting-ip": "198.51.100.12" } });
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    expect(statuses).toEqual([...Array(20).fill(200), ...Array(5).fill(429)]);
  }, 60_000);
});
