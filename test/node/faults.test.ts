import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import Redis from "ioredis";
import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ECHO_PREFIX, type Fault, type FaultProxy, startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { type LocalRedis, startRedis } from "../../scripts/lib/redis-server.ts";
import { type RunningShim, startShim } from "../../scripts/shim/server.ts";
import { createRateLimiter } from "../../src/adapters/library.ts";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import { rateLimits, startGateFleet, startGateIsolate } from "../helpers/miniflare.ts";

// A store of this file's own, with the fault proxy between the Worker and the shim:
// Worker → fault proxy → shim → redis-server. Two fleets of two isolates, one per fail mode.
// A budget a loaded machine's round trip never spends (the exact limiting after each fault asks
// one decision at a time within it), and a margin on top of it for workerd, the proxy and that
// machine: an answer at the budget plus the margin still comes well before the slow store's
// (TIMEOUT * 3), so a gate that waited for the store is told from one that kept its budget.
const TIMEOUT = 2000;
const MARGIN = 3000;
const LIMIT = 5;

/** An admin route called on `gate` with `adminToken`, from client address `ip`. */
const adminCall = (gate: Miniflare, adminToken: string, route: string, payload: unknown, ip: string) =>
  gate.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "cf-connecting-ip": ip },
    body: JSON.stringify(payload),
  });

/** the store's token, which a store or a proxy in front of it may quote back */
const token = randomBytes(16).toString("hex");
let redis: LocalRedis;
let shim: RunningShim;
let proxy: FaultProxy;
let open: Fleet;
let closed: Fleet;
/** API keys only registered ones may use, failing open */
let keyed: Fleet;
/** the key prefix of each fleet's RATE_LIMITS */
const prefixOf: Record<string, string> = {};
const logs: string[] = [];

beforeAll(async () => {
  redis = await startRedis();
  shim = await startShim({ token, redisUrl: redis.url, log: () => {} });
  proxy = await startFaultProxy(shim.url);
  const fleet = (fail: "open" | "closed", name: string = fail, extra: Record<string, unknown> = {}) => {
    const RATE_LIMITS = rateLimits({ fail, timeout: TIMEOUT, rules: [{ name: "default", limit: LIMIT, window: "10m" }], ...extra });
    prefixOf[name] = (JSON.parse(RATE_LIMITS) as { prefix: string }).prefix;
    return startGateFleet(2, { UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => logs.push(line));
  };
  [open, closed, keyed] = await Promise.all([fleet("open"), fleet("closed"), fleet("open", "keyed", { identity: { header: "x-api-key", unknownKeys: "reject" } })]);
}, 60_000);

afterAll(async () => {
  await Promise.all([open?.dispose(), closed?.dispose(), keyed?.dispose()]);
  await proxy?.close();
  await shim?.close();
  await redis?.stop();
});

let identity = 0;
// a /64 of its own per call: every address of one /64 is one caller
const fresh = () => ({ "cf-connecting-ip": `2001:db8:fa:${(++identity).toString(16)}::1` });

interface Answer {
  status: number;
  failOpen: boolean;
  ms: number;
}

async function ask(fleet: Pick<Fleet, "isolates">, headers: Record<string, string>, i = 0): Promise<Answer> {
  const started = performance.now();
  const res = await fleet.isolates[i % fleet.isolates.length]!.dispatchFetch("http://gate.example/", { headers });
  await res.arrayBuffer();
  return { status: res.status, failOpen: res.headers.has("X-Slidegate-Fail-Open"), ms: performance.now() - started };
}

/** `run` while the store suffers `fault` (but on the calls `spare` accepts): lifted however `run` ends, so no test leaves it to the next. */
async function during<T>(fault: Fault, run: () => Promise<T>, spare?: (body: string) => boolean): Promise<T> {
  proxy.set(fault, spare);
  try {
    return await run();
  } finally {
    proxy.set({ kind: "none" });
  }
}

/** `run` with an isolate of its own on the fault proxy, its log lines into `lines`: disposed however `run` ends. */
async function withIsolate<T>(RATE_LIMITS: string, run: (gate: Miniflare) => Promise<T>, lines: string[] = logs): Promise<T> {
  const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => lines.push(line));
  try {
    return await run(gate);
  } finally {
    await gate.dispose();
  }
}

/** `key` put in `tier` in the registry under RATE_LIMITS's prefix, as the admin API puts it; its tag. */
async function registerKey(RATE_LIMITS: string, key: string, tier: string): Promise<string> {
  const tag = (await identify("k", key)).tag;
  const admin = new Redis(redis.url);
  await admin.hset(`${(JSON.parse(RATE_LIMITS) as { prefix: string }).prefix}:{${tag}}:key`, { tier });
  admin.disconnect();
  return tag;
}

/** One slidegate.store_failure line among `lines`, a failure of the shadow rules `rules` alone. */
function expectOneShadowFailure(lines: readonly string[], rules: readonly string[]) {
  const failures = lines.filter((l) => l.includes('"slidegate.store_failure"'));
  expect(failures).toHaveLength(1);
  expect(failures[0]).toContain('"fail":"shadow"');
  expect(failures[0]).toContain(`"rules":${JSON.stringify(rules)}`);
}

/** While the fault holds: each fleet follows its fail mode, within the budget, never a 500. */
async function expectFailPolicy() {
  const [opened, refused] = await Promise.all([
    Promise.all(Array.from({ length: 8 }, (_, i) => ask(open, fresh(), i))),
    Promise.all(Array.from({ length: 8 }, (_, i) => ask(closed, fresh(), i))),
  ]);
  for (const a of opened) expect(a).toMatchObject({ status: 200, failOpen: true });
  for (const a of refused) expect(a).toMatchObject({ status: 503, failOpen: false });
  for (const a of [...opened, ...refused]) expect(a.ms).toBeLessThan(TIMEOUT + MARGIN);
}

/** Within 1 s of the fault's end the first undegraded answer arrives, and limiting is exact again. */
async function expectExactWithinASecond(faultEnded: number) {
  for (const fleet of [open, closed]) {
    let answer: Answer;
    do answer = await ask(fleet, fresh());
    while ((answer.failOpen || answer.status === 503) && performance.now() - faultEnded < 1000);
    expect(answer.status, "undegraded within 1 s").toBe(200);
    expect(answer.failOpen).toBe(false);
    // one at a time: a burst would measure the machine's load against the budget, not the store
    const who = fresh();
    const codes: number[] = [];
    for (let i = 0; i < LIMIT + 3; i++) codes.push((await ask(fleet, who, i)).status);
    expect(codes).toEqual([...Array(LIMIT).fill(200), 429, 429, 429]);
  }
}

async function withFault(fault: Fault) {
  proxy.set(fault);
  try {
    await expectFailPolicy();
  } finally {
    proxy.set({ kind: "none" }); // a failed expectation must not leave the fault for the next test
  }
  await expectExactWithinASecond(performance.now());
}

describe("faults between the Worker and Redis", () => {
  it("the shim answers 5xx", () => withFault({ kind: "status", status: 503 }));
  it("the shim is slower than the timeout", () => withFault({ kind: "slow", ms: TIMEOUT * 3 }));
  it("the shim answers malformed JSON", () => withFault({ kind: "malformed" }));
  it("the shim answers JSON of the wrong shape", () => withFault({ kind: "wrong-shape" }));
  it("the connection to the shim is cut", () => withFault({ kind: "drop" }));

  it("the store redirects elsewhere: a failure by the fail mode, and the token never follows the redirect", async () => {
    // a host that answers as the store would, and notes every credential it is sent
    const sent: (string | undefined)[] = [];
    const elsewhere = createServer((req, res) => {
      sent.push(req.headers.authorization);
      req.resume();
      req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ result: [1, LIMIT - 1, 600_000, 0, LIMIT, 600_000] })));
    });
    await new Promise<void>((resolve) => elsewhere.listen(0, "127.0.0.1", resolve));
    try {
      for (const status of [301, 302, 307, 308]) {
        await withFault({ kind: "redirect", status, location: `http://127.0.0.1:${(elsewhere.address() as AddressInfo).port}/` });
        expect(
          sent.filter((s) => s?.includes(token)),
          `after a ${status}`,
        ).toEqual([]);
      }
    } finally {
      elsewhere.closeAllConnections();
      await new Promise((resolve) => elsewhere.close(resolve));
    }
  });

  // well-typed replies the script never gives to this call: a failure, never a denial, an
  // admission with headers made of them, or a 500
  it.each([
    ["a registry answer to a call that asked no registry", [3]],
    ["another tier, to a call that asked no registry", [5, "other"]],
    ["a denial that names no rule to wait for", [0, 0, 0, 0, LIMIT, 600_000]],
    ["a negative remaining", [1, -7, 0, 0, LIMIT, 600_000]],
    ["a limit that is not the rule's", [1, 4, 0, 0, 99, 600_000]],
    ["a wait of years", [0, 0, 0, 10 ** 15, LIMIT, 600_000]],
    ["a request that can never fit (wait -1) under a limit its cost fits", [0, 0, 0, -1, LIMIT, 600_000]],
    ["a number past 2^53", [1, 4, 0, 0, LIMIT, 1e21]],
    // an admission whose numbers deny it, or say it was not counted
    ["an admission that waits on its rule", [1, LIMIT - 1, 600_000, 30_000, LIMIT, 600_000]],
    ["an admission its rule did not count (the whole limit left)", [1, LIMIT, 600_000, 0, LIMIT, 600_000]],
    // a block's length is whole milliseconds, or -1 for one without end (or past 2^53: a hand-made block too long to count)
    ["a block of a negative length other than -1", [2, -7]],
    ["a block of a fraction of a millisecond", [2, 1.5]],
  ])("the store answers %s", (_, result) => withFault({ kind: "reply", result }));

  it("the store names a tier no configuration can hold: a failure by the fail mode, and its text reaches no log line", async () => {
    // a reply of the registry's shape whose tier is no name (names are 1-32 characters, no `|`),
    // longer than a data point's blobs may be: it must not pass for a move to another tier
    const tier = `t${"|".repeat(20_000)}`;
    const registered = `${prefixOf.keyed}:{${(await identify("k", "tiered-key")).tag}}:key`;
    const admin = new Redis(redis.url);
    await admin.hset(registered, { tier: "default" });
    admin.disconnect();
    const seen = logs.length;
    const faulted = proxy.faulted;
    proxy.set({ kind: "reply", result: [5, tier] });
    let answer: Answer;
    try {
      answer = await ask(keyed, { ...fresh(), "x-api-key": "tiered-key" });
    } finally {
      proxy.set({ kind: "none" });
    }
    expect(answer).toMatchObject({ status: 200, failOpen: true });
    // one call: an answer no script gives is not asked again
    expect(proxy.faulted - faulted).toBe(1);
    const failure = logs.slice(seen).find((l) => l.includes('"slidegate.store_failure"'));
    expect(failure, "the failure is logged").toBeDefined();
    expect(failure).toContain('"tier":"default"');
    expect(failure).toContain("unexpected reply");
    // the store's text in a line is cut short, and a tier is a name
    for (const line of logs.slice(seen)) expect(line.length).toBeLessThan(2_000);
    // the isolate kept no such tier for the key: limited as its registry entry says, at once
    expect(await ask(keyed, { ...fresh(), "x-api-key": "tiered-key" })).toMatchObject({ status: 200, failOpen: false });
  });

  it("a store that moves a key to another tier on every call: a failure closed when any tier it was moved through fails closed, not by the last tier's rules alone", async () => {
    // the decision sends the default tier's rules (fail closed), is told "roomy" (fail open), and
    // is told so again until it gives up: the key may be the default tier's for all it knows
    const RATE_LIMITS = rateLimits({
      fail: "open",
      identity: { header: "x-api-key", unknownKeys: "defaultTier" },
      defaultTier: "default",
      tiers: {
        default: { rules: [{ name: "per-key", limit: LIMIT, window: "10m", fail: "closed" }] },
        roomy: { rules: [{ name: "per-key", limit: LIMIT, window: "10m" }] },
      },
    });
    const answer = await withIsolate(RATE_LIMITS, (gate) =>
      during({ kind: "reply", result: [5, "roomy"] }, () => ask({ isolates: [gate] }, { ...fresh(), "x-api-key": `moving-${randomBytes(8).toString("hex")}` })),
    );
    expect(answer).toMatchObject({ status: 503, failOpen: false });
  });

  it("the store says a key is unknown to a call for a key that has a tier without the registry (unknownKeys defaultTier): a failure by the fail mode, never a 401 the isolate keeps", async () => {
    // the script answers { 3 } only for a key nobody configured with unknownKeys other than
    // "defaultTier": here every key has the default tier, so that answer is no script's
    const isolates = await Promise.all(
      (["open", "closed"] as const).map((fail) =>
        startGateIsolate({
          UPSTASH_REDIS_REST_URL: proxy.url,
          UPSTASH_REDIS_REST_TOKEN: token,
          RATE_LIMITS: rateLimits({ fail, timeout: TIMEOUT, identity: { header: "x-api-key" }, rules: [{ name: "default", limit: LIMIT, window: "10m" }] }),
        }),
      ),
    );
    const [opened, refused] = isolates.map((gate) => ({ isolates: [gate] }));
    const key = { ...fresh(), "x-api-key": "any-key" };
    try {
      proxy.set({ kind: "reply", result: [3] });
      try {
        expect(await ask(opened!, key)).toMatchObject({ status: 200, failOpen: true });
        expect(await ask(refused!, key)).toMatchObject({ status: 503, failOpen: false });
      } finally {
        proxy.set({ kind: "none" });
      }
      // nothing of that answer was kept: the key is limited at once
      expect(await ask(opened!, key)).toMatchObject({ status: 200, failOpen: false });
      expect(await ask(refused!, key)).toMatchObject({ status: 200, failOpen: false });
    } finally {
      await Promise.all(isolates.map((gate) => gate.dispose()));
    }
  });

  // the client quotes the first 200 characters of a body it cannot parse: whole, or cut inside the token
  it.each([
    ["whole", 0],
    ["cut inside the token", 200 - ECHO_PREFIX.length - "Bearer ".length - token.length / 2],
  ])("the store's error page quotes the token it was sent (%s): the fail mode holds, and no log line holds the token or part of it", async (_, pad) => {
    // an isolate of its own, so its first failures are written in full; the admin API logs its own
    const lines: string[] = [];
    const ADMIN_TOKEN = randomBytes(32).toString("hex");
    const RATE_LIMITS = rateLimits({ fail: "open", timeout: TIMEOUT, rules: [{ name: "default", limit: LIMIT, window: "10m" }] });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, (line) => lines.push(line));
    proxy.set({ kind: "echo", status: 401, pad });
    try {
      const res = await gate.dispatchFetch("http://gate.example/", { headers: fresh() });
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      expect(res.headers.get("X-Slidegate-Fail-Open")).toBe("store-unavailable");
      const usage = await gate.dispatchFetch("http://gate.example/__slidegate/usage", {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...fresh() },
        body: JSON.stringify({ ip: "203.0.113.9" }),
      });
      expect(usage.status).toBe(503);
      expect(await usage.text()).not.toContain(token.slice(0, 8));
    } finally {
      proxy.set({ kind: "none" });
      await gate.dispose();
    }
    const written = lines.filter((l) => l.includes("store_failure"));
    // both lines were written in full, the store's own words in them
    expect(written.filter((l) => l.includes(ECHO_PREFIX))).toHaveLength(2);
    for (const line of written) expect(line).not.toContain(token.slice(0, 8));
  });

  it("an admin route whose own call the store answers with an error page quoting the token: 503 store-unavailable, the store's words and the token nowhere in the answer", async () => {
    const ADMIN_TOKEN = randomBytes(32).toString("hex");
    const RATE_LIMITS = rateLimits({ identity: { header: "x-api-key" }, rules: [{ name: "default", limit: LIMIT, window: "10m" }] });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
    // the sign-in's calls (its count, by script, and the take-back) are answered: the route's own reach the error page
    proxy.set({ kind: "echo", status: 401, pad: 0 }, (call) => /^\["(evalsha|eval|zremrangebyrank)"/i.test(call));
    const routes = [
      ["usage", { ip: "203.0.113.9" }],
      ["reset", { ip: "203.0.113.9" }],
      ["unblock", { ip: "203.0.113.9" }],
      ["keys/list", {}],
    ] as const;
    try {
      for (const [route, payload] of routes) {
        const res = await adminCall(gate, ADMIN_TOKEN, route, payload, "198.51.100.79");
        const body = await res.text();
        expect([route, res.status, (JSON.parse(body) as { type?: string }).type]).toEqual([route, 503, "urn:slidegate:store-unavailable"]);
        expect(body, route).not.toContain(ECHO_PREFIX);
        expect(body, route).not.toContain(token.slice(0, 8));
      }
    } finally {
      proxy.set({ kind: "none" });
      await gate.dispose();
    }
  });

  /** Each admin route's status and problem type while the store answers `fault` to every call but the sign-in's (its count, by script, and the take-back). */
  async function adminAnswers(fault: Fault, routes: readonly (readonly [string, unknown])[]) {
    const lines: string[] = [];
    const ADMIN_TOKEN = randomBytes(32).toString("hex");
    const RATE_LIMITS = rateLimits({ identity: { header: "x-api-key" }, rules: [{ name: "default", limit: LIMIT, window: "10m" }] });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, (line) => lines.push(line));
    const answers: string[] = [];
    proxy.set(fault, (call) => /^\["(evalsha|eval|zremrangebyrank)"/i.test(call));
    try {
      for (const [route, payload] of routes) {
        const res = await adminCall(gate, ADMIN_TOKEN, route, payload, "198.51.100.77");
        const problem = (await res.json()) as { type?: string };
        answers.push(`${route} ${res.status} ${problem.type}`);
      }
    } finally {
      proxy.set({ kind: "none" });
      await gate.dispose();
    }
    return { answers, internalErrors: lines.filter((l) => l.includes("internal_error")) };
  }
  /** Every route answers 503 store-unavailable under `fault`, and none is logged as the gate's own failure. */
  async function expectStoreUnavailable(fault: Fault, routes: readonly (readonly [string, unknown])[]) {
    const { answers, internalErrors } = await adminAnswers(fault, routes);
    expect(answers).toEqual(routes.map(([route]) => `${route} 503 urn:slidegate:store-unavailable`));
    expect(internalErrors).toEqual([]);
  }

  it.each([
    ["{}", "no result"],
    ["[]", "an empty pipeline's answer"],
  ])("a store that answers %s (%s) once the operator is signed in: every admin route answers 503 store-unavailable, never a 500", async (body) => {
    const routes = [
      ["usage", { ip: "203.0.113.9" }],
      ["usage", { key: "some-key" }],
      ["block", { ip: "203.0.113.9", seconds: 60 }],
      ["unblock", { ip: "203.0.113.9" }],
      ["reset", { ip: "203.0.113.9" }],
      ["keys/get", { key: "some-key" }],
      ["keys/set", { key: "some-key", tier: "default" }],
      ["keys/delete", { key: "some-key" }],
      ["keys/list", {}],
      ["keys/import", { entries: [{ key: "other-key", tier: "default" }] }],
      ["figures", { minutes: 10 }],
    ] as const;
    await expectStoreUnavailable({ kind: "body", body }, routes);
  });

  it.each([
    ["nil", null],
    ["a string", "surprise"],
    ["a hash", { a: 1 }],
  ])("a store whose TIME answers %s: usage and block, which read the store's clock, answer 503 store-unavailable, never a 500", async (_, result) => {
    const routes = [
      ["usage", { ip: "203.0.113.9" }],
      ["usage", { key: "some-key" }],
      ["block", { ip: "203.0.113.9", seconds: 60 }],
    ] as const;
    await expectStoreUnavailable({ kind: "reply", result }, routes);
  });

  it.each([
    ["nil", null],
    ["a string", "surprise"],
    ["a number", 7],
    ["a hash", { a: 1 }],
  ])("a store that answers the registry's reads with %s: the key routes answer 503 store-unavailable, never a 500", async (_, result) => {
    // (keys/get is not here: the REST client reads an HGETALL answer that is no array as an empty hash, a 404)
    const routes = [
      ["keys/list", {}],
      ["keys/set", { key: "some-key", tier: "default" }],
      ["keys/delete", { key: "some-key" }],
      ["keys/import", { entries: [{ key: "other-key", tier: "default", overrides: {} }] }],
    ] as const;
    await expectStoreUnavailable({ kind: "reply", result }, routes);
  });

  describe("an admin change whose answer the store lost (applied, the answer cut): the isolate that served it forgets all the same", () => {
    const ADMIN_TOKEN = randomBytes(32).toString("hex");
    // the sign-in's calls reach the store and come back; the route's own lose their answers
    const signIn = (call: string) => /^\["(evalsha|eval|zremrangebyrank)"/i.test(call);
    const call = (gate: Miniflare, route: string, payload: unknown) => adminCall(gate, ADMIN_TOKEN, route, payload, "198.51.100.78");
    /** two requests of `headers` on `gate` under a limit of 1: the second's 429 is remembered for the cache's whole life */
    async function denied(gate: Miniflare, headers: Record<string, string>) {
      expect((await ask({ isolates: [gate] }, headers)).status).toBe(200);
      expect((await ask({ isolates: [gate] }, headers)).status).toBe(429);
    }

    it("a reset of an address: its next request is decided by the store, and admitted", async () => {
      const RATE_LIMITS = rateLimits({ denialCacheMaxAge: "10m", rules: [{ name: "default", limit: 1, window: "10m" }] });
      const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
      try {
        const caller = fresh();
        await denied(gate, caller);
        const reset = await during({ kind: "lost-reply" }, () => call(gate, "reset", { ip: caller["cf-connecting-ip"] }), signIn);
        await reset.arrayBuffer();
        expect(reset.status).toBe(503);
        // the reset landed: the caller's window is gone from Redis
        const tag = await identify("i", ipIdentity(caller["cf-connecting-ip"], 64));
        const direct = new Redis(redis.url);
        expect(await direct.keys(`${(JSON.parse(RATE_LIMITS) as { prefix: string }).prefix}:{${tag.tag}}:*`)).toEqual([]);
        direct.disconnect();
        expect((await ask({ isolates: [gate] }, caller)).status).toBe(200);
      } finally {
        await gate.dispose();
      }
    });

    it("an unblock of an address: its next request is decided by the store, and admitted", async () => {
      const RATE_LIMITS = rateLimits({ denialCacheMaxAge: "10m", rules: [{ name: "default", limit: 10, window: "10m" }] });
      const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
      try {
        const caller = fresh();
        const tag = await identify("i", ipIdentity(caller["cf-connecting-ip"], 64));
        const blockKey = `${(JSON.parse(RATE_LIMITS) as { prefix: string }).prefix}:{${tag.tag}}:block`;
        const direct = new Redis(redis.url);
        const block = await call(gate, "block", { ip: caller["cf-connecting-ip"], seconds: 600 });
        await block.arrayBuffer();
        expect(block.status).toBe(200);
        expect(await direct.exists(blockKey)).toBe(1);
        // the isolate now holds the block for the cache's whole life (10 m), not the store's answer
        expect((await ask({ isolates: [gate] }, caller)).status).toBe(403);
        const unblock = await during({ kind: "lost-reply" }, () => call(gate, "unblock", { ip: caller["cf-connecting-ip"] }), signIn);
        await unblock.arrayBuffer();
        expect(unblock.status).toBe(503);
        // the unblock landed: the block is gone from Redis
        expect(await direct.exists(blockKey)).toBe(0);
        direct.disconnect();
        expect((await ask({ isolates: [gate] }, caller)).status).toBe(200);
      } finally {
        await gate.dispose();
      }
    });

    it("a block the store refused outright during an outage keeps the caller's remembered 429: a failed change that only restricts loosens nothing", async () => {
      const RATE_LIMITS = rateLimits({ fail: "open", denialCacheMaxAge: "10m", rules: [{ name: "default", limit: 1, window: "10m" }] });
      const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
      try {
        const caller = fresh();
        await denied(gate, caller);
        const STORE_DOWN = { kind: "status", status: 503 } as const;
        // the operator blocks the caller as the store goes down: nothing lands
        const block = await during(STORE_DOWN, () => call(gate, "block", { ip: caller["cf-connecting-ip"], seconds: 600 }), signIn);
        await block.arrayBuffer();
        expect(block.status).toBe(503);
        // still down: the isolate's remembered denial is all that stands between the caller and a fail-open admission
        const next = await during(STORE_DOWN, () => ask({ isolates: [gate] }, caller));
        expect(next).toMatchObject({ status: 429, failOpen: false });
      } finally {
        await gate.dispose();
      }
    });

    it.each(["keys/update", "keys/set", "keys/import"])(
      "a key disabled by %s as the store goes down, nothing landed, keeps its remembered 429: a failed change that only restricts loosens nothing",
      async (route) => {
        const RATE_LIMITS = rateLimits({ fail: "open", denialCacheMaxAge: "10m", identity: { header: "x-api-key" }, rules: [{ name: "default", limit: 1, window: "10m" }] });
        const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
        try {
          const key = `leaked-${randomBytes(8).toString("hex")}`;
          await registerKey(RATE_LIMITS, key, "default");
          const caller = { ...fresh(), "x-api-key": key };
          await denied(gate, caller);
          const STORE_DOWN = { kind: "status", status: 503 } as const;
          // keys/update's write is a script, as the sign-in's calls are: spared by what it writes
          const disable = await during(
            STORE_DOWN,
            () => call(gate, route, route === "keys/import" ? { entries: [{ key, disabled: true }] } : { key, disabled: true }),
            (call) => signIn(call) && !call.includes('"disabled"'),
          );
          await disable.arrayBuffer();
          expect(disable.status).toBe(503);
          const next = await during(STORE_DOWN, () => ask({ isolates: [gate] }, caller));
          expect(next).toMatchObject({ status: 429, failOpen: false });
        } finally {
          await gate.dispose();
        }
      },
    );

    it("an import that moves a key to a roomier tier: its next request is decided by the store, and admitted", async () => {
      const RATE_LIMITS = rateLimits({
        denialCacheMaxAge: "10m",
        identity: { header: "x-api-key" },
        defaultTier: "default",
        tiers: { default: { rules: [{ name: "per-key", limit: 1, window: "10m" }] }, roomy: { rules: [{ name: "per-key", limit: 100, window: "10m" }] } },
      });
      const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS, ADMIN_TOKEN }, () => {});
      try {
        const key = `import-${randomBytes(8).toString("hex")}`;
        const caller = { ...fresh(), "x-api-key": key };
        await denied(gate, caller);
        const imported = await during({ kind: "lost-reply" }, () => call(gate, "keys/import", { entries: [{ key, tier: "roomy" }] }), signIn);
        await imported.arrayBuffer();
        expect(imported.status).toBe(503);
        expect((await ask({ isolates: [gate] }, caller)).status).toBe(200);
      } finally {
        await gate.dispose();
      }
    });
  });

  it("a store that forgot the script gets one budget for the decision, the reload included", async () => {
    // each leg 0.6 of the budget: the EVALSHA's NOSCRIPT, then the EVAL that reloads the script
    const admin = new Redis(redis.url);
    await admin.script("FLUSH");
    admin.disconnect();
    proxy.set({ kind: "slow", ms: TIMEOUT * 0.6 });
    let answer: Answer;
    try {
      answer = await ask(open, fresh());
    } finally {
      proxy.set({ kind: "none" });
    }
    expect(answer).toMatchObject({ status: 200, failOpen: true });
    await expectExactWithinASecond(performance.now());
  });

  it("a store failure whose command quotes a rule named NOSCRIPT is one call, not a reload of the script", async () => {
    // the store's error quotes the command (keys and arguments, rule names among them): only its start says NOSCRIPT
    const RATE_LIMITS = rateLimits({ fail: "closed", timeout: TIMEOUT, rules: [{ name: "NOSCRIPT", limit: LIMIT, window: "10m" }] });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => logs.push(line));
    try {
      proxy.set({ kind: "status", status: 400 });
      const faulted = proxy.faulted;
      let status: number;
      try {
        const res = await gate.dispatchFetch("http://gate.example/", { headers: fresh() });
        await res.arrayBuffer();
        status = res.status;
      } finally {
        proxy.set({ kind: "none" });
      }
      expect(status).toBe(503);
      expect(proxy.faulted - faulted).toBe(1);
    } finally {
      await gate.dispose();
    }
  });

  it.each([
    ["", {}],
    [", with address rules (decided with the tier's in that one call)", { addressRules: [{ name: "per-address", limit: LIMIT, window: "10m" }] }],
  ])("a key nobody knows, counted as its address (unknownKeys ip), gets one budget for the decision, the address's call included%s", async (_, more) => {
    // each leg 0.6 of the budget: the key's call, which finds no registry entry, then the call as its address
    const RATE_LIMITS = rateLimits({
      fail: "closed",
      timeout: TIMEOUT,
      identity: { header: "x-api-key", unknownKeys: "ip" },
      rules: [{ name: "default", limit: LIMIT, window: "10m" }],
      ...more,
    });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => logs.push(line));
    try {
      proxy.set({ kind: "slow", ms: TIMEOUT * 0.6 });
      const faulted = proxy.faulted;
      let status: number;
      try {
        const res = await gate.dispatchFetch("http://gate.example/", { headers: { ...fresh(), "x-api-key": `nobody-${randomBytes(8).toString("hex")}` } });
        await res.arrayBuffer();
        status = res.status;
      } finally {
        proxy.set({ kind: "none" });
      }
      // both legs were asked: the second one had what the first left of the budget, not a budget of its own
      expect(proxy.faulted - faulted).toBe(2);
      expect(status).toBe(503);
    } finally {
      await gate.dispose();
    }
  });

  it("Redis is stopped under traffic, then comes back", async () => {
    const answers: Answer[] = [];
    let flowing = true;
    const traffic = (async () => {
      for (let i = 0; flowing; i++) answers.push(await ask(i % 2 ? open : closed, fresh(), i));
    })();
    await new Promise((r) => setTimeout(r, 200));
    await redis.stop();
    await expectFailPolicy();
    await new Promise((r) => setTimeout(r, 300));
    await redis.start(); // empty: the restarted Redis has no script cache either
    const back = performance.now();
    flowing = false;
    await traffic;
    for (const a of answers) expect([200, 503]).toContain(a.status);
    for (const a of answers) expect(a.ms).toBeLessThan(TIMEOUT + MARGIN);
    await expectExactWithinASecond(back);
  });

  it("Redis restarts (empty script cache): the next decision reloads the script and stays exact", async () => {
    await redis.stop();
    await redis.start();
    await expectExactWithinASecond(performance.now());
  });

  it("SCRIPT FLUSH mid-window: counts survive, the script reloads, limiting stays exact", async () => {
    const who = fresh();
    const codes: number[] = [];
    for (let i = 0; i < 3; i++) codes.push((await ask(open, who, i)).status);
    const admin = new Redis(redis.url);
    await admin.script("FLUSH");
    admin.disconnect();
    for (let i = 0; i < 4; i++) codes.push((await ask(open, who, i)).status);
    expect(codes).toEqual([200, 200, 200, 200, 200, 429, 429]);
  });

  // ways a Redis takes no writes yet answers reads: each refuses the script (it may write), and
  // the reads of what refuses a caller whatever the rules still hold
  const refusingWrites = {
    "full (noeviction)": {
      refuse: (admin: Redis) => admin.config("SET", "maxmemory", "1"), // every write refused: the script, which may write, included
      restore: (admin: Redis) => admin.config("SET", "maxmemory", "0"),
    },
    // a primary a failover demoted, the shim still on it; port 1: no primary answers, so the
    // replica keeps what it holds, serving it as it stands
    "a replica (READONLY)": {
      refuse: (admin: Redis) => admin.replicaof("127.0.0.1", "1"),
      restore: (admin: Redis) => admin.replicaof("NO", "ONE"),
    },
    "short of replicas (NOREPLICAS, min-replicas-to-write)": {
      refuse: (admin: Redis) => admin.config("SET", "min-replicas-to-write", "1"),
      restore: (admin: Redis) => admin.config("SET", "min-replicas-to-write", "0"),
    },
  };

  it.each(Object.keys(refusingWrites))("a Redis %s still refuses a blocked caller, a disabled or unknown key, and follows the fail mode for the rest", async (how) => {
    const { refuse, restore } = refusingWrites[how as keyof typeof refusingWrites];
    const blocked = fresh();
    const tag = (await identify("i", ipIdentity(blocked["cf-connecting-ip"], 64))).tag;
    const admin = new Redis(redis.url);
    // two blocks: one as the admin API writes it (when it ends, on Redis's clock), one by hand (its TTL)
    const [seconds] = await admin.time();
    await admin.set(`${prefixOf.open}:{${tag}}:block`, String((Number(seconds) + 600) * 1_000_000), "PX", 600_000);
    const byHand = fresh();
    const handTag = (await identify("i", ipIdentity(byHand["cf-connecting-ip"], 64))).tag;
    await admin.set(`${prefixOf.open}:{${handTag}}:block`, "blocked by hand", "PX", 600_000);
    // API keys: one the registry disables, one it holds, and one nobody registered (refused:
    // unknownKeys "reject"); named afresh each time, as an isolate holds a key's refusal
    const entry = async (key: string) => `${prefixOf.keyed}:{${(await identify("k", key)).tag}}:key`;
    const [disabledKey, registeredKey, madeUpKey, noTierKey] = ["disabled", "registered", "made-up", "no-tier"].map((k) => `${k}-${randomBytes(6).toString("hex")}`) as [
      string,
      string,
      string,
      string,
    ];
    await admin.hset(await entry(disabledKey), { tier: "default", disabled: "1" });
    await admin.hset(await entry(registeredKey), { tier: "default" });
    // an entry whose tier a hand wrote as no tier name: none, as the script reads it
    await admin.hset(await entry(noTierKey), { tier: "", label: "by hand" });
    await refuse(admin);
    try {
      expect(await ask(open, blocked)).toMatchObject({ status: 403, failOpen: false });
      expect(await ask(open, byHand)).toMatchObject({ status: 403, failOpen: false });
      expect(await ask(open, fresh())).toMatchObject({ status: 200, failOpen: true });
      expect(await ask(closed, fresh())).toMatchObject({ status: 503, failOpen: false });
      expect(await ask(keyed, { ...fresh(), "x-api-key": disabledKey })).toMatchObject({ status: 403, failOpen: false });
      expect(await ask(keyed, { ...fresh(), "x-api-key": madeUpKey })).toMatchObject({ status: 401, failOpen: false });
      expect(await ask(keyed, { ...fresh(), "x-api-key": noTierKey })).toMatchObject({ status: 401, failOpen: false });
      expect(await ask(keyed, { ...fresh(), "x-api-key": registeredKey })).toMatchObject({ status: 200, failOpen: true });
    } finally {
      await restore(admin);
      admin.disconnect();
    }
    await expectExactWithinASecond(performance.now());
  });

  describe("one time budget for a decision made in two calls: the shortest enforced timeout of both", () => {
    // the store never answers within any budget here; a decision must end at the shortest
    // enforced timeout (1 s), not at the other call's (5 s). Wide margins: only the order of
    // magnitude is asserted.
    const NEVER = { kind: "slow", ms: 10_000 } as const;
    const SHORT = 1000;
    const LONG = 5000;
    type Budget = { fail?: "open" | "closed"; timeout: number };
    /**
     * RATE_LIMITS of API keys, failing open unless a rule says otherwise: a "default" tier and
     * others, each of one rule "per-key", and an address rule "per-address", each rule with the
     * budget given.
     */
    const keyTiers = (defaultTier: Budget, others: Record<string, Budget>, address: Budget) =>
      rateLimits({
        fail: "open",
        identity: { header: "x-api-key" },
        defaultTier: "default",
        tiers: Object.fromEntries(
          Object.entries({ default: defaultTier, ...others }).map(([tier, budget]) => [tier, { rules: [{ name: "per-key", limit: LIMIT, window: "10m", ...budget }] }]),
        ),
        addressRules: [{ name: "per-address", limit: LIMIT, window: "10m", ...address }],
      });
    const WITHIN = 3000;

    it.each([
      [
        "a key rule failing closed with the short timeout, beside an address rule with the long one",
        {
          rules: [{ name: "per-key", limit: LIMIT, window: "10m", fail: "closed", timeout: SHORT }],
          addressRules: [{ name: "per-address", limit: LIMIT, window: "10m", timeout: LONG }],
        },
      ],
      [
        "an address rule failing closed with the short timeout, beside a key rule with the long one",
        {
          rules: [{ name: "per-key", limit: LIMIT, window: "10m", timeout: LONG }],
          addressRules: [{ name: "per-address", limit: LIMIT, window: "10m", fail: "closed", timeout: SHORT }],
        },
      ],
      [
        "a key nobody knows (unknownKeys ip: its call first, then as its address), the tier's rule failing closed with the long timeout, an address rule with the short one",
        {
          identity: { header: "x-api-key", unknownKeys: "ip" },
          rules: [{ name: "per-key", limit: LIMIT, window: "10m", fail: "closed", timeout: LONG }],
          addressRules: [{ name: "per-address", limit: LIMIT, window: "10m", timeout: SHORT }],
        },
      ],
    ])("through the Worker, an API key: %s answers 503 at the short timeout", async (_, more) => {
      const RATE_LIMITS = rateLimits({ fail: "open", identity: { header: "x-api-key" }, ...more });
      const answer = await withIsolate(RATE_LIMITS, (gate) => during(NEVER, () => ask({ isolates: [gate] }, { ...fresh(), "x-api-key": `key-${randomBytes(8).toString("hex")}` })));
      expect(answer.status).toBe(503);
      expect(answer.ms).toBeLessThan(WITHIN);
    });

    it("through the Worker, an API key the registry moves, while its address's call runs, to a tier whose rule fails closed with the short timeout: 503 at the short timeout", async () => {
      // the isolate sends the default tier's rules (5 s) and its address's beside them; the
      // registry answers that the key is in "quick" (1 s), and nothing answers after that
      const RATE_LIMITS = keyTiers({ timeout: LONG }, { quick: { fail: "closed", timeout: SHORT } }, { timeout: LONG });
      const key = `moved-${randomBytes(8).toString("hex")}`;
      const keyTag = await registerKey(RATE_LIMITS, key, "quick");
      // the key's first call (in the default tier) reaches the store, which moves the key
      const spared = (body: string) => body.includes(keyTag) && body.includes(":default:");
      const answer = await withIsolate(RATE_LIMITS, (gate) => during(NEVER, () => ask({ isolates: [gate] }, { ...fresh(), "x-api-key": key }), spared));
      expect(answer.status).toBe(503);
      expect(answer.ms).toBeLessThan(WITHIN);
    });

    it("through the Worker, an API key the registry moves to a tier of a shorter timeout, its address's call unanswered at that deadline: the address rule's fail closed decides, 503", async () => {
      // the address's call went beside the key's first with the long budget; the key's calls are
      // answered (admitted, in "quick"), the address's never: the decision stops waiting at the
      // short timeout, and that failure is the address rule's, which fails closed
      const RATE_LIMITS = keyTiers({ timeout: LONG }, { quick: { timeout: SHORT } }, { fail: "closed", timeout: LONG });
      const key = `quick-${randomBytes(8).toString("hex")}`;
      const keyTag = await registerKey(RATE_LIMITS, key, "quick");
      const answer = await withIsolate(RATE_LIMITS, (gate) =>
        during(
          NEVER,
          () => ask({ isolates: [gate] }, { ...fresh(), "x-api-key": key }),
          (body) => body.includes(keyTag),
        ),
      );
      expect(answer).toMatchObject({ status: 503, failOpen: false });
      expect(answer.ms).toBeLessThan(WITHIN);
    });

    it("through the Worker, an API key the registry moves to a tier whose rules allow more time: its address's call, sent beside the key's first, has the new tier's budget", async () => {
      // the isolate takes the key for the default tier (1 s) and sends its address's call
      // beside the key's; the registry answers that the key is in "roomy" (5 s), and the
      // address's call answers after 2.5 s: well within the decision's budget as it stands
      const RATE_LIMITS = keyTiers({ timeout: SHORT }, { roomy: { timeout: LONG } }, { fail: "closed", timeout: LONG });
      const key = `roomy-${randomBytes(8).toString("hex")}`;
      await registerKey(RATE_LIMITS, key, "roomy");
      // the key's calls reach the store at once; the address's is slow
      const answer = await withIsolate(RATE_LIMITS, (gate) =>
        during(
          { kind: "slow", ms: 2500 },
          () => ask({ isolates: [gate] }, { ...fresh(), "x-api-key": key }),
          (body) => !body.includes(":@address:"),
        ),
      );
      expect(answer).toMatchObject({ status: 200, failOpen: false });
    });

    it.each([
      ["an identity of the application's own, its rule failing closed with the short timeout, beside an address rule with the long one", "user", "own"],
      ["an identity of the application's own, beside an address rule failing closed with the short timeout", "user", "address"],
      ["an API key with a cost of its own (the address's call waits for the key's), its rule failing closed with the short timeout", "key", "own"],
      ["an API key with a cost of its own, beside an address rule failing closed with the short timeout", "key", "address"],
    ] as const)("through the library: %s answers failed-closed at the short timeout", async (_, who, short) => {
      const rule = (name: string, timeout: number) => ({ name, limit: LIMIT, window: "10m", timeout, ...(timeout === SHORT ? { fail: "closed" as const } : {}) });
      const l = createRateLimiter({
        url: proxy.url,
        token,
        prefix: `bud${randomBytes(4).toString("hex")}`,
        identity: { header: "x-api-key" },
        rules: [rule("own", short === "own" ? SHORT : LONG)],
        addressRules: [rule("floor", short === "address" ? SHORT : LONG)],
      });
      const request = new Request("http://gate.example/", { headers: { ...fresh(), ...(who === "key" ? { "x-api-key": `key-${randomBytes(8).toString("hex")}` } : {}) } });
      const logged = vi.spyOn(console, "error").mockImplementation(() => {});
      proxy.set(NEVER);
      try {
        const started = performance.now();
        const result = await l.limit(request, who === "user" ? { identity: "user-1" } : { cost: 1 });
        expect(result.reason).toBe("failed-closed");
        expect(performance.now() - started).toBeLessThan(WITHIN);
      } finally {
        proxy.set({ kind: "none" });
        logged.mockRestore();
      }
    });
  });

  describe("a request matched by shadow rules alone, when the store fails: admitted, unmarked, the failure logged", () => {
    const STORE_DOWN = { kind: "status", status: 503 } as const;
    /** A request with a new API key while the store fails every call but the key's own. */
    const keyedBesideFailingAddress = async (RATE_LIMITS: string, lines: string[]) => {
      const key = `key-${randomBytes(8).toString("hex")}`;
      const keyTag = (await identify("k", key)).tag;
      return withIsolate(
        RATE_LIMITS,
        (gate) =>
          during(
            STORE_DOWN,
            async () => {
              const res = await gate.dispatchFetch("http://gate.example/", { headers: { ...fresh(), "x-api-key": key } });
              await res.arrayBuffer();
              return res;
            },
            (body) => body.includes(keyTag),
          ),
        lines,
      );
    };
    it("through the Worker, a caller known by address (its tier's and its address's shadow rules in one call)", async () => {
      const lines: string[] = [];
      const RATE_LIMITS = rateLimits({
        fail: "closed",
        rules: [{ name: "trial", limit: LIMIT, window: "10m", shadow: true }],
        addressRules: [{ name: "trial-address", limit: LIMIT, window: "10m", shadow: true, fail: "closed" }],
      });
      const { res, echoed } = await withIsolate(
        RATE_LIMITS,
        (gate) =>
          during(STORE_DOWN, async () => {
            const res = await gate.dispatchFetch("http://gate.example/", { headers: fresh() });
            return { res, echoed: (await res.json()) as { headers: Record<string, string> } };
          }),
        lines,
      );
      expect(res.status).toBe(200);
      expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
      // the request reached the origin as any admitted one does, nothing of the gate's on it
      expect(Object.keys(echoed.headers).filter((h) => h.toLowerCase().startsWith("x-slidegate"))).toEqual([]);
      expectOneShadowFailure(lines, ["trial", "trial-address"]);
    });

    it("through the Worker, an API key's admission beside a failing call for shadow address rules alone: unmarked, with the failure logged", async () => {
      const lines: string[] = [];
      const RATE_LIMITS = rateLimits({
        identity: { header: "x-api-key" },
        rules: [{ name: "per-key", limit: LIMIT, window: "10m" }],
        addressRules: [{ name: "trial-address", limit: LIMIT, window: "10m", shadow: true }],
      });
      // the key's call reaches the store; the address's fails
      const res = await keyedBesideFailingAddress(RATE_LIMITS, lines);
      expect(res.status).toBe(200);
      expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
      expect(res.headers.get("RateLimit")).toContain('"per-key"');
      expectOneShadowFailure(lines, ["trial-address"]);
    });

    it("through the Worker, the store_failure line names the shadow rules of the call that failed, not those of the call that answered", async () => {
      const lines: string[] = [];
      const RATE_LIMITS = rateLimits({
        identity: { header: "x-api-key" },
        rules: [
          { name: "per-key", limit: LIMIT, window: "10m" },
          { name: "trial-key", limit: LIMIT, window: "10m", shadow: true },
        ],
        addressRules: [{ name: "trial-address", limit: LIMIT, window: "10m", shadow: true }],
      });
      // the key's call (its shadow rule "trial-key" with it) reaches the store; the address's fails
      const res = await keyedBesideFailingAddress(RATE_LIMITS, lines);
      expect(res.status).toBe(200);
      expect(res.headers.get("X-Slidegate-Shadow")).toContain('"trial-key"');
      expectOneShadowFailure(lines, ["trial-address"]);
    });

    it("through the Worker, an API key on a full Redis (OOM), its rules all shadow or none: the registry entry and the block are read, so admitted unmarked as a caller known by address is", async () => {
      const lines: string[] = [];
      const RATE_LIMITS = rateLimits({
        fail: "closed",
        identity: { header: "x-api-key" },
        rules: [{ name: "trial", limit: LIMIT, window: "10m", shadow: true, path: "/covered" }],
      });
      const prefix = (JSON.parse(RATE_LIMITS) as { prefix: string }).prefix;
      const entry = async (key: string) => `${prefix}:{${(await identify("k", key)).tag}}:key`;
      const askPath = async (path: string, headers: Record<string, string>) => {
        const res = await gate.dispatchFetch(`http://gate.example${path}`, { headers });
        await res.arrayBuffer();
        return { status: res.status, failOpen: res.headers.has("X-Slidegate-Fail-Open") };
      };
      const admin = new Redis(redis.url);
      await admin.hset(await entry("registered-shadow-key"), { tier: "default" });
      await admin.hset(await entry("disabled-shadow-key"), { tier: "default", disabled: "1" });
      const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, (line) => lines.push(line));
      await admin.config("SET", "maxmemory", "1"); // every write refused: the script, which may write, included
      try {
        // covered by the shadow rule, and by no rule: the same answer (a shadow rule changes no outcome)
        for (const path of ["/covered", "/uncovered"]) {
          expect(await askPath(path, { ...fresh(), "x-api-key": "registered-shadow-key" }), path).toEqual({ status: 200, failOpen: false });
          expect(await askPath(path, { ...fresh(), "x-api-key": "disabled-shadow-key" }), path).toEqual({ status: 403, failOpen: false });
        }
        expect(await askPath("/covered", fresh())).toEqual({ status: 200, failOpen: false });
      } finally {
        await admin.config("SET", "maxmemory", "0");
        admin.disconnect();
        await gate.dispose();
      }
      const failures = lines.filter((l) => l.includes('"slidegate.store_failure"'));
      expect(failures.length).toBeGreaterThan(0);
      for (const line of failures) expect(line).toContain('"fail":"shadow"');
    });

    it("through the library: reason admitted, no fail-open header, a store_failure line", async () => {
      const l = createRateLimiter({
        url: proxy.url,
        token,
        prefix: `sha${randomBytes(4).toString("hex")}`,
        rules: [{ name: "trial", limit: LIMIT, window: "10m", shadow: true, fail: "closed" }],
      });
      const logged = vi.spyOn(console, "error").mockImplementation(() => {});
      proxy.set({ kind: "status", status: 503 });
      try {
        const result = await l.limit(new Request("http://gate.example/", { headers: fresh() }));
        expect(result).toMatchObject({ success: true, reason: "admitted" });
        expect(result.headers.has("X-Slidegate-Fail-Open")).toBe(false);
        const lines = logged.mock.calls.map((c) => String(c[0]));
        expect(lines).toHaveLength(1);
        expect(lines[0]).toMatch(/^\{"event":"slidegate\.store_failure","fail":"shadow"/);
      } finally {
        proxy.set({ kind: "none" });
        logged.mockRestore();
      }
    });
  });

  it("an API key's call over shadow rules alone fails as one over no rule does (the configuration's fail and timeout): a shadow rule never changes the outcome", async () => {
    // the key's call reads its registry entry whatever rules match: with fail "closed", a store
    // failure refuses a key's request that no rule covers; a shadow rule covering it must not
    // turn that refusal into an admission (nor its timeout into the call's budget)
    const RATE_LIMITS = rateLimits({
      fail: "closed",
      timeout: TIMEOUT,
      identity: { header: "x-api-key" },
      rules: [{ name: "trial", limit: LIMIT, window: "10m", path: "/covered", shadow: true, fail: "open", timeout: 8_000 }],
    });
    const gate = await startGateIsolate({ UPSTASH_REDIS_REST_URL: proxy.url, UPSTASH_REDIS_REST_TOKEN: token, RATE_LIMITS }, () => {});
    const askKeyed = async (path: string) => {
      const started = performance.now();
      const res = await gate.dispatchFetch(`http://gate.example${path}`, { headers: { ...fresh(), "x-api-key": `key-${randomBytes(8).toString("hex")}` } });
      await res.arrayBuffer();
      return { status: res.status, failOpen: res.headers.has("X-Slidegate-Fail-Open"), ms: performance.now() - started };
    };
    try {
      for (const fault of [
        { kind: "status", status: 503 },
        { kind: "slow", ms: 10_000 },
      ] as const) {
        proxy.set(fault);
        try {
          const [uncovered, covered] = [await askKeyed("/uncovered"), await askKeyed("/covered")];
          expect(uncovered, `${fault.kind}: no rule`).toMatchObject({ status: 503, failOpen: false });
          expect(covered, `${fault.kind}: a shadow rule alone`).toMatchObject({ status: 503, failOpen: false });
          expect(covered.ms, `${fault.kind}: the configuration's budget, not the shadow rule's`).toBeLessThan(TIMEOUT + MARGIN + 1000);
        } finally {
          proxy.set({ kind: "none" });
        }
      }
    } finally {
      await gate.dispose();
    }
  });

  describe("a key's request its own call refuses (a key nobody knows, a disabled key), its address rules' call failing beside it: refused as ever, the failure logged", () => {
    it.each([
      ["a key nobody knows", "unknown"],
      ["a disabled key", "disabled"],
    ] as const)('through the Worker, %s: the refusal, and one store_failure line naming the address rules, "fail":"refused"', async (_, which) => {
      const lines: string[] = [];
      const RATE_LIMITS = rateLimits({
        fail: "closed",
        identity: { header: "x-api-key", unknownKeys: "reject" },
        rules: [{ name: "per-key", limit: LIMIT, window: "10m" }],
        addressRules: [{ name: "per-address", limit: LIMIT, window: "10m" }],
      });
      const key = `${which}-${randomBytes(8).toString("hex")}`;
      if (which === "disabled") {
        const direct = new Redis(redis.url);
        await direct.hset(`${(JSON.parse(RATE_LIMITS) as { prefix: string }).prefix}:{${(await identify("k", key)).tag}}:key`, { tier: "default", disabled: "1" });
        direct.disconnect();
      }
      const keyTag = (await identify("k", key)).tag;
      const status = await withIsolate(
        RATE_LIMITS,
        (gate) =>
          during(
            { kind: "status", status: 503 },
            async () => {
              const res = await gate.dispatchFetch("http://gate.example/", { headers: { ...fresh(), "x-api-key": key } });
              await res.arrayBuffer();
              return res.status;
            },
            // the key's call reaches the store; its address's fails
            (body) => body.includes(keyTag),
          ),
        lines,
      );
      expect(status).toBe(which === "unknown" ? 401 : 403);
      const failures = lines.filter((l) => l.includes('"slidegate.store_failure"'));
      expect(failures).toHaveLength(1);
      expect(failures[0]).toContain('"fail":"refused"');
      expect(failures[0]).toContain('"rules":["per-address"]');
    });

    it('through the library, a key nobody knows: reason unknown-key, and one store_failure line naming the address rules, "fail":"refused"', async () => {
      const l = createRateLimiter({
        url: proxy.url,
        token,
        prefix: `ref${randomBytes(4).toString("hex")}`,
        identity: { header: "x-api-key", unknownKeys: "reject" },
        rules: [{ name: "per-key", limit: LIMIT, window: "10m" }],
        addressRules: [{ name: "per-address", limit: LIMIT, window: "10m" }],
      });
      const key = `unknown-${randomBytes(8).toString("hex")}`;
      const keyTag = (await identify("k", key)).tag;
      const logged = vi.spyOn(console, "error").mockImplementation(() => {});
      try {
        const result = await during(
          { kind: "status", status: 503 },
          () => l.limit(new Request("http://gate.example/", { headers: { ...fresh(), "x-api-key": key } })),
          (body) => body.includes(keyTag),
        );
        expect(result).toMatchObject({ success: false, reason: "unknown-key" });
        const lines = logged.mock.calls.map((c) => String(c[0])).filter((line) => line.includes('"slidegate.store_failure"'));
        expect(lines).toHaveLength(1);
        expect(lines[0]).toContain('"fail":"refused"');
        expect(lines[0]).toContain('"rules":["per-address"]');
      } finally {
        logged.mockRestore();
      }
    });
  });

  it("no isolate ever logged an unhandled error", () => {
    expect(logs.filter((l) => /uncaught|unhandled/i.test(l))).toEqual([]);
  });
});
