import type { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FaultProxy, startFaultProxy } from "../../scripts/lib/fault-proxy.ts";
import { identify, ipIdentity } from "../../src/decision/identity.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";
import { services } from "../helpers/shim.ts";

// Operators are in control (threat model, invariant 6): the isolate that served an admin call
// forgets at once what it cached of the identity. A decision the store made before the call,
// whose answer reaches the isolate only after it, is such a thing too. The store's answers
// pass through a proxy that holds one of them, so the order is the test's, not a timer's.

const ADMIN_TOKEN = crypto.randomUUID().replace(/-/g, "");
let proxy: FaultProxy;
let gate: Miniflare;

beforeAll(async () => {
  proxy = await startFaultProxy(services().shimUrl);
  gate = await startGateIsolate({
    UPSTASH_REDIS_REST_URL: proxy.url,
    ADMIN_TOKEN,
    RATE_LIMITS: rateLimits({
      identity: { header: "x-api-key" },
      timeout: 30_000,
      rules: [{ name: "day", limit: 1, window: "1d" }],
    }),
  });
}, 60_000);

afterAll(async () => {
  await gate?.dispose();
  await proxy?.close();
});

let next = 0;
const freshIp = () => `198.51.100.${++next}`;

/** A request's status from `on` (this file's first gate unless named). */
async function ask(headers: Record<string, string>, on: Miniflare = gate): Promise<number> {
  const res = await on.dispatchFetch("http://gate.example/", { headers });
  await res.arrayBuffer();
  return res.status;
}

/** An admin call's status from `on` (this file's first gate unless named). */
async function admin(route: string, body: unknown, on: Miniflare = gate): Promise<number> {
  const res = await on.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "cf-connecting-ip": "192.0.2.200" },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

/**
 * Holds the store's answer to the next decision script run for `tag`: the admin API's own calls
 * pass, and so does a NOSCRIPT (after another test's SCRIPT FLUSH), which the gate would follow
 * with an EVAL the store runs only after the release.
 */
const holdDecision = (tag: string) => proxy.hold((body, answer) => body.includes(tag) && /"eval(sha)?"/i.test(body) && !answer.includes("NOSCRIPT"));

describe("an operator's change on the isolate that served it", () => {
  it("holds at once, though a refusal the store decided before the reset reaches the isolate after it", async () => {
    const ip = freshIp();
    const tag = (await identify("i", ipIdentity(ip, 64))).tag;
    expect(await ask({ "cf-connecting-ip": ip })).toBe(200);
    const held = holdDecision(tag);
    const before = ask({ "cf-connecting-ip": ip });
    await held.answered; // the store has refused it: the day's one request is spent
    expect(await admin("reset", { ip })).toBe(200);
    held.release();
    expect(await before).toBe(429); // decided before the reset, and answered as decided
    expect(await ask({ "cf-connecting-ip": ip })).toBe(200);
  });

  it("holds at once, though a block the store reported before the unblock reaches the isolate after it", async () => {
    const ip = freshIp();
    const tag = (await identify("i", ipIdentity(ip, 64))).tag;
    expect(await admin("block", { ip, seconds: 600 })).toBe(200);
    const held = holdDecision(tag);
    const before = ask({ "cf-connecting-ip": ip });
    await held.answered;
    expect(await admin("unblock", { ip })).toBe(200);
    held.release();
    expect(await before).toBe(403);
    expect(await ask({ "cf-connecting-ip": ip })).toBe(200);
  });

  it("holds at once, though a key's refusal as disabled the store read before it was enabled reaches the isolate after it", async () => {
    const key = `sk-${crypto.randomUUID()}`;
    const { tag } = await identify("k", key);
    expect(await admin("keys/set", { key, disabled: true })).toBe(200);
    const held = holdDecision(tag);
    const before = ask({ "cf-connecting-ip": freshIp(), "x-api-key": key });
    await held.answered;
    expect(await admin("keys/update", { key, disabled: false })).toBe(200);
    held.release();
    expect(await before).toBe(403);
    expect(await ask({ "cf-connecting-ip": freshIp(), "x-api-key": key })).toBe(200);
  });
});

describe("a key's registry answer that reaches the isolate after the key's deletion there", () => {
  // With unknownKeys "ip" an isolate remembers the keys the registry holds, to ask their address
  // rules beside them; a key nobody knows is decided as its address in one call after the key's
  let asAddress: Miniflare;
  beforeAll(async () => {
    asAddress = await startGateIsolate({
      UPSTASH_REDIS_REST_URL: proxy.url,
      ADMIN_TOKEN,
      RATE_LIMITS: rateLimits({
        identity: { header: "x-api-key", unknownKeys: "ip" },
        timeout: 30_000,
        rules: [{ name: "day", limit: 100, window: "1d" }],
        addressRules: [{ name: "per-address", limit: 100, window: "1d" }],
      }),
    });
  }, 60_000);
  afterAll(async () => {
    await asAddress?.dispose();
  });

  const askAs = (headers: Record<string, string>) => ask(headers, asAddress);
  const adminAs = (route: string, body: unknown) => admin(route, body, asAddress);

  it("is not remembered as the registry holding it: the key's next request is decided as its address, the key's call and one more", async () => {
    const key = `sk-${crypto.randomUUID()}`;
    const { tag } = await identify("k", key);
    const headers = { "cf-connecting-ip": freshIp(), "x-api-key": key };
    expect(await adminAs("keys/set", { key, tier: "default" })).toBe(200);
    expect(await askAs(headers)).toBe(200); // the registry holds it: remembered
    const held = holdDecision(tag);
    const before = askAs(headers);
    await held.answered; // admitted while the key was registered
    expect(await adminAs("keys/delete", { key })).toBe(200);
    held.release();
    expect(await before).toBe(200);
    // every call of the next request counted (a delay of 0 ms is a fault the proxy counts)
    const counted = proxy.faulted;
    proxy.set({ kind: "slow", ms: 0 });
    try {
      expect(await askAs(headers)).toBe(200);
    } finally {
      proxy.set({ kind: "none" });
    }
    expect(proxy.faulted - counted).toBe(2);
  });
});
