import { describe, expect, it } from "vitest";
import { createRateLimiter } from "../../src/adapters/library.ts";
import type { Gate } from "../../src/gateway/gateway.ts";
import { makeGate, request, services, statuses } from "./helpers.ts";

// Operators are in control: the admin token cannot be guessed at speed, every 401 says how to
// authenticate, and a reset reaches the isolates' cached denials within a stated bound.

const ADMIN = "control-admin-token";
/** An admin call; a string body goes as it is (JSON no serializer would write), anything else as its JSON. */
const call = (gate: Gate, route: string, options: { token?: string | null; authorization?: string; ip?: string; body?: unknown } = {}) =>
  gate(
    new Request(`https://gate.example/__slidegate/${route}`, {
      method: "POST",
      body: typeof options.body === "string" ? options.body : JSON.stringify(options.body ?? { ip: "203.0.113.9" }),
      headers: {
        ...(options.token !== null && { authorization: options.authorization ?? `Bearer ${options.token ?? ADMIN}` }),
        "cf-connecting-ip": options.ip ?? "192.0.2.1",
      },
    }),
  );
let next = 0;
const freshIp = () => `100.66.${(++next >> 8) & 255}.${next & 255}`;

/**
 * Two isolates of one deployment on a fresh prefix, denials cached at most 5 s: `serving` takes the
 * admin calls, `elsewhere` keeps a clock the test moves with `advance` to run its caches out.
 */
function isolatesWithClock(config: Record<string, unknown>) {
  let clock = Date.now();
  const fleet = { prefix: `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`, denialCacheMaxAge: "5s", timeout: 10_000, ...config };
  return {
    serving: makeGate(fleet, { adminToken: ADMIN }),
    elsewhere: makeGate(fleet, { now: () => clock }),
    advance: (ms: number) => {
      clock += ms;
    },
  };
}

describe("WWW-Authenticate", () => {
  it("is on every 401: the admin API's, with or without a token, and the missing API key's", async () => {
    const gate = makeGate({ identity: { header: "x-api-key", required: true }, timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const missing = await call(gate, "usage", { token: null, ip: freshIp() });
    expect(missing.status).toBe(401);
    expect(missing.headers.get("WWW-Authenticate")).toBe('Bearer realm="slidegate-admin"');
    const wrong = await call(gate, "usage", { token: "guess", ip: freshIp() });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get("WWW-Authenticate")).toBe('Bearer realm="slidegate-admin", error="invalid_token"');
    const keyless = await gate(request("/v1/things"));
    expect(keyless.status).toBe(401);
    expect(keyless.headers.get("WWW-Authenticate")).toMatch(/^Bearer realm=/);
  });
});

describe("an admin route called with another method than POST", () => {
  it("is a 405 naming POST in its Allow header, as RFC 9110 asks of every 405", async () => {
    const gate = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const method of ["GET", "PUT", "DELETE"]) {
      const res = await gate(new Request("https://gate.example/__slidegate/usage", { method, headers: { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": freshIp() } }));
      expect(res.status, method).toBe(405);
      expect(res.headers.get("Allow"), method).toBe("POST");
      expect(((await res.json()) as { type: string }).type).toBe("urn:slidegate:method-not-allowed");
    }
  });
});

describe("admin authentication failures", () => {
  const n = 10; // the README's "10 failed attempts per 10 minutes per client address"

  it(`are limited per client address: after ${n} wrong tokens every attempt is 429, the right token too`, async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const guesser = freshIp();
    const codes: number[] = [];
    for (let i = 0; i < n + 5; i++) codes.push((await call(gate, "usage", { token: `guess-${i}`, ip: guesser })).status);
    expect(codes).toEqual([...Array(n).fill(401), ...Array(5).fill(429)]);
    const right = await call(gate, "usage", { ip: guesser });
    expect(right.status).toBe(429);
    expect(Number(right.headers.get("Retry-After"))).toBeGreaterThan(0);
    expect((await call(gate, "usage", { ip: freshIp() })).status).toBe(200); // other addresses are not held back
  });

  it(`compare at most ${n} wrong tokens however many arrive at once, and refuse the rest unread`, async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const guesser = freshIp();
    const burst = await Promise.all(Array.from({ length: 4 * n }, (_, i) => call(gate, "usage", { token: `guess-${i}`, ip: guesser })));
    const codes = burst.map((r) => r.status);
    expect(codes.filter((c) => c === 401)).toHaveLength(n);
    expect(codes.filter((c) => c === 429)).toHaveLength(3 * n);
    // each wrong token that was compared is logged once
    expect(gate.logs.filter((l) => l.line.event === "slidegate.admin_unauthorized")).toHaveLength(n);
    expect((await call(gate, "usage", { ip: guesser })).status).toBe(429);
  });

  it("never count the right token's calls as failures, however many", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const operator = freshIp();
    for (let i = 0; i < 3 * n; i++) expect((await call(gate, "usage", { ip: operator })).status).toBe(200);
    const codes: number[] = [];
    for (let i = 0; i < n + 1; i++) codes.push((await call(gate, "usage", { token: `guess-${i}`, ip: operator })).status);
    expect(codes).toEqual([...Array(n).fill(401), 429]);
  });

  it("take the right token after the Bearer scheme in any case and any run of spaces, as RFC 9110 reads it, never counting it as a failure", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const operator = freshIp();
    const right = [`bearer ${ADMIN}`, `BEARER ${ADMIN}`, `Bearer   ${ADMIN}`, `bEaReR  ${ADMIN}`];
    const codes: number[] = [];
    for (let i = 0; i <= n; i++) for (const authorization of right) codes.push((await call(gate, "usage", { authorization, ip: operator })).status);
    expect(codes).toEqual(Array((n + 1) * right.length).fill(200));
    // a Bearer credential that is not the token alone is a wrong token, counted: sent twice, a word after it
    const wrong = [`Bearer ${ADMIN}, Bearer ${ADMIN}`, `Bearer ${ADMIN} x`];
    const refused: number[] = [];
    for (let i = 0; i < n; i++) refused.push((await call(gate, "usage", { authorization: wrong[i % 2], ip: operator })).status);
    refused.push((await call(gate, "usage", { authorization: `bearer ${ADMIN}`, ip: operator })).status);
    expect(refused).toEqual([...Array(n).fill(401), 429]);
  });

  it("refuse credentials of another scheme, or none, without counting them: another site's page can make the operator's browser send its Basic credentials, and must not shut the operator out", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const operator = freshIp();
    // no scheme, another scheme, no space after Bearer, a tab after it (RFC 9110: spaces only)
    const unsent = [ADMIN, `Basic ${ADMIN}`, "Basic dXNlcjpwYXNz", `Bearer${ADMIN}`, `Bearer\t${ADMIN}`];
    for (let i = 0; i < 3 * n; i++) {
      const res = await call(gate, "usage", { authorization: unsent[i % unsent.length], ip: operator });
      expect(res.status).toBe(401);
      expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="slidegate-admin"');
    }
    expect((await call(gate, "usage", { ip: operator })).status).toBe(200);
  });

  it(`check at most ${n} calls from one address at a time, and shut nobody out once they are answered`, async () => {
    let now = Date.now();
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN, now: () => now });
    const operator = freshIp();
    const burst = (await Promise.all(Array.from({ length: 3 * n }, () => call(gate, "usage", { ip: operator })))).map((r) => r.status);
    expect(burst.filter((c) => c === 200).length).toBeGreaterThanOrEqual(n);
    expect(burst.filter((c) => c !== 200 && c !== 429)).toEqual([]);
    now += 1001; // past the second an isolate holds a refusal
    expect((await call(gate, "usage", { ip: operator })).status).toBe(200);
  });

  it("tell the failure window's wait in every 429's Retry-After, the ones the isolate answers without the store too", async () => {
    let now = Date.now();
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN, now: () => now });
    const guesser = freshIp();
    for (let i = 0; i < n; i++) expect((await call(gate, "usage", { token: `guess-${i}`, ip: guesser })).status).toBe(401);
    const fromStore = await call(gate, "usage", { ip: guesser });
    expect(fromStore.status).toBe(429);
    const wait = Number(fromStore.headers.get("Retry-After"));
    expect(wait).toBeGreaterThan(590); // the 10 minutes, less the time the guesses took
    // answered from the isolate's memory of the refusal: the same wait, less the time since,
    // not the second that memory is held (a client told "1" comes back to another 429)
    now += 500;
    const held = await call(gate, "usage", { ip: guesser });
    expect(held.status).toBe(429);
    expect(Number(held.headers.get("Retry-After"))).toBeGreaterThanOrEqual(wait - 1);
    expect(gate.logs.filter((l) => l.line.event === "slidegate.admin_store_failure")).toEqual([]);
  });

  it("hold on an isolate that never saw the guesses, before the token is checked", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const config = { prefix, timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] };
    const [one, other] = [makeGate(config, { adminToken: ADMIN }), makeGate(config, { adminToken: ADMIN })];
    const guesser = freshIp();
    for (let i = 0; i < n; i++) expect((await call(one, "usage", { token: `guess-${i}`, ip: guesser })).status).toBe(401);
    // the other isolate has cached nothing: it reads the count in Redis first
    expect((await call(other, "usage", { ip: guesser })).status).toBe(429);
    expect((await call(other, "usage", { token: "another-guess", ip: guesser })).status).toBe(429);
  });

  it("count every address of one IPv6 /64 as one guesser", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const prefix = `2001:db8:ad:${(++next).toString(16)}`;
    const codes: number[] = [];
    for (let i = 0; i < n + 1; i++) codes.push((await call(gate, "usage", { token: `guess-${i}`, ip: `${prefix}::${(i + 1).toString(16)}` })).status);
    expect(codes.at(-1)).toBe(429);
  });

  it("count an IPv4 address and its IPv4-mapped, 6to4, NAT64 and Teredo spellings as one guesser", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    // 198.51.100.77 = c633:644d; Teredo carries it inverted (39cc:9bb2)
    const spellings = ["198.51.100.77", "::ffff:198.51.100.77", "2002:c633:644d:1::5", "64:ff9b::c633:644d", "2001:0:4136:e378:8000:63bf:39cc:9bb2"];
    const codes: number[] = [];
    for (let i = 0; i < n; i++) codes.push((await call(gate, "usage", { token: `guess-${i}`, ip: spellings[i % spellings.length] })).status);
    expect(codes).toEqual(Array(n).fill(401));
    for (const ip of spellings) expect((await call(gate, "usage", { ip })).status, ip).toBe(429);
  });

  it("count every address of one IPv6 /64 as one guesser, though the limits count a narrower network (ipv6Prefix 128)", async () => {
    // a customer holds a /64 at least: per address, its 2^64 addresses would each get their own failures
    const gate = makeGate({ ipv6Prefix: 128, timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const prefix = `2001:db8:ad:${(++next).toString(16)}`;
    const codes: number[] = [];
    for (let i = 0; i < n + 1; i++) codes.push((await call(gate, "usage", { token: `guess-${i}`, ip: `${prefix}::${(i + 1).toString(16)}` })).status);
    expect(codes).toEqual([...Array(n).fill(401), 429]);
    expect((await call(gate, "usage", { ip: `${prefix}::ffff` })).status).toBe(429);
  });
});

describe("admin identities", () => {
  it("refuse an IPv4 address that readers disagree on (192.000.002.077 is 192.0.2.63 to some) with 400 naming the field", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const ip of ["192.000.002.077", "010.0.0.1", "0xc0.0.2.1"]) {
      const res = await call(gate, "block", { ip: freshIp(), body: { ip, seconds: 60 } });
      expect(res.status, ip).toBe(400);
      expect((await res.json()) as { detail: string }).toMatchObject({ detail: expect.stringMatching(/^"ip": IPv4 written with leading zeros/) });
    }
    expect((await call(gate, "block", { ip: freshIp(), body: { ip: "192.0.2.77", seconds: 60 } })).status).toBe(200);
  });

  it("refuse an ip that is no address with 400, instead of acting on the bucket every unreadable address shares", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const ip of ["203.0.113.300", "not an ip", "2001:db8::1::2"]) {
      const res = await call(gate, "block", { ip: freshIp(), body: { ip, seconds: 600 } });
      expect(res.status, ip).toBe(400);
      expect((await res.json()) as { detail: string }).toMatchObject({ detail: `"ip": ${JSON.stringify(ip)} is not an IP address.` });
    }
    // nobody was blocked: a caller whose address cannot be read is still served
    expect((await gate(request("/", { ip: "garbage" }))).status).toBe(200);
  });
});

describe("admin identities without identity.header", () => {
  it("refuse an API key or its hash with 400 naming the field: the gate reads no key, so a block of one would hold no request", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const [route, body] of [
      ["block", { key: "sk-live-abuser", seconds: 60 }],
      ["usage", { key: "sk-live-abuser" }],
      ["reset", { hash: "ab".repeat(32) }],
      ["unblock", { key: "sk-live-abuser" }],
    ] as const) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(res.headers.get("Content-Type")).toBe("application/problem+json");
      const field = "key" in body ? "key" : "hash";
      expect(((await res.json()) as { detail: string }).detail, route).toMatch(new RegExp(`^"${field}": no identity\\.header is configured`));
    }
    expect((await call(gate, "block", { ip: freshIp(), body: { ip: "192.0.2.80", seconds: 60 } })).status).toBe(200);
  });

  it("refuse the key routes with 400 saying why: the registry is never consulted without a key header", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const [route, body] of [
      ["keys/set", { key: "sk-x", tier: "default" }],
      ["keys/get", { key: "sk-x" }],
      ["keys/override", { key: "sk-x", rule: "m", limit: 9 }],
      ["keys/delete", { hash: "ab".repeat(32) }],
      ["keys/import", { entries: [{ key: "sk-x" }] }],
    ] as const) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(((await res.json()) as { detail: string }).detail, route).toMatch(/no identity\.header is configured/);
    }
    // listing what an earlier configuration registered stays possible
    expect((await call(gate, "keys/list", { ip: freshIp(), body: {} })).status).toBe(200);
  });
});

describe("what a block holds", () => {
  it("an address's: only requests some rule covers, since a request no rule covers reaches the origin without a store call; an API key's: every request", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, timeout: 10_000, rules: [{ name: "m", limit: 50, window: "1m", path: "/v1/*" }] }, { adminToken: ADMIN });
    const ip = freshIp();
    expect((await call(gate, "block", { ip: freshIp(), body: { ip, seconds: 60 } })).status).toBe(200);
    expect((await gate(request("/v1/things", { ip }))).status).toBe(403);
    expect((await gate(request("/elsewhere", { ip }))).status).toBe(200);
    expect((await call(gate, "block", { ip: freshIp(), body: { key: "sk-blocked", seconds: 60 } })).status).toBe(200);
    expect((await gate(request("/elsewhere", { key: "sk-blocked" }))).status).toBe(403);
  });
});

describe("an identity named wrongly", () => {
  it("is answered with every form a route takes: key, hash, ip, user and tag", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, timeout: 10_000, rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    for (const body of [{}, { ip: 5 }]) {
      const res = await call(gate, "usage", { ip: freshIp(), body });
      expect(res.status).toBe(400);
      const { detail } = (await res.json()) as { detail: string };
      for (const form of ['"key"', '"hash"', '"ip"', '"user"', '"tag"']) expect(detail, JSON.stringify(body)).toContain(form);
    }
  });
});

describe("an application's own identities", () => {
  it("are named by user (or their u-tag): usage, block and reset reach what the library counted, and no API key of the same text", async () => {
    const prefix = `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
    const config = { prefix, identity: { header: "x-api-key" }, rules: [{ name: "m", limit: 5, window: "1m" }] };
    const gate = makeGate(config, { adminToken: ADMIN });
    const limiter = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...config });
    for (let i = 0; i < 3; i++) await limiter.limit("user-42");
    const usage = (await (await call(gate, "usage", { body: { user: "user-42" } })).json()) as { identity: { kind: string; tag: string }; rules: { used: number }[] };
    expect(usage.identity.kind).toBe("user");
    expect(usage.identity.tag).toMatch(/^u[A-Za-z0-9_-]{22}$/);
    expect(usage.rules[0]!.used).toBe(3);
    // the API key "user-42" is another caller
    expect(((await (await call(gate, "usage", { body: { key: "user-42" } })).json()) as { rules: { used: number }[] }).rules[0]!.used).toBe(0);
    expect((await call(gate, "block", { body: { tag: usage.identity.tag, seconds: 60 } })).status).toBe(200);
    expect((await limiter.limit("user-42")).reason).toBe("blocked");
    expect((await call(gate, "unblock", { body: { user: "user-42" } })).status).toBe(200);
    expect((await call(gate, "reset", { body: { user: "user-42" } })).status).toBe(200);
    // another isolate (this limiter holds the block it saw for denialCacheMaxAge, as every isolate does)
    const fresh = createRateLimiter({ url: services.shimUrl, token: services.shimToken, ...config });
    expect((await fresh.limit("user-42")).headers.get("X-RateLimit-Remaining")).toBe("4");
    const both = await call(gate, "usage", { body: { user: "user-42", key: "k" } });
    expect(both.status).toBe(400);
    expect(((await both.json()) as { detail: string }).detail).toMatch(/"user" names an identity of the application's own/);
  });
});

describe("cached denials", () => {
  it("a reset clears the serving isolate's cached 429s at once", async () => {
    const gate = makeGate({ timeout: 10_000, rules: [{ name: "day", limit: 1, window: "1d" }] }, { adminToken: ADMIN });
    const ip = freshIp();
    expect(await statuses(gate, 3, "/", { ip })).toEqual([200, 429, 429]); // the last one from the cache
    expect((await call(gate, "reset", { body: { ip } })).status).toBe(200);
    expect(await statuses(gate, 2, "/", { ip })).toEqual([200, 429]);
  });

  it("an unblock clears them too, so an unblocked caller is asked about afresh", async () => {
    // two isolates of one deployment: b resets the count in Redis, which a's cached 429 hides
    const config = {
      prefix: `t${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`,
      identity: { header: "x-api-key" },
      timeout: 10_000,
      rules: [{ name: "day", limit: 1, window: "1d" }],
    };
    const [a, b] = [makeGate(config, { adminToken: ADMIN }), makeGate(config, { adminToken: ADMIN })];
    const key = `k-${crypto.randomUUID()}`;
    expect(await statuses(a, 2, "/", { key })).toEqual([200, 429]);
    expect((await call(b, "reset", { body: { key } })).status).toBe(200);
    expect(await statuses(a, 1, "/", { key })).toEqual([429]); // a still answers from its cache
    await call(a, "block", { body: { key, seconds: 600 } });
    expect((await call(a, "unblock", { body: { key } })).status).toBe(200);
    // the cached 429 is gone: the next request asks Redis, where the day's count is empty
    expect(await statuses(a, 1, "/", { key })).toEqual([200]);
  });

  it("a block answers 403 at once on the isolate that served it, not a cached 429", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, timeout: 10_000, rules: [{ name: "day", limit: 1, window: "1d" }] }, { adminToken: ADMIN });
    const key = `k-${crypto.randomUUID()}`;
    expect(await statuses(gate, 3, "/", { key })).toEqual([200, 429, 429]);
    expect((await call(gate, "block", { body: { key, seconds: 600 } })).status).toBe(200);
    const res = await gate(request("/", { key }));
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ type: "urn:slidegate:blocked" });
  });

  it("the admin prefix without its slash is the gate's too: never forwarded to the origin", async () => {
    const withToken = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] }, { adminToken: ADMIN });
    const res = await withToken(request("/__slidegate"));
    expect(res.status).toBe(308);
    expect(res.headers.get("Location")).toBe("/__slidegate/");
    const without = makeGate({ rules: [{ name: "m", limit: 5, window: "1m" }] });
    expect((await without(request("/__SLIDEGATE"))).status).toBe(404);
  });

  it("live at most denialCacheMaxAge on every other isolate", async () => {
    const { serving, elsewhere, advance } = isolatesWithClock({ rules: [{ name: "day", limit: 1, window: "1d" }] });
    const ip = freshIp();
    expect(await statuses(elsewhere, 2, "/", { ip })).toEqual([200, 429]); // cached there until the cap
    expect((await call(serving, "reset", { body: { ip } })).status).toBe(200);
    advance(4_000);
    expect(await statuses(elsewhere, 1, "/", { ip })).toEqual([429]); // still the cached answer
    advance(1_001);
    expect(await statuses(elsewhere, 1, "/", { ip })).toEqual([200]); // the cap ran out: Redis says go
  });

  it("an unblock reaches every other isolate within denialCacheMaxAge, however long the block was", async () => {
    const { serving, elsewhere, advance } = isolatesWithClock({ rules: [{ name: "day", limit: 100, window: "1d" }] });
    const ip = freshIp();
    expect((await call(serving, "block", { body: { ip, seconds: 600 } })).status).toBe(200);
    expect(await statuses(elsewhere, 1, "/", { ip })).toEqual([403]); // cached there until the cap, not for the block's 600 s
    expect((await call(serving, "unblock", { body: { ip } })).status).toBe(200);
    advance(4_000);
    expect(await statuses(elsewhere, 1, "/", { ip })).toEqual([403]);
    advance(1_001);
    expect(await statuses(elsewhere, 1, "/", { ip })).toEqual([200]);
  });

  it('a block or disabling of a key another isolate found unknown under unknownKeys "ip" holds there within denialCacheMaxAge; its address\'s block at once', async () => {
    const { serving, elsewhere, advance } = isolatesWithClock({ identity: { header: "x-api-key", unknownKeys: "ip" }, rules: [{ name: "day", limit: 100, window: "1d" }] });
    const [blocked, disabled] = [freshIp(), freshIp()];
    // elsewhere finds both keys unknown: it decides their requests as their addresses, without the key's call
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-blocked", ip: blocked })).toEqual([200]);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-disabled", ip: disabled })).toEqual([200]);
    expect((await call(serving, "block", { body: { key: "sk-made-up-blocked", seconds: 600 } })).status).toBe(200);
    expect((await call(serving, "keys/set", { body: { key: "sk-made-up-disabled", disabled: true } })).status).toBe(200);
    expect(await statuses(serving, 1, "/", { key: "sk-made-up-blocked", ip: blocked })).toEqual([403]);
    expect(await statuses(serving, 1, "/", { key: "sk-made-up-disabled", ip: disabled })).toEqual([403]);
    advance(4_000);
    // what the README states: until its memory of the registry's answer runs out, elsewhere still admits them
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-blocked", ip: blocked })).toEqual([200]);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-disabled", ip: disabled })).toEqual([200]);
    advance(1_001);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-blocked", ip: blocked })).toEqual([403]);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-disabled", ip: disabled })).toEqual([403]);
    // the identity those requests are decided as, blocked: held on the next one, everywhere
    const other = freshIp();
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-other", ip: other })).toEqual([200]);
    expect((await call(serving, "block", { body: { ip: other, seconds: 600 } })).status).toBe(200);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-made-up-other", ip: other })).toEqual([403]);
  });

  it("a key moved to a larger tier, given a larger override or enabled is let through within denialCacheMaxAge on an isolate that cached its 429 or 403", async () => {
    const { serving, elsewhere, advance } = isolatesWithClock({
      identity: { header: "x-api-key" },
      defaultTier: "free",
      tiers: { free: { rules: [{ name: "day", limit: 1, window: "1d" }] }, paid: { rules: [{ name: "day", limit: 100, window: "1d" }] } },
    });
    const [moved, overridden, enabled] = ["sk-moved", "sk-overridden", "sk-enabled"].map((k) => `${k}-${crypto.randomUUID()}`) as [string, string, string];
    for (const key of [moved, overridden]) expect((await call(serving, "keys/set", { body: { key, tier: "free" } })).status).toBe(200);
    // in the larger tier: its requests here and elsewhere after it is enabled fit
    expect((await call(serving, "keys/set", { body: { key: enabled, tier: "paid", disabled: true } })).status).toBe(200);
    for (const key of [moved, overridden]) expect(await statuses(elsewhere, 2, "/", { key }), key).toEqual([200, 429]);
    expect(await statuses(elsewhere, 1, "/", { key: enabled })).toEqual([403]);
    expect((await call(serving, "keys/update", { body: { key: moved, tier: "paid" } })).status).toBe(200);
    expect((await call(serving, "keys/override", { body: { key: overridden, rule: "day", limit: 100 } })).status).toBe(200);
    expect((await call(serving, "keys/update", { body: { key: enabled, disabled: false } })).status).toBe(200);
    // on the isolate that served the changes, at once
    for (const key of [moved, overridden, enabled]) expect(await statuses(serving, 1, "/", { key }), key).toEqual([200]);
    advance(4_000);
    for (const key of [moved, overridden]) expect(await statuses(elsewhere, 1, "/", { key }), key).toEqual([429]); // the cached answers, still
    expect(await statuses(elsewhere, 1, "/", { key: enabled })).toEqual([403]);
    advance(1_001);
    for (const key of [moved, overridden, enabled]) expect(await statuses(elsewhere, 1, "/", { key }), key).toEqual([200]);
  });

  it("a key registered after another isolate refused it as unknown is let through there within denialCacheMaxAge", async () => {
    const { serving, elsewhere, advance } = isolatesWithClock({ identity: { header: "x-api-key", unknownKeys: "reject" }, rules: [{ name: "day", limit: 100, window: "1d" }] });
    expect(await statuses(elsewhere, 1, "/", { key: "sk-registered-late" })).toEqual([401]);
    expect((await call(serving, "keys/set", { body: { key: "sk-registered-late", tier: "default" } })).status).toBe(200);
    advance(4_000);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-registered-late" })).toEqual([401]); // still the cached refusal
    advance(1_001);
    expect(await statuses(elsewhere, 1, "/", { key: "sk-registered-late" })).toEqual([200]);
  });
});

describe("a field or query parameter a route does not take", () => {
  it("is refused with 400 naming it, and the route does nothing: a typo never runs the route as if the field were left out", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, timeout: 10_000, rules: [{ name: "m", limit: 2, window: "1m" }] }, { adminToken: ADMIN });
    const ip = freshIp();
    expect(await statuses(gate, 3, "/", { ip })).toEqual([200, 200, 429]);
    expect((await call(gate, "keys/set", { ip: freshIp(), body: { key: "sk-typed", tier: "default" } })).status).toBe(200);
    const refused: [string, Record<string, unknown>, string][] = [
      ["usage", { ip, rule: "m" }, "rule"],
      // meant for one rule, it reset every window of the address
      ["reset", { ip, rule: "m" }, "rule"],
      ["block", { ip, seconds: 60, reason: "abuse" }, "reason"],
      ["unblock", { ip, seconds: 60 }, "seconds"],
      ["keys/get", { key: "sk-typed", tier: "default" }, "tier"],
      ["keys/delete", { key: "sk-typed", everything: true }, "everything"],
      // the limit alone was set, the window the operator typed dropped
      ["keys/override", { key: "sk-typed", rule: "m", limit: 9, windw: "10s" }, "windw"],
      // the first page again, as if no cursor were given
      ["keys/list", { curser: "ab".repeat(32) }, "curser"],
      // a dry run asked for by another name imported the entries
      ["keys/import", { entries: [{ key: "sk-typed", disabled: true }], dryRun: true }, "dryRun"],
      ["configuration", { section: "rules" }, "section"],
    ];
    for (const [route, body, field] of refused) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(res.headers.get("Content-Type"), route).toBe("application/problem+json");
      expect(((await res.json()) as { detail: string }).detail, route).toMatch(new RegExp(`^"${field}": unknown field \\(allowed: `));
    }
    // a misspelling is told the field it was meant to be
    for (const [route, body, meant] of [
      ["keys/override", { key: "sk-typed", rule: "m", limit: 9, windw: "10s" }, "window"],
      ["keys/list", { curser: "ab".repeat(32) }, "cursor"],
    ] as const) {
      const { detail } = (await (await call(gate, route, { ip: freshIp(), body })).json()) as { detail: string };
      expect(detail, route).toMatch(new RegExp(`; did you mean "${meant}"\\?$`));
    }
    // every unknown field named, each cut to 64 characters (a name sent by mistake may be a raw key), on the console's routes too
    const long = `sk-live-${"x".repeat(100)}`;
    for (const route of ["figures", "usage"]) {
      const res = await call(gate, route, { ip: freshIp(), body: { ...(route === "usage" && { ip }), minuts: 5, [long]: 1 } });
      const { detail } = (await res.json()) as { detail: string };
      expect([res.status, detail], route).toEqual([400, expect.stringMatching(new RegExp(`^"minuts", "${long.slice(0, 64)}": unknown fields \\(allowed: `))]);
    }
    // and where an entry's fields are checked (keys/set, keys/import): an entry's, an override's, a rule's name
    for (const [route, body, at] of [
      ["keys/set", { key: "sk-typed", [long]: "default" }, ""],
      ["keys/set", { key: "sk-typed", overrides: { [long]: { limit: 1 } } }, "overrides."],
      ["keys/set", { key: "sk-typed", overrides: { m: { [long]: 1 } } }, "overrides.m."],
      ["keys/import", { entries: [{ key: "sk-typed", [long]: "default" }] }, "Nothing was imported: entries[0]."],
    ] as const) {
      const res = await call(gate, route, { ip: freshIp(), body });
      const { detail } = (await res.json()) as { detail: string };
      expect([res.status, detail.startsWith(`${at}${long.slice(0, 64)}: `), detail.includes(long.slice(0, 65))], route).toEqual([400, true, false]);
    }
    // parameters in the query rather than the body: every admin route takes its fields in the body
    for (const [route, body, field] of [
      ["reset?rule=m", { ip }, "rule"],
      ["keys/list?cursor=abc", {}, "cursor"],
      ["figures?minutes=5", {}, "minutes"],
    ] as const) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(((await res.json()) as { detail: string }).detail, route).toMatch(new RegExp(`^query parameter "${field}": `));
    }
    // nothing was reset, blocked, overridden, disabled or deleted
    expect(await statuses(gate, 1, "/", { ip })).toEqual([429]);
    const entry = await call(gate, "keys/get", { ip: freshIp(), body: { key: "sk-typed" } });
    expect(await entry.json()).toMatchObject({ tier: "default", disabled: false, overrides: {} });
  });
});

describe("a body that names a field twice in one object", () => {
  it("is refused with 400 naming the object and the field, and the route writes nothing, where JSON.parse would take the last", async () => {
    const gate = makeGate(
      {
        identity: { header: "x-api-key" },
        tiers: { free: { rules: [{ name: "m", limit: 2, window: "1m" }] }, paid: { rules: [{ name: "m", limit: 20, window: "1m" }] } },
        defaultTier: "free",
      },
      { adminToken: ADMIN },
    );
    const bodies: [string, string, string][] = [
      ["keys/set", '{"key":"sk-twice","tier":"paid","tier":"free"}', 'body: names the field "tier" twice'],
      ["keys/import", '{"entries":[{"key":"sk-twice","tier":"free"},{"key":"sk-other","tier":"paid","key":"sk-twice"}]}', 'body.entries[1]: names the field "key" twice'],
    ];
    for (const [route, body, detail] of bodies) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(res.headers.get("Content-Type"), route).toBe("application/problem+json");
      expect(((await res.json()) as { detail: string }).detail, route).toBe(`${detail}; send it once.`);
    }
    for (const key of ["sk-twice", "sk-other"]) expect((await call(gate, "keys/get", { ip: freshIp(), body: { key } })).status, key).toBe(404);
  });
});

describe("a body nested deeper than any route reads", () => {
  it("is refused with 400 saying so, not a 500, and the route writes nothing", async () => {
    const gate = makeGate({ identity: { header: "x-api-key" }, timeout: 10_000, rules: [{ name: "m", limit: 2, window: "1m" }] }, { adminToken: ADMIN });
    // a few hundred kilobytes of brackets: JSON.parse takes them, a recursive walk of the value overflows the stack
    const deep = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const bodies: [string, string][] = [
      ["keys/set", `{"key":"sk-nested","label":${deep(100_000)}}`],
      ["keys/override", `{"key":"sk-nested","rule":"m","limit":${deep(100_000)}}`],
      ["keys/import", `{"entries":[{"key":"sk-nested","overrides":{"m":{"limit":${deep(100_000)}}}}]}`],
      ["usage", `{"key":${deep(100_000)}}`],
    ];
    for (const [route, body] of bodies) {
      const res = await call(gate, route, { ip: freshIp(), body });
      expect(res.status, route).toBe(400);
      expect(res.headers.get("Content-Type"), route).toBe("application/problem+json");
      expect(((await res.json()) as { detail: string }).detail, route).toMatch(/^The body nests deeper than \d+ levels of objects and arrays/);
    }
    expect((await call(gate, "keys/get", { ip: freshIp(), body: { key: "sk-nested" } })).status).toBe(404);
    expect(gate.logs.filter((l) => l.line.event === "slidegate.internal_error")).toEqual([]);
  });
});
