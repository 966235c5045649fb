import { request } from "node:http";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OwnShim, type ShimProcess, startOwnShim, startShimProcess } from "../helpers/shim.ts";
import { until } from "../helpers/until.ts";

// A Redis and shim of this file's own: the transaction test pauses its Redis's writes, and
// the shim runs with a cap of one transaction connection and a one-place queue.
const BODY_LIMIT = 1024;
let own: OwnShim;
beforeAll(async () => {
  own = await startOwnShim({ maxTransactions: 1, transactionQueue: 1, bodyLimit: BODY_LIMIT, commandTimeoutMs: 60_000 });
});
afterAll(async () => {
  await own?.admin.call("CLIENT", "UNPAUSE").catch(() => {});
  await own?.close();
});

const redisConnections = async () => ((await own.admin.call("CLIENT", "LIST")) as string).trim().split("\n").length;

describe("shim transaction connections", () => {
  it("queues a transaction while the cap is reached, refuses one beyond the queue with a 503, and never opens more", async () => {
    const redis = own.client();
    expect(await redis.multi().set("limits:warm", "1").exec()).toEqual(["OK"]); // one idle lease exists now
    const before = await redisConnections();

    // Redis holds every write until unpaused: the first transaction keeps its connection.
    await own.admin.call("CLIENT", "PAUSE", "60000", "WRITE");
    try {
      const first = redis.multi().incr("limits:n").exec();
      await until("the first transaction holds the connection", async () => (await own.stats()).transactions.active === 1);
      const second = redis.multi().incr("limits:n").exec();
      await until("the second one waits for it", async () => (await own.stats()).transactions.waiting === 1);
      await expect(redis.multi().incr("limits:n").exec()).rejects.toThrow(
        "ERR 1 transactions already waiting: this shim runs at most 1 transactions at once (SHIM_MAX_TRANSACTIONS); retry shortly",
      );
      expect(await redisConnections()).toBe(before);

      await own.admin.call("CLIENT", "UNPAUSE");
      expect(await first).toEqual([1]);
      expect(await second).toEqual([2]);
    } finally {
      await own.admin.call("CLIENT", "UNPAUSE");
    }
    expect(await own.stats()).toMatchObject({ transactions: { active: 0, waiting: 0 } });
    expect(await redisConnections()).toBe(before);
  });
});

describe("shim oversized bodies", () => {
  it("answers a body just over the limit with a JSON 413 after reading it, and keeps serving", async () => {
    const redis = own.client();
    await expect(redis.set("limits:big", "x".repeat(BODY_LIMIT))).rejects.toThrow(`ERR request body is larger than the limit of ${BODY_LIMIT} bytes`);
    expect(await redis.ping()).toBe("PONG");
  });

  it("answers a body far over the limit with a JSON 413 too, through the official client, without retries", async () => {
    const redis = own.client();
    for (const size of [64 * BODY_LIMIT, 2 * 1024 * 1024]) {
      const started = (await own.stats()).requests;
      await expect(redis.set("limits:huge", "x".repeat(size))).rejects.toThrow(`ERR request body is larger than the limit of ${BODY_LIMIT} bytes`);
      // one request: a cut connection would have made the client retry
      expect((await own.stats()).requests - started).toBe(1);
    }
    expect(await redis.ping()).toBe("PONG");
  });

  it("settles an endless upload: the 413 arrives while the client is still sending", async () => {
    const url = new URL(own.shim.url);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = request({ host: url.hostname, port: url.port, method: "POST", path: "/", headers: { authorization: `Bearer ${own.token}` } }, (res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      });
      req.on("error", reject);
      const chunk = Buffer.alloc(64 * 1024, "x");
      // keep sending until the answer comes; the request body never ends on its own
      const pump = () => {
        while (!req.destroyed && req.write(chunk));
        if (!req.destroyed) req.once("drain", pump);
      };
      req.write('["SET","k","');
      pump();
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toEqual({ error: `ERR request body is larger than the limit of ${BODY_LIMIT} bytes` });
  });
});

/** A shim process of its own for the describe block it is called in (started before its tests, stopped after them), as an operator runs one: `env` and Node's `nodeArgs`. */
function ownShimProcess(env: Record<string, string>, nodeArgs: string[] = []): () => ShimProcess {
  let shim: ShimProcess | undefined;
  beforeAll(async () => {
    shim = await startShimProcess(env, nodeArgs);
  });
  afterAll(async () => {
    await shim?.stop();
  });
  return () => shim!;
}

describe("shim client connections", () => {
  // A shim process of its own, capped at two connections by its environment, as an operator sets it.
  const capped = ownShimProcess({ SHIM_MAX_CONNECTIONS: "2" });

  /** A connection to the capped shim, once TCP has it (the shim accepts in that order). */
  const open = () =>
    new Promise<Socket>((resolve, reject) => {
      const url = new URL(capped().url);
      const socket = connect({ host: url.hostname, port: Number(url.port) });
      socket.once("connect", () => resolve(socket));
      socket.once("error", reject);
    });

  it("closes a connection past SHIM_MAX_CONNECTIONS at once, without an answer, serves those it holds, and logs it", async () => {
    const held = [await open(), await open()];
    const extra = await open();
    const received: Buffer[] = [];
    extra.on("data", (c: Buffer) => received.push(c));
    extra.on("error", () => {});
    // without a cap it would stay open until the idle timeout, a minute
    const closed = await new Promise<boolean>((resolve) => {
      extra.once("close", () => resolve(true));
      setTimeout(() => resolve(false), 10_000);
    });
    extra.destroy();
    expect(closed, "the connection past the cap still open after 10 s").toBe(true);
    expect(Buffer.concat(received).toString()).toBe("");

    const answer = await new Promise<string>((resolve) => {
      let text = "";
      held[0]!.on("data", (c: Buffer) => (text += c.toString()));
      held[0]!.on("close", () => resolve(text));
      held[0]!.write(`POST / HTTP/1.1\r\nhost: shim\r\nauthorization: Bearer ${capped().token}\r\nconnection: close\r\ncontent-length: 8\r\n\r\n["PING"]`);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toContain('{"result":"PONG"}');
    for (const socket of held) socket.destroy();
    await until("the shim serves again once its connections close", async () => {
      const res = await fetch(capped().url, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${capped().token}` } }).catch(() => undefined);
      return res?.status === 200;
    });
    const said = /1 new connection closed unanswered since the last such line: 2 are open, the most SHIM_MAX_CONNECTIONS allows/;
    await until("the shim logs the closed connection", () => said.test(capped().stderr()));
    expect(capped().stderr()).not.toContain(capped().token);
  });
});

describe("shim bodies sent in tiny chunks", () => {
  // A shim process of its own whose heap is capped: a body it holds at many times its size
  // shows as the process dying, not as a number to compare against a guess.
  const HEAP_MB = 64;
  const small = ownShimProcess({}, [`--max-old-space-size=${HEAP_MB}`]);

  it(`takes a body of the default 1 MiB limit sent as one-byte chunks in a shim whose heap is capped at ${HEAP_MB} MB, and keeps serving`, async () => {
    const value = "x".repeat(1024 * 1024 - 200);
    const body = Buffer.from(JSON.stringify(["SET", `limits:chunked:${crypto.randomUUID()}`, value]));
    // each byte its own chunk ("1\r\nx\r\n"), written in large pieces: the shim's parser sees one
    // chunk per byte, whatever TCP makes of them
    const framed = Buffer.alloc(body.length * 6);
    for (let i = 0; i < body.length; i++) framed.write(`1\r\n${String.fromCharCode(body[i]!)}\r\n`, i * 6, "latin1");
    const url = new URL(small().url);
    const answer = await new Promise<string>((resolve) => {
      const socket = connect({ host: url.hostname, port: Number(url.port) });
      let text = "";
      socket.on("data", (c: Buffer) => (text += c.toString()));
      socket.on("error", () => {});
      socket.on("close", () => resolve(text));
      socket.write(`POST / HTTP/1.1\r\nhost: shim\r\nauthorization: Bearer ${small().token}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n`);
      socket.write(framed);
      socket.write("0\r\n\r\n");
    });
    expect(answer, small().stderr().slice(0, 500)).toMatch(/^HTTP\/1\.1 200 /);
    expect(answer).toContain('{"result":"OK"}');
    const res = await fetch(small().url, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${small().token}` } });
    expect(await res.json()).toEqual({ result: "PONG" });
  }, 120_000);
});

describe("shim requests of many commands", () => {
  // A shim process of its own with its heap capped, as above: a shim that holds every command
  // of a request in its Redis client at once (about 2.5 KB each, 250 MB for these) shows as the
  // process dying. The shim's own objects for 100,000 commands and their replies need about
  // 90 MB at the peak, so the cap is higher than the other tests'.
  const HEAP_MB = 160;
  const small = ownShimProcess({}, [`--max-old-space-size=${HEAP_MB}`]);
  const COMMANDS = 100_000;
  const post = (path: string, body: string) =>
    fetch(`${small().url}${path}`, { method: "POST", body, headers: { authorization: `Bearer ${small().token}`, "upstash-encoding": "base64" } })
      .then(async (res) => ({ status: res.status, json: (await res.json()) as { result?: unknown; error?: string }[] }))
      .catch((e: Error) => ({ status: 0, json: [{ error: `${e.message}: ${small().stderr().slice(0, 300)}` }] as { result?: unknown; error?: string }[] }));
  const pong = Buffer.from("PONG").toString("base64");

  it(`answers a /pipeline of ${COMMANDS} commands (a 900 KB body, under the default limit) in order, in a shim whose heap is capped at ${HEAP_MB} MB`, async () => {
    const k = `limits:many:${crypto.randomUUID()}`;
    const body = JSON.stringify([["INCR", k], ...Array.from({ length: COMMANDS - 2 }, () => ["PING"]), ["INCR", k]]);
    expect(body.length).toBeLessThan(1024 * 1024);
    const res = await post("/pipeline", body);
    expect(res.status, res.json[0]?.error).toBe(200);
    expect(res.json.length).toBe(COMMANDS);
    expect([res.json[0], res.json[1], res.json.at(-2), res.json.at(-1)]).toEqual([{ result: 1 }, { result: pong }, { result: pong }, { result: 2 }]);
    expect(res.json.every((r, i) => i === 0 || i === COMMANDS - 1 || r.result === pong)).toBe(true);
  }, 120_000);

  it(`answers a /multi-exec of ${COMMANDS} commands as one transaction, in that shim`, async () => {
    const k = `limits:many-tx:${crypto.randomUUID()}`;
    const body = JSON.stringify([["INCR", k], ...Array.from({ length: COMMANDS - 2 }, () => ["PING"]), ["INCR", k]]);
    const res = await post("/multi-exec", body);
    expect(res.status, res.json[0]?.error).toBe(200);
    expect(res.json.length).toBe(COMMANDS);
    expect([res.json[0], res.json[1], res.json.at(-1)]).toEqual([{ result: 1 }, { result: pong }, { result: 2 }]);
    // queued a slice at a time, but discarded whole all the same when one command is refused
    const refused = await post("/multi-exec", JSON.stringify([["INCR", k], ...Array.from({ length: 5000 }, () => ["PING"]), ["INCR", k, "extra"]]));
    expect(refused.status).toBe(400);
    expect(refused.json).toEqual({ error: expect.stringMatching(/^EXECABORT/) });
    const after = await post("/", JSON.stringify(["GET", k]));
    expect(after.json).toEqual({ result: Buffer.from("2").toString("base64") });
  }, 120_000);
});

describe("shim pipelined requests", () => {
  // A shim process of its own with its heap capped, as for bodies in tiny chunks above: a shim
  // that ran every pipelined request at once answers none 503 (the limit gone), and one that
  // held them all shows as the process dying. The cap leaves room for a loaded machine, where
  // the answers wait longer for the client to read them (28 MB was met once on two busy cores).
  const HEAP_MB = 64;
  const small = ownShimProcess({}, [`--max-old-space-size=${HEAP_MB}`]);

  it(`answers 20,000 PINGs sent on one connection without waiting, each a PONG or a JSON 503, in a shim whose heap is capped at ${HEAP_MB} MB`, async () => {
    const count = 20_000;
    const ping = `POST / HTTP/1.1\r\nhost: shim\r\nauthorization: Bearer ${small().token}\r\ncontent-length: 8\r\n\r\n["PING"]`;
    const url = new URL(small().url);
    const answers = await new Promise<string>((resolve) => {
      const socket = connect({ host: url.hostname, port: Number(url.port) });
      let text = "";
      let seen = 0;
      let from = 0;
      socket.on("data", (c: Buffer) => {
        text += c.toString("latin1");
        for (let at = text.indexOf("HTTP/1.1 ", from); at >= 0; at = text.indexOf("HTTP/1.1 ", from)) {
          seen++;
          from = at + 1;
        }
        if (seen >= count) socket.destroy();
      });
      socket.on("error", () => {});
      socket.on("close", () => resolve(text));
      socket.write(ping.repeat(count));
    });
    const statuses = [...answers.matchAll(/^HTTP\/1\.1 (\d+) /gm)].map((m) => m[1]);
    expect(statuses.length, small().stderr().slice(0, 500)).toBe(count);
    const pongs = answers.split('{"result":"PONG"}').length - 1;
    const refusals = answers.split("requests already running on this connection").length - 1;
    expect(statuses.filter((s) => s === "200").length).toBe(pongs);
    expect(statuses.filter((s) => s === "503").length).toBe(refusals);
    expect(pongs + refusals).toBe(count);
    expect(pongs).toBeGreaterThanOrEqual(16);
    // the requests parsed while 16 ran were refused, not run beside them
    expect(refusals).toBeGreaterThan(0);
    const res = await fetch(small().url, { method: "POST", body: '["PING"]', headers: { authorization: `Bearer ${small().token}` } });
    expect(await res.json()).toEqual({ result: "PONG" });
  }, 120_000);
});

describe("shim FCALL_RO calls of a large library", () => {
  // A shim process of its own with its heap capped, in front of this file's Redis, as for
  // bodies in tiny chunks above: a copy of the library held per call shows as the process dying.
  const HEAP_MB = 64;
  let small: ShimProcess | undefined;
  const code = [
    "#!lua name=limits_large",
    `-- ${"x".repeat(400_000)}`,
    "redis.register_function('limits_large_get', function(keys, args) return redis.call('GET', keys[1]) end)",
    "",
  ].join("\n");
  beforeAll(async () => {
    small = await startShimProcess({ REDIS_URL: own.redis.url }, [`--max-old-space-size=${HEAP_MB}`]);
    await own.admin.function("LOAD", "REPLACE", code);
  });
  afterAll(async () => {
    await small?.stop();
    await own.admin.function("DELETE", "limits_large").catch(() => {});
  });

  it(`answers 300 calls of a function of a 400 KB library without no-writes, in one 17 KB pipeline, in a shim whose heap is capped at ${HEAP_MB} MB`, async () => {
    await own.admin.set("limits:large-library", "stored");
    const body = JSON.stringify(Array.from({ length: 300 }, () => ["FCALL_RO", "limits_large_get", 1, "limits:large-library"]));
    const res = await fetch(`${small!.url}/pipeline`, { method: "POST", body, headers: { authorization: `Bearer ${small!.token}` } }).catch((e: Error) => e);
    expect(res instanceof Response ? res.status : `${res.message}: ${small!.stderr().slice(0, 300)}`).toBe(200);
    expect(await (res as Response).json()).toEqual(Array.from({ length: 300 }, () => ({ result: "stored" })));
    expect(small!.alive()).toBe(true);
  }, 120_000);
});

/**
 * A GET through the shim of a value of `bytes` NUL bytes (SETRANGE makes it cheaply): the
 * shim answers `status` with a JSON error, and serves the next request.
 */
async function getOfLargeValue(bytes: number, status: number) {
  const k = `limits:large:${crypto.randomUUID()}`;
  await own.admin.setrange(k, bytes - 1, "x");
  try {
    const res = await fetch(own.shim.url, { method: "POST", body: JSON.stringify(["GET", k]), headers: { authorization: `Bearer ${own.token}` } });
    expect(res.status).toBe(status);
    expect(await res.json()).toEqual({ error: expect.stringMatching(/^ERR /) });
    expect(await own.client().ping()).toBe("PONG");
  } finally {
    await own.admin.del(k);
  }
}

describe("shim replies too large for one JSON text", () => {
  it("answers a reply whose JSON would pass the longest string V8 makes with a JSON 500, and keeps running", async () => {
    // 90 MB of NUL bytes: JSON writes each as \u0000, six characters, so the text would be
    // 540 M characters, past V8's limit of about 536 M. Redis holds values up to 512 MB.
    await getOfLargeValue(90_000_000, 500);
  }, 60_000);
});

describe("shim replies past Redis's output buffer limit", () => {
  it("answers 503 without holding the reply when Redis caps what it buffers for one client (the README's hardening), and keeps serving", async () => {
    await own.admin.config("SET", "client-output-buffer-limit", "normal 64mb 32mb 10");
    try {
      // Redis closes the connection at 64 MB: the 100 MB reply never reaches the shim whole
      await getOfLargeValue(100_000_000, 503);
    } finally {
      await own.admin.config("SET", "client-output-buffer-limit", "normal 0 0 0");
    }
  }, 60_000);
});
