import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { key, type OwnShim, raw, startOwnShim, upstash } from "../helpers/shim.ts";

/**
 * The response bodies the official client received while `call` ran: its own fetch, observed.
 * The client parses JSON into JavaScript numbers, so what Upstash's exact digits look like on
 * the wire is only visible here.
 */
async function onTheWire<T>(call: () => Promise<T>): Promise<{ value: T; bodies: string[] }> {
  const original = globalThis.fetch;
  const bodies: string[] = [];
  globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
    const res = await original(...args);
    bodies.push(await res.clone().text());
    return res;
  };
  try {
    return { value: await call(), bodies };
  } finally {
    globalThis.fetch = original;
  }
}

describe("FCALL_RO as Upstash runs it", () => {
  const redis = upstash();
  const id = crypto.randomUUID().replaceAll("-", "");
  const lib = `semantics_${id}`;
  const name = (fn: string) => `${fn}_${id}`; // function names are global across libraries
  const code = [
    `#!lua name=${lib}`,
    `redis.register_function('${name("plain_get")}', function(keys, args) return redis.call('GET', keys[1]) end)`,
    `redis.register_function{function_name='${name("ro_get")}', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}`,
    `redis.register_function('${name("set_value")}', function(keys, args) return redis.call('SET', keys[1], args[1]) end)`,
    `redis.register_function{function_name='${name("bad_ro_write")}', callback=function(keys, args) return redis.call('SET', keys[1], args[1]) end, flags={'no-writes'}}`,
    `local function shout(text) return string.upper(text) end`,
    `redis.register_function('${name("shout")}', function(keys, args) return {shout(args[1]), #keys, tonumber(args[2]) + 1} end)`,
    "",
  ].join("\n");

  beforeAll(async () => {
    expect(await redis.functions.load({ code, replace: true })).toBe(lib);
  });
  afterAll(async () => {
    await redis.functions.delete(lib).catch(() => {});
  });

  it("runs a function registered without no-writes while it only reads", async () => {
    const k = key("fcall-ro");
    await redis.set(k, "stored");
    expect(await redis.functions.callRo(name("plain_get"), [k])).toBe("stored");
    expect(await redis.functions.callRo(name("ro_get"), [k])).toBe("stored");
    expect(await redis.functions.callRo(name("shout"), [k], ["quiet", "41"])).toEqual(["QUIET", 1, 42]);
  });

  it("fails a writing function with the read-only error, and writes nothing", async () => {
    const k = key("fcall-ro-write");
    await expect(redis.functions.callRo(name("set_value"), [k], ["x"])).rejects.toThrow("Write commands are not allowed from read-only scripts");
    await expect(redis.functions.callRo(name("bad_ro_write"), [k], ["x"])).rejects.toThrow("Write commands are not allowed from read-only scripts");
    expect(await redis.get(k)).toBeNull();
    expect(await redis.functions.call(name("set_value"), [k], ["written"])).toBe("OK");
    expect(await redis.get(k)).toBe("written");
  });

  it("keeps its place in a pipeline and a transaction", async () => {
    const k = key("fcall-ro-batch");
    const p = redis.pipeline();
    p.set(k, "first");
    p.functions.callRo(name("plain_get"), [k]);
    p.set(k, "second");
    p.functions.callRo(name("plain_get"), [k]);
    expect(await p.exec()).toEqual(["OK", "first", "OK", "second"]);
    const tx = redis.multi();
    tx.set(k, "third");
    tx.functions.callRo(name("plain_get"), [k]);
    expect(await tx.exec()).toEqual(["OK", "third"]);
  });

  it("leaves the library as loaded: FUNCTION LIST shows the flags it was registered with", async () => {
    const [library] = await redis.functions.list({ libraryName: lib });
    const flags = Object.fromEntries(library!.functions.map((f) => [f.name, f.flags]));
    expect(flags).toEqual({ [name("plain_get")]: [], [name("ro_get")]: ["no-writes"], [name("set_value")]: [], [name("bad_ro_write")]: ["no-writes"], [name("shout")]: [] });
  });

  it("answers an unknown function with Redis's own error", async () => {
    await expect(redis.functions.callRo(`missing_${id}`, [])).rejects.toThrow("Function not found");
  });

  it("answers more keys than arguments with Redis's own error, as for a no-writes function, never the shim's wrapper's", async () => {
    const k = key("fcall-ro-numkeys");
    for (const fn of ["plain_get", "ro_get"]) {
      for (const numkeys of [1, 2, 3]) {
        const res = await raw("/", JSON.stringify(["FCALL_RO", name(fn), numkeys, ...(numkeys > 1 ? [k] : [])]));
        expect({ fn, numkeys, status: res.status, body: res.json }).toEqual({
          fn,
          numkeys,
          status: 400,
          body: { error: "ERR Number of keys can't be greater than number of args" },
        });
      }
    }
  });
});

describe("FCALL_RO of a large library, many times in one request", () => {
  let own: OwnShim;
  const filler = `-- ${"x".repeat(200_000)}`;
  const code = ["#!lua name=large", filler, "redis.register_function('large_get', function(keys, args) return redis.call('GET', keys[1]) end)", ""].join("\n");
  beforeAll(async () => {
    own = await startOwnShim();
    await own.admin.function("LOAD", code);
  });
  afterAll(() => own?.close());

  /** Bytes Redis has read and written since it started: what the shim sent it and got back. */
  const traffic = async () => {
    const info = await own.admin.info("stats");
    const read = (name: string) => Number(new RegExp(`^${name}:(\\d+)`, "m").exec(info)![1]);
    return { input: read("total_net_input_bytes"), output: read("total_net_output_bytes") };
  };

  for (const path of ["/pipeline", "/multi-exec"]) {
    it(`moves the library's code between the shim and Redis about once for 50 calls in one ${path} request, not once per call`, async () => {
      await own.admin.set("large:k", "stored");
      const before = await traffic();
      const res = await fetch(own.shim.url + path, {
        method: "POST",
        headers: { authorization: `Bearer ${own.token}` },
        body: JSON.stringify(Array.from({ length: 50 }, () => ["FCALL_RO", "large_get", 1, "large:k"])),
      });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual(Array.from({ length: 50 }, () => ({ result: "stored" })));
      const after = await traffic();
      // in library lengths: once each way is 1; once per call, 50
      const times = { input: Math.round((after.input - before.input) / code.length), output: Math.round((after.output - before.output) / code.length) };
      expect(times.input).toBeLessThanOrEqual(2);
      expect(times.output).toBeLessThanOrEqual(2);
    });
  }
});

describe("COPY onto itself as Upstash answers it", () => {
  for (const [label, options] of [
    ["base64 replies", {}],
    ["plain replies", { responseEncoding: false as const }],
  ] as const) {
    it(`answers 0 (the client's NOT_COPIED), with and without REPLACE, and keeps the value (${label})`, async () => {
      const redis = upstash(options);
      const k = key("copy-self");
      await redis.set(k, "value");
      expect(await redis.copy(k, k)).toBe("NOT_COPIED");
      expect(await redis.copy(k, k, { replace: true })).toBe("NOT_COPIED");
      expect(await redis.copy(key("copy-missing"), key("copy-missing"))).toBe("NOT_COPIED");
      expect(await redis.get(k)).toBe("value");
      const other = key("copy-other");
      expect(await redis.copy(k, other)).toBe("COPIED");
      expect(await redis.get(other)).toBe("value");
      const tx = redis.multi();
      tx.copy(k, k);
      tx.get(k);
      expect(await tx.exec()).toEqual(["NOT_COPIED", "value"]);
    });
  }
  it("puts a plain 0 on the wire", async () => {
    const k = key("copy-wire");
    expect((await raw("/", JSON.stringify(["COPY", k, k]))).json).toEqual({ result: 0 });
  });
});

describe("SCAN … WITHTYPE as Upstash answers it", () => {
  it("answers [cursor, [key, type, …]], which the client reads as keys with their types", async () => {
    const redis = upstash();
    const prefix = key("scan-typed");
    await redis.set(`${prefix}:s`, "v");
    await redis.hset(`${prefix}:h`, { f: "v" });
    await redis.zadd(`${prefix}:z`, { score: 1, member: "m" });
    await redis.rpush(`${prefix}:l`, "a");
    await redis.sadd(`${prefix}:set`, "a");
    const seen: { key: string; type: string }[] = [];
    let cursor: string | number = 0;
    do {
      const [next, keys] = (await redis.scan(cursor, { match: `${prefix}:*`, count: 1000, withType: true })) as unknown as [string, { key: string; type: string }[]];
      seen.push(...keys);
      cursor = next;
    } while (String(cursor) !== "0");
    expect(seen.sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { key: `${prefix}:h`, type: "hash" },
      { key: `${prefix}:l`, type: "list" },
      { key: `${prefix}:s`, type: "string" },
      { key: `${prefix}:set`, type: "set" },
      { key: `${prefix}:z`, type: "zset" },
    ]);
  });

  it("keeps MATCH, COUNT and TYPE, in any order around WITHTYPE", async () => {
    const prefix = key("scan-typed-raw");
    await raw(
      "/pipeline",
      JSON.stringify([
        ["SET", `${prefix}:a`, "1"],
        ["HSET", `${prefix}:b`, "f", "v"],
      ]),
    );
    const found: unknown[] = [];
    let cursor = "0";
    do {
      const res = await raw("/", JSON.stringify(["SCAN", cursor, "withtype", "TYPE", "hash", "MATCH", `${prefix}:*`, "COUNT", 1000]));
      const [next, pairs] = (res.json as { result: [string, string[]] }).result;
      found.push(...pairs);
      cursor = next;
    } while (cursor !== "0");
    expect(found).toEqual([`${prefix}:b`, "hash"]);
  });

  it("leaves a plain SCAN as Redis answers it", async () => {
    const k = key("scan-plain");
    await raw("/", JSON.stringify(["SET", k, "1"]));
    const res = await raw("/", JSON.stringify(["SCAN", "0", "MATCH", k, "COUNT", 100000]));
    expect(res.json).toEqual({ result: ["0", [k]] });
  });

  it("answers an invalid cursor or option with Redis's own error text, as a plain SCAN does", async () => {
    for (const args of [["not-a-cursor"], ["0", "COUNT", "0"], ["0", "BOGUS"], ["0", "COUNT", "many"]]) {
      const plain = await raw("/", JSON.stringify(["SCAN", ...args]));
      const typed = await raw("/", JSON.stringify(["SCAN", ...args, "WITHTYPE"]));
      expect(plain.status, args.join(" ")).toBe(400);
      expect({ args, status: typed.status, body: typed.json }).toEqual({ args, status: 400, body: plain.json });
    }
  });
});

describe("integers past 2^53 on the wire", () => {
  const max = "9223372036854775807";
  const min = "-9223372036854775808";

  it("sends Redis's exact digits for a single command, a pipeline and a transaction", async () => {
    const redis = upstash();
    const k = key("bigint");
    await redis.set(k, "9223372036854775806");
    const single = await onTheWire(() => redis.incr(k));
    expect(single.bodies.join()).toMatch(new RegExp(`"result":${max}[,}]`));
    expect(single.value).toBe(Number(max)); // what JSON.parse makes of those digits, as from Upstash

    const low = key("bigint-low");
    await redis.set(low, "-9223372036854775807");
    const tx = await onTheWire(() => redis.multi().decr(low).incrby(low, 0).exec());
    expect(tx.bodies.join()).toMatch(new RegExp(`\\[\\{"result":${min}\\},\\{"result":${min}\\}\\]`));

    const odd = key("bigint-odd");
    await redis.set(odd, "9007199254740992");
    const piped = await onTheWire(() => redis.pipeline().incr(odd).incrby(odd, 2).exec());
    expect(piped.bodies.join()).toContain('[{"result":9007199254740993},{"result":9007199254740995}]');
  });

  it("keeps the digits inside array replies", async () => {
    const redis = upstash({ responseEncoding: false });
    const k = key("bigint-array");
    await redis.exec(["BITFIELD", k, "SET", "i64", "0", max]);
    const typed = await onTheWire(() => redis.exec(["BITFIELD", k, "GET", "i64", "0", "GET", "u63", "1"]));
    expect(typed.bodies.join()).toContain(`[${max},${max}]`);
  });
});
