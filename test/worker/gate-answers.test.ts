import { describe, expect, it } from "vitest";
import { isStoreFailure } from "../../src/admin/store-failure.ts";
import { makeGate, request, testClock } from "./helpers.ts";

// Each failure gets its own answer: a bug in the gate is a logged 500, never dressed up as the
// origin (502) or the store (503); and the admin API finds only its own routes.

const ADMIN = "answers-admin-token";
const admin = (gate: (r: Request) => Promise<Response>, route: string, body: unknown = { ip: "203.0.113.9" }, ip = "192.0.2.200") =>
  gate(
    new Request(`https://gate.example/__slidegate/${route}`, {
      method: "POST",
      body: JSON.stringify(body),
      headers: { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": ip },
    }),
  );

describe("a bug in the gate", () => {
  it("is a logged 500 internal-error, not a 502, and its message stays in the log", async () => {
    // a metrics binding that throws: the gate's own code fails after the origin is chosen
    const broken = {
      writeDataPoint: () => {
        throw new TypeError("dataset exploded at 10.0.0.7");
      },
    } as unknown as AnalyticsEngineDataset;
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { metrics: broken });
    const res = await gate(request("/v1/echo"));
    expect(res.status).toBe(500);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const text = await res.text();
    expect(JSON.parse(text)).toMatchObject({ type: "urn:slidegate:internal-error", status: 500 });
    expect(text).not.toContain("10.0.0.7");
    expect(gate.logs).toContainEqual({ level: "error", line: expect.objectContaining({ event: "slidegate.internal_error", error: "dataset exploded at 10.0.0.7" }) });
    expect(gate.logs.some((l) => l.line.event === "slidegate.upstream_error")).toBe(false);
  });

  it("a log sink that throws too still leaves a 500, never an unhandled exception", async () => {
    const broken = {
      writeDataPoint: () => {
        throw new TypeError("dataset exploded");
      },
    } as unknown as AnalyticsEngineDataset;
    const gate = makeGate(
      { rules: [{ name: "m", limit: 5, window: "1m" }] },
      {
        metrics: broken,
        log: () => {
          throw new Error("log sink down");
        },
      },
    );
    expect((await gate(request("/v1/echo"))).status).toBe(500);
  });
});

describe("admin routes", () => {
  it("answer 404 for names every JavaScript object has, with the right token", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const name of ["constructor", "__proto__", "toString", "valueOf", "hasOwnProperty", "isPrototypeOf", "__defineGetter__", "prototype"]) {
      const res = await admin(gate, name);
      expect(res.status, name).toBe(404);
      expect(await res.json(), name).toMatchObject({ type: "urn:slidegate:not-found" });
    }
  });

  it("are the gate's in any spelling: case, encoding and extra slashes never reach the origin", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const path of ["/__SLIDEGATE/usage", "//__slidegate/usage", "/%5F_slidegate/usage", "/x/../__slidegate/Usage"]) {
      const res = await gate(new Request(`https://gate.example${path}`, { method: "POST", body: '{"ip":"203.0.113.9"}', headers: { authorization: `Bearer ${ADMIN}` } }));
      expect(res.status, path).toBe(200);
      expect(await res.json(), path).toMatchObject({ tier: "default" });
    }
  });

  it("a store failure is a logged 503 that names nothing internal", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN, redisUrl: "http://127.0.0.1:9" });
    const res = await admin(gate, "usage");
    expect(res.status).toBe(503);
    const body = (await res.json()) as { type: string; detail: string };
    expect(body.type).toBe("urn:slidegate:store-unavailable");
    expect(body.detail).toBe("The rate-limit store failed.");
    expect(gate.logs.some((l) => l.line.event === "slidegate.admin_store_failure")).toBe(true);
  });

  it("an outage under a flood of admin calls writes a line a second, counting every failure", async () => {
    const clock = testClock();
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN, redisUrl: "http://127.0.0.1:9", now: clock.now });
    for (let second = 0; second < 2; second++) {
      // anyone can send these: a wrong token fails on the store as the right one does
      for (let i = 0; i < 30; i++) {
        const token = i % 2 ? ADMIN : "wrong-token";
        const res = await gate(new Request("https://gate.example/__slidegate/usage", { method: "POST", body: "{}", headers: { authorization: `Bearer ${token}` } }));
        expect(res.status).toBe(503);
      }
      clock.advance(1000);
    }
    expect((await admin(gate, "usage")).status).toBe(503);
    const lines = gate.logs.map((l) => l.line).filter((l) => String(l.event).startsWith("slidegate.admin_store_failure"));
    const full = lines.filter((l) => l.event === "slidegate.admin_store_failure");
    const counted = lines.filter((l) => l.event === "slidegate.admin_store_failure_summary").reduce((n, l) => n + Number(l.failures), 0);
    expect(full).toHaveLength(3);
    expect(full.length + counted).toBe(61);
  });

  it("an outage whose admin calls stop still writes the count of their last failures, in the background of their responses", async () => {
    const clock = testClock();
    // the gate's wait for a later request shortened: nothing here depends on how long it is
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN, redisUrl: "http://127.0.0.1:9", now: clock.now, quietFlushMs: 1 });
    const background: Promise<unknown>[] = [];
    const ctx = { waitUntil: (promise: Promise<unknown>) => void background.push(promise) };
    for (let i = 0; i < 20; i++) {
      const token = i % 2 ? ADMIN : "wrong-token";
      const res = await gate(new Request("https://gate.example/__slidegate/usage", { method: "POST", body: "{}", headers: { authorization: `Bearer ${token}` } }), ctx);
      await res.body?.cancel();
      expect(res.status).toBe(503);
    }
    // no call comes after these, within their second or after it: the isolate goes quiet
    while (background.length) await background.shift();
    const lines = gate.logs.map((l) => l.line);
    const full = lines.filter((l) => l.event === "slidegate.admin_store_failure").length;
    const counted = lines.filter((l) => l.event === "slidegate.admin_store_failure_summary").reduce((n, l) => n + Number(l.failures), 0);
    expect(full + counted).toBe(20);
  });
});

describe("isStoreFailure", () => {
  it("tells the store's failures from programming errors", () => {
    expect(isStoreFailure(new Error("Network connection lost."))).toBe(true);
    expect(isStoreFailure(new DOMException("The operation timed out.", "TimeoutError"))).toBe(true);
    for (const bug of [new TypeError("route is not a function"), new RangeError("x"), new ReferenceError("y"), "a string"]) expect(isStoreFailure(bug)).toBe(false);
  });
});
