import { afterEach, describe, expect, it } from "vitest";
import { FAIL_OPEN_HEADER } from "../../src/http/answers.ts";
import { makeGate, request, services, statuses, testClock } from "./helpers.ts";

const control = (action: "stop" | "start") => fetch(`${services.controlUrl}/redis/${action}`, { method: "POST" });
const viaFaultShim = { redisUrl: services.faultShimUrl };

afterEach(async () => {
  await control("start");
});

describe("gate when Redis is stopped", () => {
  it("fails open: admits, marks the response and logs a structured line, within the timeout", async () => {
    const gate = makeGate({ fail: "open", timeout: 1000, rules: [{ name: "a", limit: 1, window: "1m" }] }, viaFaultShim);
    await control("stop");
    const started = Date.now();
    const res = await gate(request("/status/200"));
    expect(Date.now() - started).toBeLessThan(1000 + 500);
    expect(res.status).toBe(200);
    expect(res.headers.get(FAIL_OPEN_HEADER)).toBe("store-unavailable");
    expect(res.headers.has("X-RateLimit-Limit")).toBe(false);
    expect(gate.logs).toContainEqual({ level: "error", line: expect.objectContaining({ event: "slidegate.store_failure", fail: "open", rules: ["a"] }) });
  });

  it("fails closed: 503 problem+json with Retry-After, within the timeout", async () => {
    const gate = makeGate({ fail: "closed", timeout: 1000, rules: [{ name: "a", limit: 1, window: "1m" }] }, viaFaultShim);
    await control("stop");
    const started = Date.now();
    const res = await gate(request());
    expect(Date.now() - started).toBeLessThan(1000 + 500);
    expect(res.status).toBe(503);
    expect(res.headers.get("Retry-After")).toBe("1");
    expect(res.headers.get("Content-Type")).toBe("application/problem+json");
    expect(await res.json()).toMatchObject({ type: "urn:slidegate:store-unavailable", status: 503 });
  });

  it("an outage under a flood writes a line per second, not per request, and counts every failure", async () => {
    const clock = testClock();
    const gate = makeGate({ fail: "open", timeout: 1000, rules: [{ name: "a", limit: 1, window: "1m" }] }, { ...viaFaultShim, now: clock.now });
    await control("stop");
    expect(new Set(await statuses(gate, 60))).toEqual(new Set([200]));
    clock.advance(1000);
    expect(new Set(await statuses(gate, 60))).toEqual(new Set([200]));
    // the store is back: requests a second on carry the last count out (the first few may
    // still fail open while the shim reconnects; each of those is counted too)
    await control("start");
    clock.advance(1000);
    let more = 0;
    for (let i = 0; i < 40; i++) {
      const res = await gate(request());
      await res.body?.cancel();
      if (!res.headers.has(FAIL_OPEN_HEADER)) break;
      more++;
      await new Promise((r) => setTimeout(r, 100));
    }
    clock.advance(1000);
    await (await gate(request())).body?.cancel();
    const lines = gate.logs.map((l) => l.line).filter((l) => String(l.event).startsWith("slidegate.store_failure"));
    const full = lines.filter((l) => l.event === "slidegate.store_failure");
    const counted = lines.filter((l) => l.event === "slidegate.store_failure_summary").reduce((n, l) => n + Number(l.failures), 0);
    expect(full.length).toBeLessThanOrEqual(3);
    expect(lines.length).toBeLessThanOrEqual(6);
    expect(full.length + counted).toBe(120 + more);
  });

  it("an outage whose requests stop still writes the count of its last failures, in the background of their responses", async () => {
    const clock = testClock();
    // nothing listens on port 9; the gate's wait for a later request shortened: nothing here depends on how long it is
    const gate = makeGate({ fail: "open", timeout: 1000, rules: [{ name: "a", limit: 1, window: "1m" }] }, { redisUrl: "http://127.0.0.1:9", now: clock.now, quietFlushMs: 1 });
    const background: Promise<unknown>[] = [];
    const ctx = { waitUntil: (promise: Promise<unknown>) => void background.push(promise) };
    for (let i = 0; i < 20; i++) {
      const res = await gate(request(), ctx);
      await res.body?.cancel();
      expect(res.headers.get(FAIL_OPEN_HEADER)).toBe("store-unavailable");
    }
    // no request comes after these, within their second or after it: the isolate goes quiet
    while (background.length) await background.shift();
    const lines = gate.logs.map((l) => l.line);
    const full = lines.filter((l) => l.event === "slidegate.store_failure").length;
    const counted = lines.filter((l) => l.event === "slidegate.store_failure_summary").reduce((n, l) => n + Number(l.failures), 0);
    expect(full + counted).toBe(20);
  });

  it("a failure's line carries a caller's path cut short, as its error is, however long the path is", async () => {
    const gate = makeGate({ fail: "open", timeout: 1000, rules: [{ name: "a", limit: 1, window: "1m" }] }, { redisUrl: "http://127.0.0.1:9" });
    const path = `/${"a".repeat(16_000)}`;
    const res = await gate(request(path));
    await res.body?.cancel();
    expect(res.headers.get(FAIL_OPEN_HEADER)).toBe("store-unavailable");
    const line = gate.logs.find((l) => l.line.event === "slidegate.store_failure")!.line;
    expect(String(line.path).startsWith("/aaaa")).toBe(true);
    expect(JSON.stringify(line).length).toBeLessThan(2000);
  });

  it("a rule that fails closed wins over one that fails open", async () => {
    const gate = makeGate(
      {
        fail: "open",
        rules: [
          { name: "soft", limit: 5, window: "1m" },
          { name: "hard", limit: 5, window: "1m", fail: "closed" },
        ],
      },
      viaFaultShim,
    );
    await control("stop");
    expect((await gate(request())).status).toBe(503);
  });

  it("gives up on a store slower than its budget: the timeout, not a refusal, decides", async () => {
    // the slow shim answers every call, correctly, slowShimMs late: only the budget can fail it
    const budget = 5;
    expect(budget).toBeLessThan(services.slowShimMs);
    const gate = makeGate({ fail: "closed", timeout: budget, rules: [{ name: "a", limit: 1, window: "1m" }] }, { redisUrl: services.slowShimUrl });
    expect((await gate(request())).status).toBe(503);
    const failure = gate.logs.find((l) => l.line.event === "slidegate.store_failure")!;
    // the gate's own cleared timer, not the client's fallback, ended the call
    expect(String(failure.line.error)).toContain(`Timed out: the store did not answer within ${budget} ms.`);
    // the same store within a budget it meets decides as usual
    const patient = makeGate({ fail: "closed", timeout: 5000, rules: [{ name: "a", limit: 1, window: "1m" }] }, { redisUrl: services.slowShimUrl });
    expect((await patient(request())).status).toBe(200);
  });

  it("limits exactly again once Redis is back", async () => {
    const gate = makeGate({ fail: "open", rules: [{ name: "a", limit: 2, window: "1m" }] }, viaFaultShim);
    await control("stop");
    expect((await gate(request())).headers.get(FAIL_OPEN_HEADER)).toBe("store-unavailable");
    await control("start");
    const codes: number[] = [];
    for (let i = 0; i < 40 && codes.length < 3; i++) {
      const res = await gate(request());
      if (res.headers.has(FAIL_OPEN_HEADER)) await new Promise((r) => setTimeout(r, 100));
      else codes.push(res.status);
    }
    expect(codes).toEqual([200, 200, 429]);
  });
});
