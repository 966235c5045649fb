import { createHash } from "node:crypto";
import { Ratelimit } from "@upstash/ratelimit";
import { describe, expect, it } from "vitest";
import { key, raw, services, upstash } from "../helpers/shim.ts";

const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");

// Every behaviour the client relies on, once with its defaults (base64 replies,
// auto-pipelining) and once with plain-text replies.
for (const [label, options] of [
  ["base64 replies (client defaults)", {}],
  ["plain replies (responseEncoding: false)", { responseEncoding: false as const }],
] as const) {
  describe(`shim through @upstash/redis, ${label}`, () => {
    const redis = upstash(options);

    it("round-trips strings with + / = and non-ASCII text", async () => {
      const k = key("text");
      const value = "a+b/c==d ü 日本語 🚦";
      expect(await redis.set(k, value)).toBe("OK");
      expect(await redis.get(k)).toBe(value);
    });

    it("returns integers above 2^31 exactly", async () => {
      const k = key("int");
      expect(await redis.incrby(k, 2 ** 40)).toBe(2 ** 40);
      expect(await redis.incrby(k, 2 ** 33 + 7)).toBe(2 ** 40 + 2 ** 33 + 7);
    });

    it("returns nil as null", async () => {
      expect(await redis.get(key("missing"))).toBeNull();
    });

    it("returns nested arrays: ZRANGE WITHSCORES and SCAN", async () => {
      const k = key("zset");
      await redis.zadd(k, { score: 1.5, member: "one/+" }, { score: 2, member: "two" });
      expect(await redis.zrange(k, 0, -1, { withScores: true })).toEqual(["one/+", 1.5, "two", 2]);
      expect((await raw("/", JSON.stringify(["ZRANGE", k, 0, -1, "WITHSCORES"]))).json).toEqual({ result: ["one/+", "1.5", "two", "2"] });
      // RESP2 nesting as it is: flat pairs inside, a cursor and a list for SCAN
      const scanned = (await raw("/", JSON.stringify(["SCAN", 0, "MATCH", k, "COUNT", 1000]))).json as { result: [string, string[]] };
      expect(scanned.result).toEqual([expect.stringMatching(/^\d+$/), expect.any(Array)]);
      let cursor: string | number = 0;
      const seen: string[] = [];
      do {
        const [next, keys]: [string | number, string[]] = await redis.scan(cursor, { match: k, count: 1000 });
        seen.push(...keys);
        cursor = next;
      } while (String(cursor) !== "0");
      expect(seen).toEqual([k]);
    });

    it('returns "OK" at top level, inside a pipeline and inside a transaction', async () => {
      const k = key("ok");
      expect(await redis.set(k, "1")).toBe("OK");
      const p = redis.pipeline();
      p.set(k, "2");
      p.get(k);
      expect(await p.exec()).toEqual(["OK", 2]);
      const tx = redis.multi();
      tx.set(k, "3");
      tx.get(k);
      expect(await tx.exec()).toEqual(["OK", 3]);
    });

    it("keeps a pipeline going past a failing command", async () => {
      const k = key("pipe");
      const p = redis.pipeline();
      p.set(k, "text");
      p.incr(k); // WRONGTYPE-like: not an integer
      p.get(k);
      const results = await p.exec({ keepErrors: true });
      expect(results[0]).toEqual({ result: "OK", error: undefined });
      expect(results[1]!.error).toMatch(/not an integer/);
      expect(results[2]).toEqual({ result: "text", error: undefined });
    });

    it("reports a runtime error inside a transaction per command", async () => {
      const k = key("tx");
      const tx = redis.multi();
      tx.set(k, "text");
      tx.incr(k);
      tx.get(k);
      const results = await tx.exec({ keepErrors: true });
      expect(results[0]!.result).toBe("OK");
      expect(results[1]!.error).toMatch(/not an integer/);
      expect(results[2]!.result).toBe("text");
    });

    it("runs EVAL, EVALSHA, SCRIPT LOAD and SCRIPT EXISTS", async () => {
      const script = `return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1, "${crypto.randomUUID()}"}`;
      const k = key("eval");
      const evaluated = (await redis.eval(script, [k], ["x/+=", 41])) as unknown[];
      expect(evaluated.slice(0, 3)).toEqual([k, "x/+=", 42]);
      const sha = await redis.scriptLoad(script);
      expect(sha).toBe(sha1(script));
      expect(await redis.evalsha(sha, [k], ["y", 1])).toEqual([k, "y", 2, evaluated[3]]);
      expect(await redis.scriptExists(sha, "0".repeat(40))).toEqual([1, 0]);
    });

    it("runs a script with #!lua flags=allow-key-locking by the SHA1 of its original text", async () => {
      const script = `#!lua flags=allow-key-locking\nreturn redis.call('INCRBY', KEYS[1], ARGV[1]) -- ${crypto.randomUUID()}`;
      const k = key("flagged");
      const sha = await redis.scriptLoad(script);
      expect(sha).toBe(sha1(script));
      expect(await redis.scriptExists(sha)).toEqual([1]);
      expect(await redis.evalsha(sha, [k], [5])).toBe(5);
      expect(await redis.eval(script, [k], [2])).toBe(7);
    });

    it("reads an error a script nests in its reply as its text, at any depth", async () => {
      // base64 replies once gave the text unencoded, which the client decoded into bytes ("3!+…")
      const script = `return {1, redis.error_reply('My Error'), {redis.error_reply('WRONGTYPE nested ü')}} -- ${crypto.randomUUID()}`;
      expect(await redis.eval(script, [], [])).toEqual([1, "My Error", ["WRONGTYPE nested ü"]]);
    });
  });
}

describe("shim scripts after SCRIPT FLUSH", () => {
  it("answers NOSCRIPT, and the client's Script falls back to EVAL", async () => {
    const redis = upstash();
    const text = `#!lua flags=allow-key-locking\nreturn ARGV[1] .. "${crypto.randomUUID()}"`;
    const sha = await redis.scriptLoad(text);
    await redis.scriptFlush();
    await expect(redis.evalsha(sha, [], ["x"])).rejects.toThrow(/NOSCRIPT No matching script/);
    expect(await redis.scriptExists(sha)).toEqual([0]);
    const script = redis.createScript<string>(text);
    expect(await script.exec([], ["ok:"])).toMatch(/^ok:/);
    expect(await redis.scriptExists(sha)).toEqual([1]);
  });
});

describe("shim wire details", () => {
  it("refuses a missing and a wrong token with a JSON 401", async () => {
    const s = services();
    for (const authorization of [undefined, "Bearer wrong", `Bearer ${s.shimToken}x`, s.shimToken]) {
      const res = await fetch(s.shimUrl, { method: "POST", body: '["PING"]', headers: authorization ? { authorization } : {} });
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: "Unauthorized" });
    }
    await expect(upstash({ token: "wrong" }).ping()).rejects.toThrow(/Unauthorized/);
  });

  it("names the Bearer scheme in every 401 (WWW-Authenticate, which HTTP requires of a 401)", async () => {
    const s = services();
    for (const headers of [{}, { authorization: "Bearer wrong" }, { authorization: "Basic d3Jvbmc6" }] as Record<string, string>[]) {
      const res = await fetch(s.shimUrl, { method: "POST", body: '["PING"]', headers });
      expect([res.status, res.headers.get("www-authenticate")]).toEqual([401, "Bearer"]);
    }
    const ok = await fetch(s.shimUrl, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${s.shimToken}` } });
    expect([ok.status, ok.headers.get("www-authenticate")]).toEqual([200, null]);
  });

  it("takes the Bearer scheme in any case and followed by any number of spaces, as HTTP defines it, and still refuses another scheme or a wrong token", async () => {
    const s = services();
    const status = async (authorization: string) => (await fetch(s.shimUrl, { method: "POST", body: '["PING"]', headers: { authorization } })).status;
    for (const scheme of ["bearer", "BEARER", "bEaReR"]) expect(await status(`${scheme} ${s.shimToken}`), scheme).toBe(200);
    // credentials = auth-scheme 1*SP token68 (RFC 9110, 11.4): the gate's admin API reads it so too
    expect(await status(`Bearer   ${s.shimToken}`), "three spaces").toBe(200);
    for (const refused of [`Basic ${s.shimToken}`, `bearer ${s.shimToken}x`, `bearer${s.shimToken}`, `Bearers ${s.shimToken}`]) expect(await status(refused), refused).toBe(401);
  });

  it("sends a different upstash-sync-token on every response", async () => {
    const tokens = new Set<string>();
    for (let i = 0; i < 5; i++) tokens.add((await raw("/", '["PING"]')).headers.get("upstash-sync-token") ?? "");
    expect(tokens.size).toBe(5);
    expect(tokens.has("")).toBe(false);
  });

  it("base64-encodes every string at every depth, OK included, and leaves numbers and nil", async () => {
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    const k = key("depth");
    const ok = await raw("/", JSON.stringify(["SET", k, "v"]), { "upstash-encoding": "base64" });
    expect(ok.json).toEqual({ result: b64("OK") });
    const nested = await raw("/", JSON.stringify(["EVAL", "return {1, 'a', {'OK', false}}", 0]), { "upstash-encoding": "base64" });
    expect(nested.json).toEqual({ result: [1, b64("a"), [b64("OK"), null]] });
    // an error inside a reply is one of its strings: encoded too, or the client decodes its text into bytes
    const withError = await raw("/", JSON.stringify(["EVAL", "return {1, redis.error_reply('My Error')}", 0]), { "upstash-encoding": "base64" });
    expect(withError.json).toEqual({ result: [1, b64("My Error")] });
  });

  it("turns numbers and booleans into the text JavaScript prints", async () => {
    const k = key("numbers");
    const res = await raw(
      "/pipeline",
      JSON.stringify([
        ["RPUSH", k, 1, 1.5, 1712345678901, -0.25, 1e21, true, false],
        ["LRANGE", k, 0, -1],
      ]),
    );
    expect((res.json as { result: unknown }[])[1]!.result).toEqual(["1", "1.5", "1712345678901", "-0.25", "1e+21", "true", "false"]);
  });

  it("passes an integer past 2^53 on with the digits sent, never the nearest double (…993 stored as …992)", async () => {
    const counter = key("big-incr");
    // read as a double, 9007199254740993 is …992, and 123…123 is 1.2345678901234568e+22
    const single = await raw("/", `["INCRBY", "${counter}", 9007199254740993]`);
    expect(single.text).toBe('{"result":9007199254740993}');
    const k = key("big-list");
    const listed = await raw("/pipeline", `[["RPUSH", "${k}", -9007199254740993, 12345678901234567890123, 9007199254740992, 1e21, 1.5], ["LRANGE", "${k}", 0, -1]]`);
    expect((listed.json as { result: unknown }[])[1]!.result).toEqual(["-9007199254740993", "12345678901234567890123", "9007199254740992", "1e+21", "1.5"]);
    const tx = await raw("/multi-exec", `[["INCRBY", "${counter}", 18014398509481985], ["GET", "${counter}"]]`);
    expect(tx.text).toBe('[{"result":27021597764222978},{"result":"27021597764222978"}]');
  });

  it("answers HGETALL in the raw RESP2 shape (a flat array)", async () => {
    const k = key("hash");
    await raw("/", JSON.stringify(["HSET", k, "f", "v"]));
    expect((await raw("/", JSON.stringify(["HGETALL", k]))).json).toEqual({ result: ["f", "v"] });
  });

  it("answers a discarded transaction with a non-2xx JSON error", async () => {
    const res = await raw("/multi-exec", JSON.stringify([["SET", key("tx")], ["PING"]]));
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ error: expect.stringMatching(/^EXECABORT/) });
  });

  it("keeps Redis error text verbatim with a 400 for a single command", async () => {
    const res = await raw("/", JSON.stringify(["EVALSHA", "f".repeat(40), 0]));
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ error: "NOSCRIPT No matching script. Please use EVAL." });
  });

  it("refuses connection-state and blocking commands, naming them", async () => {
    const cases: [unknown[], string][] = [
      [["SELECT", 1], "SELECT"],
      [["MULTI"], "MULTI"],
      [["SUBSCRIBE", "c"], "SUBSCRIBE"],
      [["BLPOP", "k", 0], "BLPOP"],
      [["XREAD", "BLOCK", 0, "STREAMS", "s", "$"], "XREAD BLOCK"],
      [["client", "reply", "OFF"], "CLIENT REPLY"],
      [["WATCH", "k"], "WATCH"],
      [["AUTH", "x"], "AUTH"],
      [["HELLO", 3], "HELLO"],
      [["QUIT"], "QUIT"],
    ];
    for (const [command, label] of cases) {
      const res = await raw("/", JSON.stringify(command));
      expect(res.status, label).toBe(400);
      expect((res.json as { error: string }).error).toMatch(new RegExp(`^ERR Command is not available: '${label}' \\(.+\\)$`));
    }
    const piped = await raw("/pipeline", JSON.stringify([["PING"], ["SELECT", 2], ["PING"]]));
    expect(piped.json).toEqual([{ result: "PONG" }, { error: expect.stringMatching(/^ERR Command is not available: 'SELECT'/) }, { result: "PONG" }]);
    // a stream key may be called "block": only options before STREAMS count
    const k = key("block");
    expect((await raw("/", JSON.stringify(["XREAD", "COUNT", 1, "STREAMS", "block", k, "0", "0"]))).json).toEqual({ result: null });
  });

  it("answers 200 concurrent requests, each correctly", async () => {
    const redis = upstash();
    const prefix = key("concurrent");
    const results = await Promise.all(Array.from({ length: 200 }, (_, i) => redis.incrby(`${prefix}:${i % 10}`, i)));
    // each answer is its own request's: per key, the running totals step by exactly that key's increments
    for (let j = 0; j < 10; j++) {
      const steps = results
        .filter((_, i) => i % 10 === j)
        .sort((a, b) => a - b)
        .map((r, n, sorted) => r - (n ? sorted[n - 1]! : 0));
      expect(steps.sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, n) => n * 10 + j).sort((a, b) => a - b));
    }
    const totals = await Promise.all(Array.from({ length: 10 }, (_, j) => redis.get<number>(`${prefix}:${j}`)));
    for (const [j, t] of totals.entries()) expect(t).toBe(Array.from({ length: 20 }, (_, n) => n * 10 + j).reduce((a, b) => a + b));
  });
});

describe("shim bad input", () => {
  const cases: [string, string, string | undefined, number, RegExp][] = [
    ["non-JSON body", "/", "{nope", 400, /not valid JSON/],
    ["an object instead of a command", "/", '{"cmd":"PING"}', 400, /must be a JSON array/],
    ["an empty command", "/", "[]", 400, /empty command/],
    ["a null argument", "/", '["SET","k",null]', 400, /body\[2\] is null/],
    ["a nested array argument", "/", '["SET","k",["v"]]', 400, /body\[2\] is an array/],
    ["an empty pipeline", "/pipeline", "[]", 400, /non-empty JSON array of commands/],
    ["a pipeline of non-arrays", "/pipeline", '["PING"]', 400, /command 0 must be a JSON array/],
    ["an unknown path", "/nowhere", '["PING"]', 404, /unknown path/],
  ];
  for (const [name, path, body, status, message] of cases) {
    it(`answers ${name} with a JSON ${status}`, async () => {
      const res = await raw(path, body);
      expect(res.status).toBe(status);
      expect((res.json as { error: string }).error).toMatch(message);
    });
  }

  it("answers a wrong method with a JSON 405", async () => {
    const res = await raw("/", undefined, {}, "GET");
    expect(res.status).toBe(405);
    expect((res.json as { error: string }).error).toMatch(/use POST/);
  });

  it("answers a body over the cap with a JSON 413 and keeps serving", async () => {
    const res = await raw("/", JSON.stringify(["SET", key("big"), "x".repeat(1024 * 1024 + 10)]));
    expect(res.status).toBe(413);
    expect((res.json as { error: string }).error).toMatch(/larger than the limit of 1048576 bytes/);
    expect((await raw("/", '["PING"]')).json).toEqual({ result: "PONG" });
  });
});

describe("@upstash/ratelimit through the shim", () => {
  it("limits 5 per 10 s unchanged: five admitted, the sixth denied", async () => {
    const limiter = new Ratelimit({ redis: upstash(), limiter: Ratelimit.slidingWindow(5, "10 s"), prefix: key("ratelimit") });
    const outcomes = [];
    for (let i = 0; i < 6; i++) outcomes.push((await limiter.limit("caller")).success);
    expect(outcomes).toEqual([true, true, true, true, true, false]);
  });
});
