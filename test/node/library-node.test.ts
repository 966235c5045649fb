import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import { ECHO_PREFIX, startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import { freePort } from "../../scripts/lib/ports.ts";
import { rateLimit } from "../../src/adapters/hono.ts";
import { createRateLimiter } from "../../src/adapters/library.ts";
import { services, upstash } from "../helpers/shim.ts";

/** Runs `program` (an ES module) in a Node process of its own to its end: the store failures its log lines count, full and summed. */
function failuresLoggedBy(program: string) {
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", program], { encoding: "utf8", timeout: 30_000 });
  expect(run.status, run.stderr).toBe(0);
  const lines = run.stderr
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as { event: string; failures?: number });
  const counted = lines.filter((line) => line.event === "slidegate.store_failure").length + lines.reduce((sum, line) => sum + (line.failures ?? 0), 0);
  return { run, counted };
}

// The library as a Node application runs it (Node's fetch, not workerd's): what it logs of a
// store failure must name the failure that happened.
describe("the library on Node", () => {
  it("logs a store it cannot connect to as not reached, with the cause, never as a reply it could not read", async () => {
    const port = await freePort(); // nothing listens there
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const l = createRateLimiter({ url: `http://127.0.0.1:${port}`, token: "a-token", prefix: `libnode${Date.now()}`, rules: [{ name: "a", limit: 1, window: "1m" }] });
      expect((await l.limit("u")).reason).toBe("failed-open");
      const line = JSON.parse(String(logged.mock.calls[0]?.[0])) as { event: string; error: string };
      expect(line.event).toBe("slidegate.store_failure");
      expect(line.error).toMatch(/could not be reached/);
      expect(line.error).toContain("ECONNREFUSED");
      expect(line.error).not.toMatch(/reply/);
    } finally {
      logged.mockRestore();
    }
  });

  it("writes the count of a burst's last store failures without a later call to write it", async () => {
    const port = await freePort(); // nothing listens there
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const l = createRateLimiter({ url: `http://127.0.0.1:${port}`, token: "a-token", prefix: `libnode${Date.now()}`, rules: [{ name: "a", limit: 1, window: "1m" }] });
      // one full line, the rest of the burst counted: within one interval (1 s) on any machine
      // only if they come at once, so the counted total is read from the lines, not assumed
      await Promise.all(Array.from({ length: 5 }, () => l.limit("u")));
      const lines = () => logged.mock.calls.map((c) => JSON.parse(String(c[0])) as { event: string; failures?: number });
      const counted = () => lines().filter((line) => line.event === "slidegate.store_failure").length + lines().reduce((sum, line) => sum + (line.failures ?? 0), 0);
      // no further call: the summary comes by itself once the interval is over
      await vi.waitFor(() => expect(counted()).toBe(5), { timeout: 10_000, interval: 100 });
    } finally {
      logged.mockRestore();
    }
  });

  it("writes the count of a burst's last store failures when the Node process ends before the interval is over", async () => {
    const port = await freePort(); // nothing listens there
    // an application that makes its calls and is done: its process ends at once (the limiter keeps
    // no timer alive), and the burst's counted failures must be written on the way out
    const program = `
      import { createRateLimiter } from ${JSON.stringify(`${process.cwd()}/src/adapters/library.ts`)};
      const l = createRateLimiter({ url: "http://127.0.0.1:${port}", token: "a-token", rules: [{ name: "a", limit: 1, window: "1m" }] });
      await Promise.all(Array.from({ length: 5 }, () => l.limit("u")));
    `;
    const { run, counted } = failuresLoggedBy(program);
    expect(counted, run.stderr).toBe(5);
  });

  it("writes every limiter's count at exit with one exit listener, so a program of many limiters gets no MaxListenersExceededWarning", async () => {
    const port = await freePort(); // nothing listens there
    // a limiter per route or per tenant, all failing in the same second: a listener each went past Node's ten
    const program = `
      import { createRateLimiter } from ${JSON.stringify(`${process.cwd()}/src/adapters/library.ts`)};
      const limiters = Array.from({ length: 12 }, () => createRateLimiter({ url: "http://127.0.0.1:${port}", token: "a-token", rules: [{ name: "a", limit: 1, window: "1m" }] }));
      await Promise.all(limiters.flatMap((l) => [l.limit("u"), l.limit("u")]));
      if (process.listenerCount("exit") > 1) console.error("exit listeners: " + process.listenerCount("exit"));
    `;
    const { run, counted } = failuresLoggedBy(program);
    expect(run.stderr).not.toMatch(/MaxListenersExceededWarning|exit listeners/);
    expect(counted, run.stderr).toBe(24);
  });

  it("never logs a token given with white space around it (as a file or a secret store hands it over) when the store quotes back the token it was sent", async () => {
    // a store, or a proxy in front of it, that quotes back the token it got, mid-sentence: nothing behind it is asked
    const token = randomBytes(16).toString("hex");
    const proxy = await startFaultProxy(`http://127.0.0.1:${await freePort()}`);
    proxy.set({ kind: "body", body: JSON.stringify({ error: `${ECHO_PREFIX}Bearer ${token} (not a token of this database)` }) });
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const l = createRateLimiter({ url: proxy.url, token: `${token}\n`, prefix: `libnode${Date.now()}`, rules: [{ name: "a", limit: 1, window: "1m" }] });
      expect((await l.limit("u")).reason).toBe("failed-open");
      const lines = logged.mock.calls.map((c) => String(c[0]));
      expect(lines.filter((line) => line.includes(ECHO_PREFIX))).toHaveLength(1);
      for (const line of lines) expect(line).not.toContain(token.slice(0, 8));
    } finally {
      logged.mockRestore();
      await proxy.close();
    }
  });

  it("never logs a token holding a quote or a backslash that the store quotes back in a reply the log shows as JSON, where each is escaped", async () => {
    // a self-hosted store's token is the operator's to choose, and a header carries " and \ as
    // they are; the log line shows an odd reply as JSON, where the token is written \" and \\
    const [head, tail] = [randomBytes(8).toString("hex"), randomBytes(8).toString("hex")];
    const token = `${head}"\\${tail}`;
    const proxy = await startFaultProxy(`http://127.0.0.1:${await freePort()}`);
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      // an answer of the right frame that holds no decision, and one of no frame at all
      for (const fault of [
        { kind: "reply", result: [token, 1] },
        { kind: "body", body: JSON.stringify({ echo: `Bearer ${token}` }) },
      ] as const) {
        proxy.set(fault);
        logged.mockClear();
        const l = createRateLimiter({ url: proxy.url, token, prefix: `libnode${randomBytes(6).toString("hex")}`, rules: [{ name: "a", limit: 1, window: "1m", fail: "closed" }] });
        expect((await l.limit("u")).reason, fault.kind).toBe("failed-closed");
        const lines = logged.mock.calls.map((c) => String(c[0]));
        expect(
          lines.filter((line) => line.includes('"slidegate.store_failure"')),
          fault.kind,
        ).toHaveLength(1);
        for (const line of lines) {
          expect(line, fault.kind).not.toContain(head);
          expect(line, fault.kind).not.toContain(tail);
        }
      }
    } finally {
      logged.mockRestore();
      await proxy.close();
    }
  });

  it("never logs a token that a gateway in front of the store quotes back in an error answer written with its own JSON escapes", async () => {
    // a token is the operator's to choose, up to U+00FF; a gateway's JSON may write "/" as \/
    // (PHP), "é" as \u00e9 (Python's json), "<" and "&" as \u003c and \u0026 (Go's)
    const [head, tail] = [randomBytes(8).toString("hex"), randomBytes(8).toString("hex")];
    const token = `${head}/é<&${tail}`;
    const escaped = `${head}\\/\\u00e9\\u003c\\u0026${tail}`;
    const proxy = await startFaultProxy(`http://127.0.0.1:${await freePort()}`);
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      proxy.set({ kind: "status", status: 401, body: `{"message":"no such token: ${escaped}"}` });
      const l = createRateLimiter({ url: proxy.url, token, prefix: `libnode${randomBytes(6).toString("hex")}`, rules: [{ name: "a", limit: 1, window: "1m", fail: "closed" }] });
      expect((await l.limit("u")).reason).toBe("failed-closed");
      const lines = logged.mock.calls.map((c) => String(c[0]));
      const [line] = lines.filter((l) => l.includes('"slidegate.store_failure"'));
      // the answer's words are still there, its status too
      expect(line).toMatch(/\b401\b.*no such token/);
      for (const l of lines) {
        expect(l).not.toContain(head);
        expect(l).not.toContain(tail);
      }
    } finally {
      logged.mockRestore();
      await proxy.close();
    }
  });

  it('names what a store that speaks no Upstash REST answered (a gateway\'s 403 {"message": …}, an error that is an object), with its status: never "undefined" or "[object Object]"', async () => {
    // a proxy or an API gateway in front of the store answers in its own words, which the
    // REST client reads as the text of an `error` field it does not find
    const proxy = await startFaultProxy(`http://127.0.0.1:${await freePort()}`);
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      for (const [fault, named] of [
        [{ kind: "status", status: 403, body: JSON.stringify({ message: "Forbidden by the gateway's policy" }) }, /\b403\b.*Forbidden by the gateway's policy/],
        [{ kind: "status", status: 429, body: JSON.stringify({ error: { code: 429, message: "monthly quota exceeded" } }) }, /\b429\b.*monthly quota exceeded/],
        [{ kind: "status", status: 502, body: "{}" }, /\b502\b/],
        [{ kind: "body", body: JSON.stringify({ error: { code: 13, message: "backend unavailable" } }) }, /backend unavailable/],
      ] as const) {
        proxy.set(fault);
        logged.mockClear();
        const l = createRateLimiter({
          url: proxy.url,
          token: "a-token",
          prefix: `libnode${randomBytes(6).toString("hex")}`,
          rules: [{ name: "a", limit: 1, window: "1m", fail: "closed" }],
        });
        expect((await l.limit("u")).reason, fault.body).toBe("failed-closed");
        const line = logged.mock.calls.map((c) => JSON.parse(String(c[0])) as { event: string; error: string }).find((l) => l.event === "slidegate.store_failure");
        expect(line?.error, fault.body).toMatch(named);
        expect(line?.error, fault.body).not.toMatch(/undefined|null|\[object Object\]/);
      }
    } finally {
      logged.mockRestore();
      await proxy.close();
    }
  });

  it("admits exactly the limit to a burst of concurrent limit() calls for one identity, from one limiter and from several, at a cost of their own too", async () => {
    const s = services();
    const store = { url: s.shimUrl, token: s.shimToken, prefix: `libnode${randomBytes(6).toString("hex")}`, rules: [{ name: "a", limit: 30, window: "1h", timeout: 30_000 }] };
    // several limiters, as isolates each hold one, each with its own cache of denied callers
    const limiters = Array.from({ length: 4 }, () => createRateLimiter(store));
    const burst = (identity: string, cost?: number) => Promise.all(Array.from({ length: 100 }, (_, i) => limiters[i % limiters.length]!.limit(identity, { cost })));
    const counted = (results: { reason: string }[]) => {
      const by: Record<string, number> = {};
      for (const { reason } of results) by[reason] = (by[reason] ?? 0) + 1;
      return by;
    };
    expect(counted(await burst("ada"))).toEqual({ admitted: 30, "rate-limited": 70 });
    expect(counted(await burst("grace", 3))).toEqual({ admitted: 10, "rate-limited": 90 });
  });

  // Off Cloudflare, CF-Connecting-IP is the client's own: a caller who writes a new value with
  // each request is a new caller each time, address rules and all. The README says so; an app
  // that missed it must hear it from the limiter, once, not find it in its bill.
  it("warns once, on Node, that a Request given without clientIp is counted by CF-Connecting-IP, which any client writes: a new caller with each value", async () => {
    const warned = vi.spyOn(console, "warn").mockImplementation(() => {});
    const s = services();
    const store = { url: s.shimUrl, token: s.shimToken, prefix: `libnode${randomBytes(6).toString("hex")}`, rules: [{ name: "a", limit: 1, window: "1h" }] };
    const from = (ip: string) => new Request("https://app.example/", { headers: { "cf-connecting-ip": ip } });
    const header =
      /^slidegate: the client address is read from CF-Connecting-IP, which only Cloudflare's edge sets: on this runtime \(Node\.js\/\d+\) a client writes that header itself/;
    try {
      const l = createRateLimiter(store);
      expect(warned).not.toHaveBeenCalled();
      // what the warning is about: each forged value is a fresh bucket
      for (const ip of ["192.0.2.1", "192.0.2.2", "192.0.2.3"]) expect((await l.limit(from(ip))).reason, ip).toBe("admitted");
      expect(warned.mock.calls.map((c) => String(c[0]))).toEqual([expect.stringMatching(header)]);
      expect(String(warned.mock.calls[0]![0])).toMatch(/limit\(request, \{ clientIp \}\)/);
      // given the address the runtime read, the header is never read, and nothing is said
      warned.mockClear();
      const told = createRateLimiter(store);
      expect((await told.limit(from("192.0.2.4"), { clientIp: "198.51.100.1" })).reason).toBe("admitted");
      expect((await told.limit(from("192.0.2.5"), { clientIp: "198.51.100.1" })).reason).toBe("rate-limited");
      expect((await told.limit("user-1")).reason).toBe("admitted");
      expect(warned).not.toHaveBeenCalled();
      // the middleware says it when it is built, not per request, and not once it has clientIp
      rateLimit(store);
      expect(warned.mock.calls.map((c) => String(c[0]))).toEqual([expect.stringMatching(header)]);
      expect(String(warned.mock.calls[0]![0])).toMatch(/getConnInfo/);
      warned.mockClear();
      const app = new Hono();
      app.use(rateLimit({ ...store, prefix: `${store.prefix}h` }));
      app.get("/", (c) => c.text("ok"));
      warned.mockClear();
      for (const ip of ["192.0.2.6", "192.0.2.7"]) expect((await app.request("/", { headers: { "cf-connecting-ip": ip } })).status).toBe(200);
      rateLimit({ ...store, clientIp: () => "198.51.100.2" });
      expect(warned).not.toHaveBeenCalled();
    } finally {
      warned.mockRestore();
    }
  });

  // On Node an unhandled rejection ends the process (--unhandled-rejections=throw, the default):
  // an async callback whose Promise rejects (a user lookup that fails) would take the server
  // down with it, where the TypeError that says "a Promise" should have gone to app.onError.
  it("leaves no unhandled rejection when a Hono callback (identify, cost, clientIp) or a limit() option is a Promise that rejects: the TypeError alone, nothing recorded", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on("unhandledRejection", onUnhandled);
    const s = services();
    const p = `libnode${randomBytes(6).toString("hex")}`;
    const store = { url: s.shimUrl, token: s.shimToken, prefix: p, rules: [{ name: "a", limit: 5, window: "1m" }] };
    const lookupFailed = () => Promise.reject(new Error("user lookup failed"));
    try {
      for (const callback of ["identify", "cost", "clientIp"] as const) {
        const app = new Hono();
        const errors: unknown[] = [];
        app.onError((err, c) => {
          errors.push(err);
          return c.text("error", 500);
        });
        app.use(rateLimit({ ...store, [callback]: lookupFailed as never }));
        app.get("/", (c) => c.text("ok"));
        const res = await app.request("/", { headers: { "cf-connecting-ip": "192.0.2.80" } });
        expect(res.status, callback).toBe(500);
        expect(errors, callback).toHaveLength(1);
        expect(errors[0], callback).toBeInstanceOf(TypeError);
        expect(String(errors[0]), callback).toMatch(new RegExp(`options\\.${callback} must return .*a Promise`));
      }
      const l = createRateLimiter(store);
      const request = new Request("https://app.example/", { headers: { "cf-connecting-ip": "192.0.2.81" } });
      for (const option of ["identity", "cost", "clientIp"] as const) {
        await expect(l.limit(request, { [option]: lookupFailed() as never }), option).rejects.toThrow(TypeError);
      }
      // a rejection nobody handles is reported once the microtasks have run: after two turns of the event loop
      for (let i = 0; i < 2; i++) await new Promise((r) => setImmediate(r));
      expect(unhandled.map(String)).toEqual([]);
      expect(await upstash().keys(`${p}:*`)).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("never calls then() of a thenable that is no Promise (a query builder, which runs its query when it is), returned by a Hono callback or given to limit(): the TypeError alone", async () => {
    const s = services();
    let ran = 0;
    // as a query builder is: awaiting it (then()) is what runs it
    const query = () => ({
      // biome-ignore lint/suspicious/noThenProperty: a thenable that is no Promise is what this test hands over
      then: (resolve: (v: string) => void) => {
        ran++;
        resolve("user-1");
      },
    });
    const store = { url: s.shimUrl, token: s.shimToken, prefix: `libnode${randomBytes(6).toString("hex")}`, rules: [{ name: "a", limit: 5, window: "1m" }] };
    for (const callback of ["identify", "cost", "clientIp"] as const) {
      const app = new Hono();
      let error: unknown;
      app.onError((err, c) => {
        error = err;
        return c.text("error", 500);
      });
      app.use(rateLimit({ ...store, [callback]: query as never }));
      app.get("/", (c) => c.text("ok"));
      expect((await app.request("/", { headers: { "cf-connecting-ip": "192.0.2.82" } })).status, callback).toBe(500);
      expect(error, callback).toBeInstanceOf(TypeError);
    }
    const l = createRateLimiter(store);
    for (const option of ["identity", "cost", "clientIp"] as const) {
      await expect(l.limit(new Request("https://app.example/"), { [option]: query() as never }), option).rejects.toThrow(TypeError);
    }
    expect(ran).toBe(0);
  });
});
