import { Redis } from "@upstash/redis/cloudflare";
import { describe, expect, it } from "vitest";
import { CostError, createRateLimiter } from "../../src/adapters/library.ts";
import { makeGate, request, services, sha256Hex, statuses } from "./helpers.ts";

const ADMIN = "admin-token-for-registry-tests";
const TIERS = {
  identity: { header: "x-api-key" },
  defaultTier: "free",
  tiers: {
    free: { rules: [{ name: "minute", limit: 2, window: "1m" }] },
    paid: { rules: [{ name: "minute", limit: 5, window: "1m" }] },
  },
};
const store = new Redis({ url: services.shimUrl, token: services.shimToken, enableTelemetry: false });
const hashOf = async (key: string) => sha256Hex(new TextEncoder().encode(key));

/** Two gates on one store and prefix: two isolates of one deployment, each with caches of its own. */
function fleet(config: Record<string, unknown> = {}) {
  const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const make = () => makeGate({ ...TIERS, ...config, prefix }, { adminToken: ADMIN });
  return { a: make(), b: make(), prefix };
}
const admin = async (gate: ReturnType<typeof makeGate>, route: string, body: unknown) => {
  const res = await gate(new Request(`https://gate.example/__slidegate/${route}`, { method: "POST", body: JSON.stringify(body), headers: { authorization: `Bearer ${ADMIN}` } }));
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

/**
 * Runs `body` with `after` run once every store call has been answered, before the gate goes
 * on (given the call's JSON body): another operator's change landing between two of the gate's
 * store calls. A fetch wrapper around the real store calls.
 */
async function afterStoreCalls(after: (sent: string) => Promise<unknown>, body: () => Promise<unknown>): Promise<void> {
  const real = globalThis.fetch;
  globalThis.fetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const res = await real(input as RequestInfo, init);
    await after(typeof init?.body === "string" ? init.body : "");
    return res;
  }) as typeof fetch;
  try {
    await body();
  } finally {
    globalThis.fetch = real;
  }
}

/** `afterStoreCalls` with `meanwhile` run once, after the first call whose body `matches`; true when it ran. */
async function onceAfterStoreCall(matches: (sent: string) => boolean, meanwhile: () => Promise<unknown>, body: () => Promise<unknown>): Promise<boolean> {
  let ran = false;
  await afterStoreCalls(async (sent) => {
    if (ran || !matches(sent)) return;
    ran = true;
    await meanwhile();
  }, body);
  return ran;
}

/** Runs `body` while an operator moves `key` to the other tier (paid ↔ free) after every decision asked of it. */
async function whileMovedEveryDecision(gate: ReturnType<typeof makeGate>, prefix: string, key: string, body: () => Promise<void>) {
  const tag = ((await admin(gate, "usage", { key })).body.identity as { tag: string }).tag;
  const entry = `${prefix}:{${tag}}:key`;
  await afterStoreCalls(async (sent) => {
    if (/^\["evalsha"/i.test(sent) && sent.includes(entry)) await store.hset(entry, { tier: (await store.hget(entry, "tier")) === "paid" ? "free" : "paid" });
  }, body);
}

describe("key registry", () => {
  it("a tier change through the admin API holds from the next request, on another isolate too", async () => {
    const { a, b } = fleet();
    // b has met the key as free (2 a minute, both spent) and remembers it
    expect(await statuses(b, 2, "/", { key: "cust-1" })).toEqual([200, 200]);
    expect((await admin(a, "keys/set", { key: "cust-1", tier: "paid" })).status).toBe(200);
    // on b: the script reads the registry in the same call and says the key is paid now
    const next = await b(request("/", { key: "cust-1" }));
    expect(next.status).toBe(200);
    expect(next.headers.get("RateLimit-Policy")).toBe('"minute";q=5;w=60');
    // each tier counts in windows of its own: paid's whole quota, though free's was spent…
    expect(await statuses(b, 5, "/", { key: "cust-1" })).toEqual([200, 200, 200, 200, 429]);
    // …and free's window is where it was left, for a key moved back within it
    expect((await admin(a, "keys/set", { key: "cust-1", tier: "free" })).status).toBe(200);
    expect(await statuses(b, 1, "/", { key: "cust-1" })).toEqual([429]);
  });

  it("a tier whose name reads like a number or a word of JSON is still that tier", async () => {
    const tiers = { ...TIERS.tiers, "123": { rules: [{ name: "minute", limit: 3, window: "1m" }] }, true: { rules: [{ name: "minute", limit: 4, window: "1m" }] } };
    const { a, b } = fleet({ tiers });
    expect((await admin(a, "keys/set", { key: "numeric", tier: "123" })).status).toBe(200);
    expect((await admin(a, "keys/set", { key: "wordy", tier: "true" })).status).toBe(200);
    expect(await statuses(b, 4, "/", { key: "numeric" })).toEqual([200, 200, 200, 429]);
    expect(await statuses(b, 5, "/", { key: "wordy" })).toEqual([200, 200, 200, 200, 429]);
    expect(b.logs.filter((l) => l.level === "error")).toEqual([]);
  });

  it("an override raises one customer's limit without touching the others of its tier", async () => {
    const { a, b } = fleet();
    expect((await admin(a, "keys/set", { key: "big-customer", tier: "free", overrides: { minute: { limit: 4, window: "2m" } } })).status).toBe(200);
    const first = await b(request("/", { key: "big-customer" }));
    expect(first.headers.get("RateLimit-Policy")).toBe('"minute";q=4;w=120');
    expect(await statuses(b, 4, "/", { key: "big-customer" })).toEqual([200, 200, 200, 429]);
    expect(await statuses(b, 3, "/", { key: "small-customer" })).toEqual([200, 200, 429]);
    // cleared: back to its tier's limit (4 already used of 2)
    expect((await admin(a, "keys/override", { key: "big-customer", rule: "minute", clear: true })).status).toBe(200);
    expect(await statuses(a, 1, "/", { key: "big-customer" })).toEqual([429]);
  });

  it("a disabled key is refused with 403 everywhere, at once", async () => {
    const { a, b } = fleet();
    expect(await statuses(b, 1, "/", { key: "leaked" })).toEqual([200]);
    await admin(a, "keys/set", { key: "leaked", disabled: true });
    const res = await b(request("/", { key: "leaked" }));
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ type: "urn:slidegate:api-key-disabled" });
  });

  it('unknownKeys "reject": an invented key gets 401 and nothing is recorded in Redis', async () => {
    const { a, prefix } = fleet({ identity: { header: "x-api-key", unknownKeys: "reject" } });
    await admin(a, "keys/set", { key: "registered" });
    for (let i = 0; i < 5; i++) {
      const res = await a(request("/", { key: `invented-${crypto.randomUUID()}` }));
      expect(res.status).toBe(401);
      expect(res.headers.get("WWW-Authenticate")).toMatch(/^Bearer /);
      expect(await res.json()).toMatchObject({ type: "urn:slidegate:unknown-api-key" });
    }
    // only the registered key's entry and the index (and the admin API's own failure counter):
    // no log, no count for any invented key
    const keys = (await store.keys(`${prefix}:*`)).filter((k) => !k.includes(":@admin:"));
    expect(keys).toHaveLength(2);
    expect(keys).toContain(`${prefix}:keys`);
    expect(keys.find((k) => k !== `${prefix}:keys`)).toMatch(new RegExp(`^${prefix}:\\{k[A-Za-z0-9_-]{22}\\}:key$`));
    expect(await statuses(a, 1, "/", { key: "registered" })).toEqual([200]);
  });

  it.each(["reject", "ip", "defaultTier"] as const)(
    'usage and reset of a key nobody knows name the policy that decides it (unknownKeys "%s"), and of a configured or registered key none',
    async (unknownKeys) => {
      const { a } = fleet({ identity: { header: "x-api-key", unknownKeys }, keys: { [await hashOf("configured")]: "paid" } });
      await admin(a, "keys/set", { key: "registered", tier: "paid" });
      const invented = `invented-${crypto.randomUUID()}`;
      // a reset that deletes nothing: under "ip" what the key's requests spent is their address's
      for (const route of ["usage", "reset"]) {
        const unknown = await admin(a, route, { key: invented });
        expect(unknown.status).toBe(200);
        expect(unknown.body.unknownKey, route).toBe(unknownKeys === "defaultTier" ? undefined : unknownKeys);
        for (const key of ["configured", "registered"]) expect((await admin(a, route, { key })).body, route).not.toHaveProperty("unknownKey");
        expect((await admin(a, route, { ip: "198.51.100.63" })).body, route).not.toHaveProperty("unknownKey");
      }
    },
  );

  it.each(["reject", "ip"] as const)(
    'usage of an unregistered key on the allow or deny list names no unknownKeys policy (unknownKeys "%s"): the lists decide its requests',
    async (unknownKeys) => {
      const [allowed, denied] = [await hashOf("monitoring"), await hashOf("revoked")];
      const { a } = fleet({ identity: { header: "x-api-key", unknownKeys }, allow: { keys: [allowed] }, deny: { keys: [denied] } });
      // the gate's own answers: the lists come before the key's registry entry
      expect(await statuses(a, 1, "/", { key: "monitoring" })).toEqual([200]);
      expect(await statuses(a, 1, "/", { key: "revoked" })).toEqual([403]);
      for (const key of ["monitoring", "revoked"]) {
        const usage = await admin(a, "usage", { key });
        expect(usage.status).toBe(200);
        expect(usage.body).not.toHaveProperty("unknownKey");
      }
    },
  );

  it('unknownKeys "ip": invented keys are limited as their client address', async () => {
    const { a } = fleet({ identity: { header: "x-api-key", unknownKeys: "ip" } });
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await a(request("/", { key: `invented-${i}`, ip: "198.51.100.61" }))).status);
    expect(codes).toEqual([200, 200, 429, 429]);
    expect(await statuses(a, 1, "/", { key: "invented-x", ip: "198.51.100.62" })).toEqual([200]);
  });

  it('unknownKeys "ip" with address rules: a configured key and a registered one keep their own rules and the address floor; a key the registry drops is its address', async () => {
    const hour = (limit: number) => ({ rules: [{ name: "hour", limit, window: "1h" }] });
    const { a, b } = fleet({
      identity: { header: "x-api-key", unknownKeys: "ip" },
      tiers: { free: hour(2), paid: hour(5) },
      keys: { [await hashOf("configured")]: "paid", [await hashOf("configured-2")]: "paid" },
      addressRules: [{ name: "per-address", limit: 4, window: "1h" }],
    });
    for (const key of ["registered", "registered-2"]) expect((await admin(a, "keys/set", { key, tier: "paid" })).status).toBe(200);
    const seen = async (key: string | undefined, ip: string) => {
      const res = await b(request("/", { key, ip }));
      await res.body?.cancel();
      return { status: res.status, policy: res.headers.get("RateLimit-Policy"), rateLimit: res.headers.get("RateLimit") };
    };
    // b has met neither key: each is held to its own tier (paid, 5), from an address of its own each time
    for (const [k, key] of ["configured", "registered"].entries()) {
      const answers = [];
      for (let i = 0; i < 6; i++) answers.push(await seen(key, `198.51.100.${110 + 10 * k + i}`));
      expect(answers.map((x) => x.status)).toEqual([200, 200, 200, 200, 200, 429]);
      expect(answers[0]!.policy).toBe('"hour";q=5;w=3600, "per-address";q=4;w=3600');
      expect(answers[5]!.rateLimit).toMatch(/^"hour";r=0;t=\d+, "per-address";r=3;t=\d+$/);
    }
    // and to the address floor: 4 from one address, whatever the keys, then none
    const ip = "2001:db8:3a::1";
    const codes = [];
    for (const key of ["configured-2", "registered-2", "configured-2", "registered-2"]) codes.push((await seen(key, ip)).status);
    expect(codes).toEqual([200, 200, 200, 200]);
    for (const key of ["configured-2", "registered-2", "invented", undefined]) {
      const refused = await seen(key, ip);
      expect(refused.status).toBe(429);
      expect(refused.rateLimit).toMatch(/"per-address";r=0;t=\d+/);
    }
    // a key b has seen the registry hold, deleted meanwhile (b is not told): decided as its
    // address (the default tier's 2 and the address rule), at once and after
    const other = "2001:db8:3b::1";
    expect((await admin(a, "keys/delete", { key: "registered-2" })).status).toBe(200);
    const dropped = [await seen("registered-2", other), await seen("registered-2", other), await seen("registered-2", other)];
    expect(dropped.map((x) => x.status)).toEqual([200, 200, 429]);
    expect(dropped[0]!.policy).toBe('"hour";q=2;w=3600, "per-address";q=4;w=3600');
    expect(dropped[2]!.rateLimit).toMatch(/^"hour";r=0;t=\d+, "per-address";r=2;t=\d+$/);
  });

  it("the address rules stop a client that rotates keys at their limit", async () => {
    const { a } = fleet({ addressRules: [{ name: "per-address", limit: 3, window: "1m" }] });
    const codes = [];
    for (let i = 0; i < 6; i++) codes.push((await a(request("/", { key: `rotating-${i}`, ip: "2001:db8:77::1" }))).status);
    expect(codes).toEqual([200, 200, 200, 429, 429, 429]);
    // another address of the same /64 is the same caller
    expect(await statuses(a, 1, "/", { key: "rotating-x", ip: "2001:db8:77::ffff" })).toEqual([429]);
    expect(await statuses(a, 1, "/", { key: "rotating-y", ip: "2001:db8:78::1" })).toEqual([200]);
  });

  it("an address rule with methods and a path limits only the requests it names, for keys and addresses alike", async () => {
    const { a } = fleet({ addressRules: [{ name: "login", limit: 2, window: "1m", methods: ["POST"], path: "/login" }] });
    const ip = "198.51.100.71";
    const login = (key?: string) => ({ ip, method: "POST", key });
    // rotating keys on the named route stop at the address rule's limit
    expect([...(await statuses(a, 1, "/login", login("k-1"))), ...(await statuses(a, 1, "/login", login("k-2"))), ...(await statuses(a, 1, "/login", login("k-3")))]).toEqual([
      200, 200, 429,
    ]);
    // other methods and paths from the same address answer only to their key's rules
    expect(await statuses(a, 1, "/login", { ip, key: "k-4" })).toEqual([200]);
    expect(await statuses(a, 1, "/other", login("k-5"))).toEqual([200]);
    // a caller without a key is held to the same address rule
    expect(await statuses(a, 1, "/login", login())).toEqual([429]);
    expect(await statuses(a, 1, "/other", login())).toEqual([200]);
  });

  it("a denial of a caller's rule is never the answer to a request only its address rule of the same name covers: the two count apart", async () => {
    const gate = makeGate({
      rules: [{ name: "minute", limit: 1, window: "1m", path: "/a/*" }],
      addressRules: [{ name: "minute", limit: 5, window: "1m", path: "/b/*" }],
    });
    const ip = "198.51.100.72";
    expect(await statuses(gate, 2, "/a/1", { ip })).toEqual([200, 429]);
    const other = await gate(request("/b/1", { ip }));
    await other.body?.cancel();
    expect({ status: other.status, remaining: other.headers.get("X-RateLimit-Remaining") }).toEqual({ status: 200, remaining: "4" });
  });

  /**
   * A gate on the edge clock whose address rule `ip` spent 50 minutes ago, with key "first" (its
   * cached denial of the address has 10 of its 60 minutes left), and "first" its own two-hour rule.
   */
  async function spentAddress(ip: string) {
    const { gate, clock } = twoHourGate();
    expect(await statuses(gate, 1, "/", { key: "first", ip })).toEqual([200]);
    clock.now += 1000;
    // the address is spent: this denial of the address is cached for its whole wait
    expect(await statuses(gate, 1, "/", { key: "second", ip })).toEqual([429]);
    clock.now += 50 * 60_000 - 1000;
    return gate;
  }

  /** A gate on a clock of the test's own (edge clock, denials cached up to an hour): one request per key in two hours, one per address in one. */
  function twoHourGate() {
    const clock = { now: 1_800_000_000_000 };
    const gate = makeGate(
      {
        clock: "edge",
        denialCacheMaxAge: "1h",
        identity: { header: "x-api-key" },
        defaultTier: "slow",
        tiers: { slow: { rules: [{ name: "twohours", limit: 1, window: "2h" }] } },
        addressRules: [{ name: "per-address", limit: 1, window: "1h" }],
      },
      { now: () => clock.now },
    );
    return { gate, clock };
  }

  // "first" is denied afresh by its own two-hour rule, 70 minutes from now; "third" fits its own
  // rule, and the address's cached denial has 10 of its 60 minutes left
  it.each([
    ["ages only the cached side when a fresh key denial meets a cached address denial: Retry-After is the key's whole wait", "198.51.100.84", "first", 70],
    ["a fresh key that meets a cached address denial waits what is left of the address's wait, not all of it", "198.51.100.85", "third", 10],
  ] as const)("%s", async (_behaviour, ip, key, minutes) => {
    const gate = await spentAddress(ip);
    const res = await gate(request("/", { key, ip }));
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe(String(minutes * 60));
  });

  it("a key over its own limit and its address's, both denials cached at different times, answers each side's wait as of now, request after request", async () => {
    const minute = 60_000;
    const { gate, clock } = twoHourGate();
    const ip = "198.51.100.86";
    const answerOf = async (key: string) => {
      const res = await gate(request("/", { key, ip }));
      await res.body?.cancel();
      return [res.status, res.headers.get("retry-after"), res.headers.get("ratelimit")];
    };
    expect((await answerOf("cached-both"))[0]).toBe(200);
    // the address's denial is cached now, the key's 5 minutes later: each ages from its own start
    clock.now += 1000;
    expect((await answerOf("cached-other"))[0]).toBe(429);
    clock.now += 5 * minute - 1000;
    expect(await answerOf("cached-both")).toEqual([429, String(115 * 60), `"twohours";r=0;t=${115 * 60}, "per-address";r=0;t=${55 * 60}`]);
    // from here both sides come from the isolate's caches, the same two decisions each time
    for (const [later, key, address] of [
      [10, 105, 45],
      [0, 105, 45],
      [20, 85, 25],
      [1, 84, 24],
    ] as const) {
      clock.now += later * minute;
      expect(await answerOf("cached-both"), `${later} minutes on`).toEqual([429, String(key * 60), `"twohours";r=0;t=${key * 60}, "per-address";r=0;t=${address * 60}`]);
    }
  });

  it("an operator sees an address's address rules in usage, and a reset clears them", async () => {
    const { a } = fleet({ addressRules: [{ name: "per-address", limit: 2, window: "1m" }] });
    const ip = "198.51.100.81";
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await a(request("/", { key: `reset-${i}`, ip }))).status);
    expect(codes).toEqual([200, 200, 429]);
    const usage = await admin(a, "usage", { ip });
    expect(usage.body.addressRules).toEqual([expect.objectContaining({ name: "per-address", limit: 2, used: 2, remaining: 0 })]);
    expect((await admin(a, "reset", { ip })).status).toBe(200);
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 0, remaining: 2 })]);
    expect(await statuses(a, 1, "/", { key: "reset-x", ip })).toEqual([200]);
  });

  it("refuses an override whose limit is below its rule's cost, which no request would ever fit", async () => {
    const { a } = fleet({ tiers: { ...TIERS.tiers, heavy: { rules: [{ name: "tokens", limit: 100, window: "1m", cost: 5 }] } } });
    const bad = await admin(a, "keys/set", { key: "heavy-user", tier: "heavy", overrides: { tokens: { limit: 4 } } });
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toMatch(/^overrides\.tokens\.limit: 4 is below the rule's cost \(5\): no request would ever fit/);
    expect((await admin(a, "keys/get", { key: "heavy-user" })).status).toBe(404);
    expect((await admin(a, "keys/set", { key: "heavy-user", tier: "heavy", overrides: { tokens: { limit: 5 } } })).status).toBe(200);
  });

  it("refuses an override of a rule named like what every object has, as a bad request rather than a store failure", async () => {
    const { a } = fleet();
    // JSON.parse keeps "__proto__" as an own key, as a client's body arrives
    const set = await admin(a, "keys/set", JSON.parse('{"key":"proto-user","tier":"paid","overrides":{"__proto__":{"limit":5}}}'));
    expect(set.status).toBe(400);
    expect(set.body.detail).toMatch(/^overrides\.__proto__: "__proto__" is a name every JavaScript object already has/);
    expect((await admin(a, "keys/set", { key: "proto-user", tier: "paid" })).status).toBe(200);
    for (const rule of ["__proto__", "constructor", "toString"]) {
      const res = await admin(a, "keys/override", { key: "proto-user", rule, limit: 5 });
      expect(res.status, rule).toBe(400);
    }
    expect((await admin(a, "keys/get", { key: "proto-user" })).body).toMatchObject({ tier: "paid", overrides: {} });
  });

  it('names each bad field as the caller sent it, without a leading dot; an override\'s rule as "rule"', async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "named", tier: "gold" })).body.detail).toMatch(/^tier: "gold" is not a tier \(tiers: free, paid\)$/);
    expect((await admin(a, "keys/set", { key: "named", tier: "Paid" })).body.detail).toBe('tier: "Paid" is not a tier (tiers: free, paid); did you mean "paid"?');
    expect((await admin(a, "keys/override", { key: "named", rule: "minutes", limit: 5 })).body.detail).toMatch(
      /^rule: "minutes" is not a rule \(rules: minute\); did you mean "minute"\?$/,
    );
    expect((await admin(a, "keys/set", { key: "named", tier: "paid" })).status).toBe(200);
    expect((await admin(a, "keys/override", { key: "named", rule: "nope", limit: 5 })).body.detail).toMatch(/^rule: "nope" is not a rule \(rules: minute\)$/);
    expect((await admin(a, "keys/override", { key: "named", rule: "minute", limit: 0 })).body.detail).toMatch(/^limit: must be at least 1/);
    expect((await admin(a, "keys/override", { key: "named", rule: "minute" })).body.detail).toBe('give "limit", "window" or both, or "clear": true');
    // inside an import the entry is the root, as before
    expect((await admin(a, "keys/import", { entries: [{ key: "named", tier: "gold" }] })).body.detail).toMatch(/entries\[0\]\.tier: "gold" is not a tier/);
  });

  it("refuses an override that asks to clear a rule and to set it at once, naming the fields, and changes nothing", async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "clear-and-set", tier: "free", overrides: { minute: { limit: 4 } } })).status).toBe(200);
    for (const body of [{ limit: 500 }, { window: "2m" }, { windowMs: 120_000 }, { limit: 500, window: "2m" }]) {
      const res = await admin(a, "keys/override", { key: "clear-and-set", rule: "minute", clear: true, ...body });
      expect([res.status, res.body.detail]).toEqual([
        400,
        expect.stringMatching(/^"clear": true drops the rule's override: give it alone, or "limit", "window" \(or "windowMs"\) without it/),
      ]);
    }
    // a "clear" of another type than true or false is refused too, not taken for a change of the limit
    const typed = await admin(a, "keys/override", { key: "clear-and-set", rule: "minute", clear: "true", limit: 500 });
    expect([typed.status, typed.body.detail]).toEqual([400, '"clear" must be true or false (true: drop the rule\'s override)']);
    expect((await admin(a, "keys/get", { key: "clear-and-set" })).body.overrides).toEqual({ minute: { limit: 4 } });
  });

  it("refuses to clear an override of a rule no tier has and the key holds none of (a misspelt rule), leaving the real one; a dropped rule's it clears", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const withBurst = { ...TIERS, prefix, tiers: { ...TIERS.tiers, free: { rules: [...TIERS.tiers.free.rules, { name: "burst", limit: 3, window: "10s" }] } } };
    const before = makeGate(withBurst, { adminToken: ADMIN });
    expect((await admin(before, "keys/set", { key: "sk-typo-clear", overrides: { minute: { limit: 4 }, burst: { limit: 500 } } })).status).toBe(200);
    // the configuration loses "burst"
    const a = makeGate({ ...TIERS, prefix }, { adminToken: ADMIN });
    const typo = await admin(a, "keys/override", { key: "sk-typo-clear", rule: "minut", clear: true });
    expect([typo.status, typo.body.detail]).toEqual([400, 'rule: "minut" is not a rule (rules: minute), and the key holds no override of it; did you mean "minute"?']);
    expect((await admin(a, "keys/get", { key: "sk-typo-clear" })).body.overrides).toEqual({ minute: { limit: 4 }, burst: { limit: 500 } });
    // an override of a rule since dropped is still there to clear (it would come back live with its rule)
    expect((await admin(a, "keys/override", { key: "sk-typo-clear", rule: "burst", clear: true })).body).toEqual({ cleared: "burst" });
    const after = makeGate(withBurst, { adminToken: ADMIN });
    expect((await admin(after, "keys/get", { key: "sk-typo-clear" })).body.overrides).toEqual({ minute: { limit: 4 } });
    // clearing a configured rule the key holds no override of stays a harmless success, as before
    expect((await admin(a, "keys/override", { key: "sk-typo-clear", rule: "minute", clear: true })).body).toEqual({ cleared: "minute" });
    expect((await admin(a, "keys/override", { key: "sk-typo-clear", rule: "minute", clear: true })).body).toEqual({ cleared: "minute" });
    // a key with no entry is still a 404, whatever the rule
    expect((await admin(a, "keys/override", { key: "sk-nobody", rule: "minut", clear: true })).status).toBe(404);
  });

  it("takes a hash in upper-case hex, and stores and answers it in lower case, the one key it names", async () => {
    const { a } = fleet();
    const hash = await hashOf("upper-case");
    const set = await admin(a, "keys/set", { hash: hash.toUpperCase(), tier: "paid" });
    expect(set.status).toBe(200);
    expect(set.body.hash).toBe(hash);
    expect((await admin(a, "keys/get", { key: "upper-case" })).body).toMatchObject({ hash, tier: "paid" });
    expect((await admin(a, "keys/get", { hash: hash.toUpperCase() })).body).toMatchObject({ hash, tier: "paid" });
    expect((await admin(a, "keys/list", {})).body.entries).toEqual([expect.objectContaining({ hash })]);
    const byUpper = (await admin(a, "usage", { hash: hash.toUpperCase() })).body.identity;
    expect(byUpper).toEqual((await admin(a, "usage", { key: "upper-case" })).body.identity);
    expect((await admin(a, "keys/import", { entries: [{ hash: hash.toUpperCase() }, { key: "upper-case" }] })).body.detail).toMatch(
      /entries\[1\]: names the same key as entries\[0\]/,
    );
  });

  it("answers an entry with its fields in one order, from keys/set, keys/get and keys/list alike", async () => {
    const { a } = fleet();
    const set = (await admin(a, "keys/set", { key: "ordered", tier: "paid", label: "Acme", disabled: true, overrides: { minute: { limit: 9 } } })).body;
    const got = (await admin(a, "keys/get", { key: "ordered" })).body;
    const listed = ((await admin(a, "keys/list", {})).body.entries as Record<string, unknown>[])[0]!;
    expect(Object.keys(set)).toEqual(["hash", "tier", "label", "disabled", "overrides"]);
    expect(Object.keys(got)).toEqual(Object.keys(set));
    expect(Object.keys(listed)).toEqual(Object.keys(set));
    expect(got).toEqual(set);
  });

  it("stores an entry as the fields the decision reads and nothing more: no copy of the key's hash, which every decision would read", async () => {
    const { a, prefix } = fleet();
    expect((await admin(a, "keys/set", { key: "lean", tier: "paid", overrides: { minute: { limit: 9 } } })).status).toBe(200);
    // a bare key in an import: the default tier, and no other field to write
    expect((await admin(a, "keys/import", { entries: [{ key: "bare" }] })).body).toEqual({ imported: 1 });
    const entryOf = async (key: string) => store.hgetall(`${prefix}:{${((await admin(a, "usage", { key })).body.identity as { tag: string }).tag}}:key`);
    expect(await entryOf("lean")).toEqual({ tier: "paid", "limit:minute": 9 });
    expect(await entryOf("bare")).toEqual({ tier: "free" });
    // the key's hash stays where the list reads it
    const hashes = ((await admin(a, "keys/list", {})).body.entries as { hash: string }[]).map((e) => e.hash).sort();
    expect(hashes).toEqual([await hashOf("bare"), await hashOf("lean")].sort());
  });

  it("keys/update changes the fields it is given of an entry that exists and keeps the rest; a key with no entry stays without one", async () => {
    const { a, b } = fleet();
    await admin(a, "keys/set", { key: "sk-upd", tier: "free", label: "Acme", overrides: { minute: { limit: 9 } } });
    const disabled = await admin(a, "keys/update", { key: "sk-upd", disabled: true });
    expect(disabled).toEqual({ status: 200, body: { hash: await hashOf("sk-upd"), tier: "free", label: "Acme", disabled: true, overrides: { minute: { limit: 9 } } } });
    expect((await b(request("/", { key: "sk-upd" }))).status).toBe(403);
    expect((await admin(a, "keys/update", { key: "sk-upd", tier: "paid", disabled: false })).body).toMatchObject({
      tier: "paid",
      label: "Acme",
      disabled: false,
      overrides: { minute: { limit: 9 } },
    });
    // the isolate that served the change knows at once (b, which refused the key, within denialCacheMaxAge)
    expect((await a(request("/", { key: "sk-upd" }))).status).toBe(200);
    // no entry: 404, and none is made (a revoked key is not brought back)
    expect(await admin(a, "keys/update", { key: "sk-none", disabled: false })).toMatchObject({ status: 404, body: { type: "urn:slidegate:no-such-key" } });
    expect((await admin(a, "keys/get", { key: "sk-none" })).status).toBe(404);
    expect(((await admin(a, "keys/list", {})).body.entries as unknown[]).length).toBe(1);
    // what it cannot change, or nothing at all, is named
    expect((await admin(a, "keys/update", { key: "sk-upd", tier: "gold" })).body.detail).toMatch(/^tier: "gold" is not a tier/);
    expect((await admin(a, "keys/update", { key: "sk-upd", overrides: {} })).body.detail).toMatch(/"overrides"/);
    expect((await admin(a, "keys/update", { key: "sk-upd" })).body.detail).toMatch(/at least one of "tier", "label" and "disabled"/);
    expect((await admin(a, "keys/get", { key: "sk-upd" })).body).toMatchObject({ tier: "paid", label: "Acme", disabled: false });
  });

  it('an empty label is no label: keys/set, keys/update and keys/import with label "" leave the entry without one', async () => {
    const { a, prefix } = fleet();
    const fieldsOf = async (key: string) => store.hgetall(`${prefix}:{${((await admin(a, "usage", { key })).body.identity as { tag: string }).tag}}:key`);
    expect((await admin(a, "keys/set", { key: "sk-blank", tier: "paid", label: "" })).body).toEqual({
      hash: await hashOf("sk-blank"),
      tier: "paid",
      disabled: false,
      overrides: {},
    });
    expect(await fieldsOf("sk-blank")).toEqual({ tier: "paid" });
    // clearing a label through keys/update (the CLI's `label <key> ""`) drops it, the rest kept
    await admin(a, "keys/set", { key: "sk-named", tier: "paid", label: "Acme", disabled: true });
    expect((await admin(a, "keys/update", { key: "sk-named", label: "" })).body).toEqual({ hash: await hashOf("sk-named"), tier: "paid", disabled: true, overrides: {} });
    expect(await fieldsOf("sk-named")).toEqual({ tier: "paid", disabled: 1 });
    // likewise an import that gives the label empty
    await admin(a, "keys/update", { key: "sk-named", label: "Acme" });
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-named", label: "" }] })).body).toEqual({ imported: 1 });
    expect(await fieldsOf("sk-named")).toEqual({ tier: "paid", disabled: 1 });
    // a label of spaces alone is none too
    await admin(a, "keys/update", { key: "sk-named", label: "Acme" });
    expect((await admin(a, "keys/update", { key: "sk-named", label: "   " })).body).not.toHaveProperty("label");
    expect(await fieldsOf("sk-named")).toEqual({ tier: "paid", disabled: 1 });
    expect((await admin(a, "keys/get", { key: "sk-named" })).body).toEqual({ hash: await hashOf("sk-named"), tier: "paid", disabled: true, overrides: {} });
  });

  it("refuses to register a blank key, or one with a comma, which no request could ever use", async () => {
    const { a } = fleet();
    for (const key of ["   ", "a,b"]) {
      const res = await admin(a, "keys/set", { key, tier: "paid" });
      expect(res.status, JSON.stringify(key)).toBe(400);
      expect(res.body.detail).toMatch(/^"key" (is blank|holds a comma)/);
    }
  });

  it("refuses a key with a line break or a NUL inside, which no request's header can carry: a registration, a block or an import of it would hold nothing", async () => {
    const { a } = fleet();
    for (const key of ["sk-live-1\nsk-live-2", "sk-live-1\r\nx", "sk-a\u0000b"]) {
      for (const [route, body] of [
        ["keys/set", { key, tier: "paid" }],
        ["block", { key, seconds: 60 }],
        ["keys/import", { entries: [{ key, tier: "paid" }] }],
      ] as const) {
        const res = await admin(a, route, body);
        expect(res.status, `${route} ${JSON.stringify(key)}`).toBe(400);
        expect(res.body.detail).toMatch(/"key" holds a line break or a NUL/);
      }
    }
    // at either end they are no part of the key, as on a request: the key it pads
    expect((await admin(a, "keys/set", { key: "sk-padded\n", tier: "paid" })).status).toBe(200);
    expect((await admin(a, "keys/get", { key: "sk-padded" })).body).toMatchObject({ tier: "paid" });
    expect((await admin(a, "keys/list", { limit: 1000 })).body.entries).toHaveLength(1);
  });

  it("resets a key whose registry tier the configuration no longer has (counted by the default tier's rules)", async () => {
    const { a, prefix } = fleet();
    expect((await admin(a, "keys/set", { key: "gone-tier", tier: "paid" })).status).toBe(200);
    expect(await statuses(a, 5, "/", { key: "gone-tier" })).toEqual([200, 200, 200, 200, 200]);
    // a later deployment drops the "paid" tier: the key is held to the default tier's 2 a minute
    const later = makeGate({ ...TIERS, tiers: { free: TIERS.tiers.free }, prefix }, { adminToken: ADMIN });
    expect(await statuses(later, 1, "/", { key: "gone-tier" })).toEqual([429]);
    expect((await admin(later, "reset", { key: "gone-tier" })).body).toMatchObject({ reset: true, keysDeleted: 1 });
    expect(await statuses(later, 3, "/", { key: "gone-tier" })).toEqual([200, 200, 429]);
  });

  it("names the rule in the 429 of a key whose own limit a later configuration's cost exceeds", async () => {
    const { a, prefix } = fleet({ tiers: { free: { rules: [{ name: "tokens", limit: 100, window: "1m" }] } } });
    expect((await admin(a, "keys/set", { key: "small-limit", tier: "free", overrides: { tokens: { limit: 2 } } })).status).toBe(200);
    // a later deployment weighs every request 5: more than this key's own limit of 2 admits
    const later = makeGate({ ...TIERS, tiers: { free: { rules: [{ name: "tokens", limit: 100, window: "1m", cost: 5 }] } }, prefix }, { adminToken: ADMIN });
    const denied = await later(request("/", { key: "small-limit" }));
    expect(denied.status).toBe(429);
    expect(((await denied.json()) as { detail: string }).detail).toBe('Rate limit "tokens" exceeded; this request weighs more than "tokens" admits in a whole window.');
  });

  it("records a library caller's cost nowhere when the tier the registry moves its key to refuses it, address rules included", async () => {
    const config = { tiers: { ...TIERS.tiers, paid: { rules: [{ name: "minute", limit: 10, window: "1m" }] } }, addressRules: [{ name: "per-address", limit: 20, window: "1m" }] };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    const ip = "198.51.100.81";
    // the library meets the key as the default tier (2 a minute), which the registry moved it from
    expect((await admin(a, "keys/set", { key: "weighed", tier: "paid" })).status).toBe(200);
    expect((await limiter.limit(request("/", { key: "weighed", ip }), { cost: 2 })).reason).toBe("admitted");
    // now the library knows the key as paid: 10 fits it; the registry has just moved it back to free
    expect((await admin(a, "keys/set", { key: "weighed", tier: "free" })).status).toBe(200);
    await expect(limiter.limit(request("/", { key: "weighed", ip }), { cost: 10 })).rejects.toThrow(CostError);
    // only the first request's cost of 2 is on the address, none of the refused 10
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 2 })]);
    expect((await admin(a, "usage", { key: "weighed" })).body.rules).toEqual([expect.objectContaining({ name: "minute", used: 0 })]);
  });

  it('counts a library caller\'s invented keys with a cost on the address rules under unknownKeys "reject": rotating keys buys no fresh address quota', async () => {
    const config = { identity: { header: "x-api-key", unknownKeys: "reject" as const }, addressRules: [{ name: "per-address", limit: 3, window: "1m" }] };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    const ip = "198.51.100.83";
    for (let i = 0; i < 3; i++) expect((await limiter.limit(request("/", { key: `invented-${i}`, ip }), { cost: 1 })).reason).toBe("unknown-key");
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 3 })]);
    // the address has spent its rule: the caller without a key is refused too
    expect((await limiter.limit(request("/", { ip }), { cost: 1 })).reason).toBe("rate-limited");
  });

  it('decides a library caller\'s invented keys with a cost under unknownKeys "ip" as their address: tier and address rules all-or-nothing, a cost above either refused before anything is recorded', async () => {
    const config = {
      identity: { header: "x-api-key", unknownKeys: "ip" as const },
      tiers: { free: { rules: [{ name: "tokens", limit: 3, window: "1h" }] } },
      addressRules: [{ name: "per-address", limit: 5, window: "1h" }],
    };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    const ip = "198.51.100.85";
    const invented = () => request("/", { key: `invented-${crypto.randomUUID()}`, ip });
    // above the default tier's 3: refused, recorded nowhere
    await expect(limiter.limit(invented(), { cost: 4 })).rejects.toThrow(CostError);
    expect(await limiter.limit(invented(), { cost: 2 })).toMatchObject({ success: true, reason: "admitted" });
    // 2 more do not fit the tier's 3: refused, and not counted by the address rule either
    expect(await limiter.limit(invented(), { cost: 2 })).toMatchObject({ success: false, reason: "rate-limited" });
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 2 })]);
    // as a caller without a key from that address is: one bucket
    expect(await limiter.limit(request("/", { ip }), { cost: 1 })).toMatchObject({ success: true, reason: "admitted" });
    expect(await limiter.limit(invented(), { cost: 1 })).toMatchObject({ success: false, reason: "rate-limited" });
  });

  it("counts a library caller's disabled key with a cost on the address rules: a disabled key buys no fresh address quota", async () => {
    const config = { addressRules: [{ name: "per-address", limit: 2, window: "1m" }] };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    const ip = "198.51.100.84";
    expect((await admin(a, "keys/set", { key: "switched-off", tier: "free", disabled: true })).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await limiter.limit(request("/", { key: "switched-off", ip }), { cost: 1 })).reason).toBe("disabled-key");
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 2 })]);
  });

  it("holds a library caller's cost to its key's own limit: an override raises it, a cost above it is refused and recorded nowhere", async () => {
    const config = { tiers: { free: { rules: [{ name: "tokens", limit: 10, window: "1m" }] } }, addressRules: [{ name: "per-address", limit: 1000, window: "1m" }] };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    const ip = "198.51.100.82";
    expect((await admin(a, "keys/set", { key: "big", tier: "free", overrides: { tokens: { limit: 100 } } })).status).toBe(200);
    // 40 is more than the configured 10, and within this key's own 100
    const admitted = await limiter.limit(request("/", { key: "big", ip }), { cost: 40 });
    expect(admitted).toMatchObject({ success: true, reason: "admitted" });
    expect(admitted.decision?.limits).toEqual([
      expect.objectContaining({ name: "tokens", limit: 100, remaining: 60 }),
      expect.objectContaining({ name: "per-address", limit: 1000, remaining: 960 }),
    ]);
    await expect(limiter.limit(request("/", { key: "big", ip }), { cost: 101 })).rejects.toThrow(/from 1 to 100 \(the limit of "tokens" for this key\), not 101/);
    // a key with no override is held to the configured 10
    await expect(limiter.limit(request("/", { key: "small", ip }), { cost: 11 })).rejects.toThrow(CostError);
    // only the admitted 40 is counted, for the key and for the address
    expect((await admin(a, "usage", { key: "big" })).body.rules).toEqual([expect.objectContaining({ name: "tokens", used: 40 })]);
    expect((await admin(a, "usage", { key: "small" })).body.rules).toEqual([expect.objectContaining({ name: "tokens", used: 0 })]);
    expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 40 })]);
  });

  it("holds a key's cost to its tier's shadow rules as configured, before anything is recorded", async () => {
    const config = {
      tiers: {
        free: {
          rules: [
            { name: "minute", limit: 50, window: "1m" },
            { name: "burst", limit: 5, window: "1s", shadow: true },
          ],
        },
        paid: { rules: [{ name: "minute", limit: 50, window: "1m" }] },
      },
    };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    await expect(limiter.limit(request("/", { key: "shadowed" }), { cost: 10 })).rejects.toThrow(/from 1 to 5 \(the limit of "burst"\), not 10/);
    expect((await admin(a, "usage", { key: "shadowed" })).body.rules).toEqual([
      expect.objectContaining({ name: "minute", used: 0 }),
      expect.objectContaining({ name: "burst", used: 0 }),
    ]);
    expect((await limiter.limit(request("/", { key: "shadowed" }), { cost: 5 })).reason).toBe("admitted");
    // a key the registry puts in a tier without that shadow rule is not held to it, though this isolate meets it as the default tier
    expect((await admin(a, "keys/set", { key: "moved", tier: "paid" })).status).toBe(200);
    expect((await limiter.limit(request("/", { key: "moved" }), { cost: 10 })).reason).toBe("admitted");
    expect((await admin(a, "usage", { key: "moved" })).body.rules).toEqual([expect.objectContaining({ name: "minute", used: 10 })]);
  });

  it("holds a key's cost to its configured limits when the store cannot say the key's own, instead of failing open", async () => {
    const limiter = createRateLimiter({ url: "http://127.0.0.1:9", token: "unused", ...TIERS, fail: "open", timeout: 300, prefix: "unreachable" });
    await expect(limiter.limit(request("/", { key: "offline" }), { cost: 3 })).rejects.toThrow(/from 1 to 2 \(the limit of "minute"\), not 3/);
    expect((await limiter.limit(request("/", { key: "offline" }), { cost: 2 })).reason).toBe("failed-open");
  });

  it("admits a key's request that no rule of its tier covers, without taking it for a store failure", async () => {
    const { a } = fleet({ fail: "closed", tiers: { free: { rules: [{ name: "writes", limit: 5, window: "1m", methods: ["POST"] }] } } });
    expect(await statuses(a, 3, "/", { key: "reader" })).toEqual([200, 200, 200]);
    expect(await statuses(a, 1, "/", { key: "reader", method: "POST" })).toEqual([200]);
  });

  for (const cost of [undefined, 1]) {
    it(`counts every request on the address rules, and lets their denial stand, while the registry keeps moving the key (cost ${cost ?? "of the rules"})`, async () => {
      const config = { fail: "open" as const, addressRules: [{ name: "per-address", limit: 3, window: "1m" }] };
      const { a, prefix } = fleet(config);
      const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
      const ip = "198.51.100.83";
      expect((await admin(a, "keys/set", { key: "restless", tier: "paid" })).status).toBe(200);
      const reasons: string[] = [];
      await whileMovedEveryDecision(a, prefix, "restless", async () => {
        for (let i = 0; i < 6; i++) reasons.push((await limiter.limit(request("/", { key: "restless", ip }), cost === undefined ? {} : { cost })).reason);
      });
      expect(reasons.slice(3)).toEqual(["rate-limited", "rate-limited", "rate-limited"]);
      expect((await admin(a, "usage", { ip })).body.addressRules).toEqual([expect.objectContaining({ name: "per-address", used: 3 })]);
    });
  }

  it("fails as the rules of the tiers the key was moved through say, not as the global fail, when the registry keeps moving it", async () => {
    const closedTiers = {
      free: { rules: [{ name: "minute", limit: 2, window: "1m", fail: "closed" as const }] },
      paid: { rules: [{ name: "minute", limit: 5, window: "1m", fail: "closed" as const }] },
    };
    const config = { fail: "open" as const, tiers: closedTiers };
    const { a, prefix } = fleet(config);
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...TIERS, ...config, prefix });
    expect((await admin(a, "keys/set", { key: "restless-closed", tier: "paid" })).status).toBe(200);
    let reason = "";
    await whileMovedEveryDecision(a, prefix, "restless-closed", async () => {
      reason = (await limiter.limit(request("/", { key: "restless-closed" }))).reason;
    });
    expect(reason).toBe("failed-closed");
  });

  it("the isolate that served a tier change forgets the tier it remembered for the key: its next request is decided in one store call", async () => {
    const { a, prefix } = fleet();
    expect((await admin(a, "keys/set", { key: "hinted", tier: "paid" })).status).toBe(200);
    // a meets the key as paid (the registry says so) and remembers it
    expect((await a(request("/", { key: "hinted" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=5;w=60');
    expect((await admin(a, "keys/set", { key: "hinted", tier: "free" })).status).toBe(200);
    const tag = ((await admin(a, "usage", { key: "hinted" })).body.identity as { tag: string }).tag;
    const entry = `${prefix}:{${tag}}:key`;
    let asks = 0;
    const real = globalThis.fetch;
    globalThis.fetch = ((input: RequestInfo | URL, init?: RequestInit) => {
      const sent = typeof init?.body === "string" ? init.body : "";
      if (/^\["eval(sha)?"/i.test(sent) && sent.includes(entry)) asks++;
      return real(input as RequestInfo, init);
    }) as typeof fetch;
    let res: Response;
    try {
      res = await a(request("/", { key: "hinted" }));
    } finally {
      globalThis.fetch = real;
    }
    expect(res.headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=60');
    // a remembered "paid" would be asked about first, answered "free", and asked again
    expect(asks).toBe(1);
  });

  it("decides a key the registry moves to another tier within one timeout budget, not one per ask", async () => {
    // every store call answers verySlowShimMs late: one ask fits the budget, with a second
    // to spare for a loaded machine's round trip, and two in a row do not
    const budget = 2500;
    expect(services.verySlowShimMs).toBeLessThan(budget);
    expect(2 * services.verySlowShimMs).toBeGreaterThan(budget + 150);
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const config = { ...TIERS, prefix, timeout: budget, fail: "closed" as const };
    const a = makeGate(config, { adminToken: ADMIN });
    expect((await admin(a, "keys/set", { key: "slow-mover", tier: "paid" })).status).toBe(200);
    // this isolate knows the key as the default tier: the first ask is answered "paid", then asked again
    const slow = makeGate(config, { redisUrl: services.verySlowShimUrl });
    const res = await slow(request("/", { key: "slow-mover" }));
    expect(res.status).toBe(503);
    // the store answered both asks (slowly): with the tier known, one ask fits the budget
    expect((await slow(request("/", { key: "slow-mover" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=5;w=60');
  });

  it("answers 409 for an entry key holding a value of another type, saying so, and the gate reads it as no entry", async () => {
    const { a, prefix } = fleet({ identity: { header: "x-api-key", unknownKeys: "reject" } });
    const key = `sk-typed-${crypto.randomUUID()}`;
    const tag = ((await admin(a, "usage", { key })).body.identity as { tag: string }).tag;
    await store.set(`${prefix}:{${tag}}:key`, "written by hand");
    for (const [route, body] of [
      ["keys/get", { key }],
      ["usage", { key }],
      ["keys/override", { key, rule: "minute", limit: 9 }],
    ] as const) {
      const res = await admin(a, route, body);
      expect([res.status, res.body.type], route).toEqual([409, "urn:slidegate:wrong-type"]);
      expect(String(res.body.detail)).toMatch(/another type than slidegate writes .*keys\/delete/);
    }
    // the script reads it as no entry: an unknown key under "reject"
    expect((await a(request("/", { key }))).status).toBe(401);
    // and keys/delete clears it
    expect((await admin(a, "keys/delete", { key })).status).toBe(200);
    expect(await store.exists(`${prefix}:{${tag}}:key`)).toBe(0);
  });

  it("reads an entry's override fields written by hand under a name no rule can have as no override, as the script does, and leaves every other object as it was", async () => {
    const { a, prefix } = fleet();
    expect((await admin(a, "keys/set", { key: "odd-fields", tier: "paid", overrides: { minute: { limit: 4 } } })).status).toBe(200);
    const tag = ((await admin(a, "usage", { key: "odd-fields" })).body.identity as { tag: string }).tag;
    // by hand, or by another application on the prefix: names the admin API refuses to write
    await store.hset(`${prefix}:{${tag}}:key`, { "limit:__proto__": "7", "window:constructor": "5000", "limit:no rule!": "3" });
    const read = await admin(a, "keys/get", { key: "odd-fields" });
    expect([read.status, read.body.overrides]).toEqual([200, { minute: { limit: 4 } }]);
    // read into an object's prototype, a limit would show up on every object of the isolate
    expect(({} as { limit?: unknown }).limit).toBeUndefined();
    expect((await admin(a, "keys/override", { key: "odd-fields", rule: "minute", clear: true })).body).toEqual({ cleared: "minute" });
  });

  /** A key of paid whose entry holds `fields` written by hand is decided by paid's configured rule (5 a minute). */
  async function expectConfiguredRule(a: ReturnType<typeof fleet>["a"], prefix: string, key: string, fields: Record<string, string>) {
    expect((await admin(a, "keys/set", { key, tier: "paid" })).status).toBe(200);
    const tag = ((await admin(a, "usage", { key })).body.identity as { tag: string }).tag;
    await store.hset(`${prefix}:{${tag}}:key`, fields);
    const res = await a(request("/", { key }));
    expect([res.status, res.headers.get("RateLimit-Policy")]).toEqual([200, '"minute";q=5;w=60']);
  }

  it("decides a key whose override written by hand is beyond what the admin API writes by its configured rule, and reads it as no override", async () => {
    const { a, prefix } = fleet();
    // a limit above 1,000,000 and a window above 366 days: replies made of them are refused as a
    // store's nonsense, so read as overrides they made every decision of the key a store failure
    await expectConfiguredRule(a, prefix, "huge-override", { "limit:minute": "5000000", "window:minute": "31622400001" });
    expect((await admin(a, "keys/get", { key: "huge-override" })).body.overrides).toEqual({});
  });

  it("refuses an override that, with a rule's own numbers in any tier, would count more than 1000 per millisecond of the window, naming the field, and writes nothing", async () => {
    const tiers = {
      free: {
        rules: [
          { name: "minute", limit: 2, window: "1m" },
          { name: "burst", limit: 10, window: 5 },
        ],
      },
      paid: {
        rules: [
          { name: "minute", limit: 5, window: "1m" },
          { name: "burst", limit: 2000, window: 2 },
        ],
      },
    };
    const { a } = fleet({ tiers });
    const why = "requests are recorded at least a microsecond apart, so a window holds no more";
    // 3000 in free's 5 ms fit; in paid's 2 ms they do not, and the key may be moved to paid
    const set = await admin(a, "keys/set", { key: "dense", tier: "free", overrides: { burst: { limit: 3000 } } });
    expect([set.status, set.body.type, set.body.detail]).toEqual([
      400,
      "urn:slidegate:bad-request",
      `overrides.burst.limit: 3000 in 2 ms (the window of "burst" in tier "paid") is more than 1000 per millisecond of the window: ${why} than 2000`,
    ]);
    // a window of the key's own makes paid's limit too dense
    const window = await admin(a, "keys/set", { key: "dense", tier: "free", overrides: { burst: { window: "1ms" } } });
    expect(window.body.detail).toBe(`overrides.burst.window: 2000 in 1 ms (the limit of "burst" in tier "paid") is more than 1000 per millisecond of the window: ${why} than 1000`);
    const imported = await admin(a, "keys/import", { entries: [{ key: "dense", overrides: { burst: { limit: 2000, windowMs: 1 } } }] });
    expect(imported.body.detail).toBe(`Nothing was imported: entries[0].overrides.burst.limit: 2000 in 1 ms is more than 1000 per millisecond of the window: ${why} than 1000`);
    expect((await admin(a, "keys/get", { key: "dense" })).status).toBe(404);
    // the key's own pair within the bound is taken: 3000 in 3 ms
    expect((await admin(a, "keys/set", { key: "dense", tier: "free", overrides: { burst: { limit: 3000, window: 3 } } })).status).toBe(200);
    // one field changed, with the key's other one: 3000 in 2 ms
    const override = await admin(a, "keys/override", { key: "dense", rule: "burst", windowMs: 2 });
    expect([override.status, override.body.detail]).toEqual([
      400,
      `windowMs: 3000 in 2 ms (the key's own limit) is more than 1000 per millisecond of the window: ${why} than 2000`,
    ]);
    expect((await admin(a, "keys/get", { key: "dense" })).body.overrides).toEqual({ burst: { limit: 3000, windowMs: 3 } });
    expect((await admin(a, "keys/override", { key: "dense", rule: "burst", limit: 2500 })).status).toBe(200);
  });

  it("limits a key whose tier written by hand is no tier name by its configured tier, and reads the entry so", async () => {
    const { a, b, prefix } = fleet({ keys: { [await hashOf("hand-tier")]: "paid" } });
    expect((await admin(a, "keys/set", { key: "hand-tier", tier: "paid" })).status).toBe(200);
    const tag = ((await admin(a, "usage", { key: "hand-tier" })).body.identity as { tag: string }).tag;
    const entry = `${prefix}:{${tag}}:key`;
    const policy = '"minute";q=5;w=60';
    await store.hset(entry, { tier: "" });
    const first = await b(request("/", { key: "hand-tier" }));
    expect([first.status, first.headers.get("RateLimit-Policy")]).toEqual([200, policy]);
    expect(await statuses(b, 5, "/", { key: "hand-tier" })).toEqual([200, 200, 200, 200, 429]);
    expect((await admin(a, "keys/get", { key: "hand-tier" })).body.tier).toBe("");
    expect((await admin(a, "usage", { key: "hand-tier" })).body.tier).toBe("paid");
    // on an isolate that has cached no denial of the key: paid's window, as full as it was left
    await store.hset(entry, { tier: "x y" });
    const other = await a(request("/", { key: "hand-tier" }));
    expect([other.status, other.headers.get("RateLimit-Policy")]).toEqual([429, policy]);
    expect((await admin(a, "keys/get", { key: "hand-tier" })).body.tier).toBe("");
    expect((await admin(a, "usage", { key: "hand-tier" })).body.tier).toBe("paid");
    expect(a.logs.filter((l) => l.level === "error")).toEqual([]);
    expect(b.logs.filter((l) => l.level === "error")).toEqual([]);
  });

  it("decides a key whose own limit and window written by hand count more than 1000 per millisecond of the window by its configured rule, and usage says so", async () => {
    const { a, prefix } = fleet();
    await expectConfiguredRule(a, prefix, "dense-by-hand", { "limit:minute": "2000", "window:minute": "1" });
    const usage = (await admin(a, "usage", { key: "dense-by-hand" })).body;
    expect((usage.rules as { limit: number; windowMs: number; used: number }[])[0]).toMatchObject({ limit: 5, windowMs: 60_000, used: 1 });
  });

  it("lists the other entries when one listed key's entry holds a value of another type, as the gate reads it: no entry, not a failed list", async () => {
    const { a, prefix } = fleet();
    const keys = ["typed-list-1", "typed-list-2", "typed-list-3"];
    for (const key of keys) expect((await admin(a, "keys/set", { key, tier: "paid" })).status).toBe(200);
    const hashes = (await Promise.all(keys.map(hashOf))).sort();
    // another application on the same prefix writes a string where the second entry was
    const tag = ((await admin(a, "usage", { hash: hashes[1] })).body.identity as { tag: string }).tag;
    await store.set(`${prefix}:{${tag}}:key`, "written by hand");
    const page = await admin(a, "keys/list", { limit: 2 });
    // one such key would otherwise fail every list (a 409 naming no key to delete), and every list --all backup with it
    expect([page.status, (page.body.entries as { hash: string }[] | undefined)?.map((e) => e.hash), page.body.cursor]).toEqual([200, [hashes[0]], hashes[1]]);
    const next = await admin(a, "keys/list", { cursor: page.body.cursor, limit: 2 });
    expect((next.body.entries as { hash: string }[]).map((e) => e.hash)).toEqual([hashes[2]]);
  });

  it("reads, lists and deletes entries by key or by hash, and names every bad field", async () => {
    const { a } = fleet();
    const hash = await hashOf("by-hash");
    expect((await admin(a, "keys/set", { hash, tier: "paid", label: "Acme" })).body).toEqual({ hash, tier: "paid", label: "Acme", disabled: false, overrides: {} });
    expect((await admin(a, "keys/get", { key: "by-hash" })).body).toMatchObject({ hash, tier: "paid", label: "Acme" });
    const bad = await admin(a, "keys/set", { key: "k", tier: "gold", overrides: { hour: { limit: 0 }, minute: { window: "soon" } } });
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toMatch(/overrides\.hour\.limit: must be at least 1/);
    expect(bad.body.detail).toMatch(/overrides\.minute\.window: must be a duration/);
    const unknown = await admin(a, "keys/set", { key: "k", tier: "gold" });
    expect(unknown.body.detail).toMatch(/^tier: "gold" is not a tier/);
    expect((await admin(a, "keys/set", { hash: "ABC", tier: "paid" })).body.detail).toMatch(/"hash" must be the SHA-256/);
    expect((await admin(a, "keys/delete", { hash })).body).toEqual({ deleted: true });
    expect((await admin(a, "keys/get", { hash })).status).toBe(404);
  });

  it("an override racing a delete of its key leaves no entry behind: none the list cannot find, none holding the override", async () => {
    const { a, prefix } = fleet({ identity: { header: "x-api-key", unknownKeys: "defaultTier" } });
    expect((await admin(a, "keys/set", { key: "raced", tier: "free" })).status).toBe(200);
    const tag = ((await admin(a, "usage", { key: "raced" })).body.identity as { tag: string }).tag;
    const entry = `${prefix}:{${tag}}:key`;
    // another operator deletes the key as soon as the override's first store call about it has been answered
    let overridden = { status: 0 };
    const raced = await onceAfterStoreCall(
      (sent) => sent.includes(entry),
      async () => expect((await admin(a, "keys/delete", { key: "raced" })).body).toEqual({ deleted: true }),
      async () => {
        overridden = await admin(a, "keys/override", { key: "raced", rule: "minute", limit: 500 });
      },
    );
    expect(raced).toBe(true);
    // either order is a right answer: overridden, then deleted; or deleted first, then 404
    expect([200, 404]).toContain(overridden.status);
    expect((await admin(a, "keys/get", { key: "raced" })).status).toBe(404);
    // the deleted key is an unknown one again: the default tier's limit, not the override's
    expect((await a(request("/", { key: "raced" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=60');
  });

  it("a keys/set racing a delete of its key leaves an entry the list finds: the key set last is listed, never registered unseen", async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "set-raced", tier: "free" })).status).toBe(200);
    const hash = await hashOf("set-raced");
    // another operator deletes the key once the set's index write has been answered, before its entry is written
    const raced = await onceAfterStoreCall(
      (sent) => /^\["zadd"/i.test(sent),
      async () => expect((await admin(a, "keys/delete", { key: "set-raced" })).body).toEqual({ deleted: true }),
      async () => expect((await admin(a, "keys/set", { key: "set-raced", tier: "paid" })).status).toBe(200),
    );
    expect(raced).toBe(true);
    // the set came last: the key is registered, and so listed (a backup by keys/list keeps it)
    expect((await admin(a, "keys/get", { key: "set-raced" })).body).toMatchObject({ hash, tier: "paid" });
    const listed = (await admin(a, "keys/list", { limit: 1000 })).body.entries as { hash: string }[];
    expect(listed.map((e) => e.hash)).toContain(hash);
  });

  it("an import racing a keys/set of its key leaves one of the two, never the set's tier with the import's enabling", async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "import-raced", tier: "paid", disabled: true })).status).toBe(200);
    // another operator replaces the entry (free, disabled) once the import's writes have been answered, before it goes on
    const raced = await onceAfterStoreCall(
      (sent) => sent.startsWith('[["zadd"'),
      async () => expect((await admin(a, "keys/set", { key: "import-raced", tier: "free", disabled: true })).status).toBe(200),
      async () => expect((await admin(a, "keys/import", { entries: [{ key: "import-raced", tier: "paid", disabled: false }] })).body).toEqual({ imported: 1 }),
    );
    expect(raced).toBe(true);
    // the import, then the set: free and disabled; the set, then the import: paid and enabled
    const { tier, disabled } = (await admin(a, "keys/get", { key: "import-raced" })).body;
    expect([
      { tier: "free", disabled: true },
      { tier: "paid", disabled: false },
    ]).toContainEqual({ tier, disabled });
  });

  it("lists no entry deleted while the page is read: never a key with an empty tier, and the next page still follows", async () => {
    const { a } = fleet();
    for (const key of ["paged-1", "paged-2", "paged-3"]) expect((await admin(a, "keys/set", { key, tier: "paid" })).status).toBe(200);
    const hashes = (await Promise.all(["paged-1", "paged-2", "paged-3"].map(hashOf))).sort();
    const doomed = (await admin(a, "keys/get", { hash: hashes[0] })).body.hash as string;
    // another operator deletes the page's first key once the page's hashes are read, before its entries are
    let page = { entries: [] as { hash: string; tier: string }[], cursor: null as string | null };
    const deleted = await onceAfterStoreCall(
      (sent) => /^\["zrange"/i.test(sent),
      async () => expect((await admin(a, "keys/delete", { hash: doomed })).body).toEqual({ deleted: true }),
      async () => {
        page = (await admin(a, "keys/list", { limit: 2 })).body as typeof page;
      },
    );
    expect(deleted).toBe(true);
    expect(page.entries).toEqual([expect.objectContaining({ hash: hashes[1], tier: "paid" })]);
    expect(page.cursor).toBe(hashes[1]);
    const next = (await admin(a, "keys/list", { cursor: page.cursor, limit: 2 })).body as typeof page;
    expect(next.entries.map((e) => e.hash)).toEqual([hashes[2]]);
  });
});

describe("key registry at scale", () => {
  it("registers 10,000 keys through the admin API and lists each exactly once, page by page", async () => {
    const { a, b } = fleet();
    const hashes: string[] = [];
    for (let batch = 0; batch < 10; batch++) {
      const entries = [];
      for (let i = 0; i < 1000; i++) {
        const hash = await hashOf(`customer-${batch * 1000 + i}`);
        hashes.push(hash);
        entries.push({ hash, tier: i % 2 ? "paid" : "free" });
      }
      expect((await admin(a, "keys/import", { entries })).body).toEqual({ imported: 1000 });
    }
    const listed: string[] = [];
    let cursor: string | null = null;
    do {
      const page = (await admin(a, "keys/list", { cursor, limit: 1000 })).body as { entries: { hash: string; tier: string }[]; cursor: string | null };
      listed.push(...page.entries.map((e) => e.hash));
      cursor = page.cursor;
    } while (cursor);
    expect(listed).toHaveLength(10_000);
    expect(new Set(listed)).toEqual(new Set(hashes));
    // decided by their registered tier, on an isolate that never saw them
    const paid = await b(request("/", { key: "customer-9999" }));
    expect(paid.headers.get("RateLimit-Policy")).toBe('"minute";q=5;w=60');
    const free = await b(request("/", { key: "customer-9998" }));
    expect(free.headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=60');
  }, 120_000);

  it("imports 1,000 new keys for two store commands a key and a few more (a hosted store bills by the command)", async () => {
    const { a } = fleet();
    const entries = await Promise.all(Array.from({ length: 1000 }, async (_, i) => ({ hash: await hashOf(`billed-${i}`), tier: "paid" })));
    let commands = 0;
    await afterStoreCalls(
      async (sent) => {
        const body: unknown = sent ? JSON.parse(sent) : [];
        // a pipeline is a list of commands; a single command, a list of its words
        commands += Array.isArray(body) && Array.isArray(body[0]) ? body.length : 1;
      },
      async () => expect((await admin(a, "keys/import", { entries })).body).toEqual({ imported: 1000 }),
    );
    expect(commands).toBeLessThanOrEqual(2 * 1000 + 10);
  });

  it("imports a full batch of the largest entries it accepts, which the store's request size limit does not refuse", async () => {
    const rules = ["r1", "r2", "r3", "r4", "r5"].map((name) => ({ name, limit: 10, window: "1m" }));
    const { a } = fleet({ tiers: { free: { rules }, paid: { rules } } });
    const overrides = Object.fromEntries(rules.map((r) => [r.name, { limit: 1_000_000, window: "366d" }]));
    const entries = [];
    // 200 characters of three bytes each: the longest label, as UTF-8
    for (let i = 0; i < 1000; i++) entries.push({ hash: await hashOf(`big-${i}`), label: "漢".repeat(200), overrides });
    expect((await admin(a, "keys/import", { entries, check: true })).body).toEqual({ checked: 1000 });
    expect((await admin(a, "keys/import", { entries })).body).toEqual({ imported: 1000 });
    expect((await admin(a, "keys/get", { key: "big-999" })).body).toMatchObject({ tier: "free", label: "漢".repeat(200), overrides: { r5: { limit: 1_000_000 } } });
  }, 60_000);

  it("imports an entry that overrides both numbers of every rule of a list at its cap, keeping the tier it has", async () => {
    // one list of 3,000 rules: an entry merged without a tier is written in one script, which
    // took its 12,000 field-value arguments in one unpack (Lua refuses past about 8,000)
    const rules = Array.from({ length: 3000 }, (_, i) => ({ name: `r${i}`, limit: 10, window: "1m" }));
    const { a } = fleet({ tiers: { free: { rules }, paid: { rules: rules.slice(0, 1) } }, denialCacheSize: 10 });
    expect((await admin(a, "keys/set", { key: "sk-every-rule", tier: "paid" })).status).toBe(200);
    const overrides = Object.fromEntries(rules.map((r) => [r.name, { limit: 7, window: "2m" }]));
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-every-rule", overrides }] })).body).toEqual({ imported: 1 });
    const entry = (await admin(a, "keys/get", { key: "sk-every-rule" })).body;
    expect(entry.tier).toBe("paid");
    expect(Object.keys(entry.overrides as object)).toHaveLength(3000);
    expect((entry.overrides as Record<string, unknown>).r2999).toEqual({ limit: 7, windowMs: 120_000 });
  }, 60_000);

  it("merges an import into existing entries: a re-import keeps a key disabled and its overrides unless the file says otherwise", async () => {
    const { a, b } = fleet();
    expect((await admin(a, "keys/set", { key: "sk-acme", tier: "paid", label: "Acme", disabled: true, overrides: { minute: { limit: 50 } } })).status).toBe(200);
    // a CRM export, sent again: tier and label only
    expect(
      (
        await admin(a, "keys/import", {
          entries: [
            { key: "sk-acme", tier: "free", label: "Acme Corp" },
            { key: "sk-new", label: "New" },
          ],
        })
      ).body,
    ).toEqual({ imported: 2 });
    expect((await admin(a, "keys/get", { key: "sk-acme" })).body).toMatchObject({ tier: "free", label: "Acme Corp", disabled: true, overrides: { minute: { limit: 50 } } });
    expect((await b(request("/", { key: "sk-acme" }))).status).toBe(403);
    // a new entry without a tier gets the default one
    expect((await admin(a, "keys/get", { key: "sk-new" })).body).toMatchObject({ tier: "free", label: "New", disabled: false, overrides: {} });
    // what the file gives is set: enabled again, and the overrides given replace the key's
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-acme", disabled: false, overrides: { minute: { window: "2m" } } }] })).body).toEqual({ imported: 1 });
    const replaced = (await admin(a, "keys/get", { key: "sk-acme" })).body;
    expect(replaced).toMatchObject({ tier: "free", label: "Acme Corp", disabled: false });
    expect(replaced.overrides).toEqual({ minute: { windowMs: 120_000 } });
    // a move to another tier that drops the old tier's overrides says so: {}
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-acme", tier: "free", overrides: {} }] })).body).toEqual({ imported: 1 });
    expect((await admin(a, "keys/get", { key: "sk-acme" })).body.overrides).toEqual({});
    // the isolate that served the import knows at once (b, which refused the disabled key, within denialCacheMaxAge)
    expect((await a(request("/", { key: "sk-acme" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=60');
  });

  it('drops every override with "overrides": {}, a rule\'s the configuration has since lost included (it would come back live with its rule)', async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const withBurst = { ...TIERS, prefix, tiers: { ...TIERS.tiers, free: { rules: [...TIERS.tiers.free.rules, { name: "burst", limit: 3, window: "10s" }] } } };
    const before = makeGate(withBurst, { adminToken: ADMIN });
    expect((await admin(before, "keys/set", { key: "sk-old-override", overrides: { burst: { limit: 500 } } })).status).toBe(200);
    // the configuration loses "burst"; an import drops the key's overrides
    const without = makeGate({ ...TIERS, prefix }, { adminToken: ADMIN });
    expect((await admin(without, "keys/import", { entries: [{ key: "sk-old-override", overrides: {} }] })).body).toEqual({ imported: 1 });
    expect((await admin(without, "keys/get", { key: "sk-old-override" })).body.overrides).toEqual({});
    // "burst" comes back: at its configured limit
    const after = makeGate(withBurst, { adminToken: ADMIN });
    expect((await after(request("/", { key: "sk-old-override" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=60, "burst";q=3;w=10');
  });

  it("refuses an import that names one key twice, trimmed (as any origin trims) or as its hash, and writes none of it", async () => {
    const { a, prefix } = fleet();
    for (const entries of [
      [
        { key: "sk-twice", tier: "paid" },
        { key: "sk-twice ", tier: "free" },
      ],
      [
        { key: "sk-twice", tier: "paid" },
        { key: "\u001fsk-twice\u0085", tier: "free" },
      ],
      [
        { key: "sk-twice", tier: "paid" },
        { hash: await hashOf("sk-twice"), tier: "free" },
      ],
    ]) {
      const res = await admin(a, "keys/import", { entries });
      expect([res.status, res.body.detail]).toEqual([400, expect.stringMatching(/entries\[1\]: names the same key as entries\[0\]/)]);
    }
    expect((await store.keys(`${prefix}:*`)).filter((k) => !k.includes(":@admin:"))).toEqual([]);
  });

  it('checks an import without writing it when asked to ("check": true): a client checks a whole file first', async () => {
    const { a, prefix } = fleet();
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-only-checked", tier: "paid" }, { key: "sk-also-checked" }], check: true })).body).toEqual({ checked: 2 });
    expect((await store.keys(`${prefix}:*`)).filter((k) => !k.includes(":@admin:"))).toEqual([]);
    expect((await admin(a, "keys/import", { entries: [{ key: "sk-bad", tier: "platinum" }], check: true })).status).toBe(400);
  });

  it("refuses an entry with a field it does not know, naming it, rather than writing the entry without it", async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "sk-typo", tier: "paid", disabled: true })).status).toBe(200);
    // "disable" for "disabled": keys/set replaces the entry, so the key would come back enabled
    const set = await admin(a, "keys/set", { key: "sk-typo", tier: "paid", disable: true });
    expect([set.status, set.body.detail]).toEqual([
      400,
      expect.stringMatching(/^disable: unknown field \(allowed: tier, label, disabled, overrides\); did you mean "disabled"\?$/),
    ]);
    expect((await admin(a, "keys/get", { key: "sk-typo" })).body).toMatchObject({ disabled: true });
    const imported = await admin(a, "keys/import", { entries: [{ key: "sk-typo-2", tier: "paid", lable: "Acme" }] });
    expect([imported.status, imported.body.detail]).toEqual([400, expect.stringMatching(/entries\[0\]\.lable: unknown field \(allowed: [^)]*\); did you mean "label"\?$/)]);
    expect((await admin(a, "keys/get", { key: "sk-typo-2" })).status).toBe(404);
  });

  it("imports what keys/list answers as it stands: a backup restored loses nothing, overrides' windowMs included", async () => {
    const { a } = fleet();
    expect((await admin(a, "keys/set", { key: "sk-kept-1", tier: "paid", label: "Acme", disabled: true, overrides: { minute: { limit: 7, window: "90s" } } })).status).toBe(200);
    expect((await admin(a, "keys/set", { key: "sk-kept-2", overrides: { minute: { window: "2m" } } })).status).toBe(200);
    expect((await admin(a, "keys/set", { key: "sk-kept-3", tier: "paid", label: "" })).status).toBe(200);
    const backup = (await admin(a, "keys/list", {})).body;
    expect(backup.entries).toHaveLength(3);
    const { a: restored } = fleet();
    const imported = await admin(restored, "keys/import", { entries: backup.entries });
    expect([imported.status, imported.body]).toEqual([200, { imported: 3 }]);
    expect((await admin(restored, "keys/list", {})).body).toEqual(backup);
    expect((await restored(request("/", { key: "sk-kept-2" }))).headers.get("RateLimit-Policy")).toBe('"minute";q=2;w=120');
    // as keys/set and keys/override take it too, one spelling or the other, never both
    expect((await admin(a, "keys/set", { key: "sk-kept-2", overrides: { minute: { windowMs: 30_000 } } })).body).toMatchObject({ overrides: { minute: { windowMs: 30_000 } } });
    expect((await admin(a, "keys/override", { key: "sk-kept-2", rule: "minute", windowMs: 45_000 })).body).toEqual({ rule: "minute", windowMs: 45_000 });
    const both = await admin(a, "keys/override", { key: "sk-kept-2", rule: "minute", window: "1m", windowMs: 60_000 });
    expect([both.status, both.body.detail]).toEqual([400, expect.stringMatching(/^windowMs: is "window" in milliseconds: give one of them, not both/)]);
    const text = await admin(a, "keys/import", { entries: [{ key: "sk-kept-2", overrides: { minute: { windowMs: "1m" } } }] });
    expect([text.status, text.body.detail]).toEqual([400, expect.stringMatching(/^Nothing was imported: entries\[0\]\.overrides\.minute\.windowMs: must be a whole number/)]);
    expect((await admin(a, "keys/get", { key: "sk-kept-2" })).body).toMatchObject({ overrides: { minute: { windowMs: 45_000 } } });
  });

  it('refuses a "check" that is not true or false, naming it, and writes nothing: a dry run asked for wrongly must not import', async () => {
    const { a, prefix } = fleet();
    for (const check of ["true", 1, "yes", null]) {
      const answer = await admin(a, "keys/import", { entries: [{ key: "sk-dry-run", tier: "paid" }], check });
      expect([answer.status, answer.body.detail], JSON.stringify(check)).toEqual([400, expect.stringMatching(/"check" must be true or false/)]);
    }
    expect((await store.keys(`${prefix}:*`)).filter((k) => !k.includes(":@admin:"))).toEqual([]);
  });

  it("refuses a whole import that holds a bad entry, naming it, and writes none of it", async () => {
    const { a, prefix } = fleet();
    const res = await admin(a, "keys/import", { entries: [{ key: "fine", tier: "paid" }, { key: "bad", tier: "platinum" }, { tier: "free" }] });
    expect(res.status).toBe(400);
    expect(res.body.detail).toMatch(/entries\[1\]\.tier: "platinum" is not a tier/);
    expect(res.body.detail).toMatch(/entries\[2\]: give exactly one of "key"/);
    expect((await store.keys(`${prefix}:*`)).filter((k) => !k.includes(":@admin:"))).toEqual([]);
  });
});
