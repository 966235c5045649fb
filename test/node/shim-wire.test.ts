import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OwnShim, startOwnShim } from "../helpers/shim.ts";
import { until } from "../helpers/until.ts";

// A Redis and shim of this file's own: the tests read back what the shim logged, and read
// the Redis directly to see that nothing was written.
let own: OwnShim;
const logged: string[] = [];
beforeAll(async () => {
  own = await startOwnShim({ log: (line) => logged.push(line) });
});
afterAll(async () => {
  await own?.close();
});

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Bytes no HTTP client would send, written on a socket of their own; `halfClose` ends the
 * sending side after them (a body cut short) while the answer is still read. The answer is
 * everything the shim sends before it closes the connection.
 */
function exchange(bytes: string | Buffer, halfClose = false): Promise<RawAnswer> {
  const url = new URL(own.shim.url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port) });
    const chunks: Buffer[] = [];
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = Buffer.concat(chunks).toString("latin1");
      const end = text.indexOf("\r\n\r\n");
      const [statusLine, ...headerLines] = text.slice(0, end < 0 ? text.length : end).split("\r\n") as [string, ...string[]];
      const headers = Object.fromEntries(headerLines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      resolve({ status: Number(statusLine.split(" ")[1] ?? 0), headers, body: end < 0 ? "" : text.slice(end + 4) });
    });
    socket.setTimeout(10_000, () => socket.destroy(new Error(`no answer within 10 s to ${JSON.stringify(String(bytes).slice(0, 80))}`)));
    socket.write(bytes);
    if (halfClose) socket.end();
  });
}

/** The JSON of an answer the shim's handler sent (not Node's parser): one chunk, its size line first. */
const chunkedJson = (answer: RawAnswer) => JSON.parse(answer.body.split("\r\n")[1]!) as unknown;

const head = (lines: string[]) => `POST / HTTP/1.1\r\nhost: shim\r\nauthorization: Bearer ${own?.token}\r\n${lines.map((l) => `${l}\r\n`).join("")}\r\n`;

describe("shim answers to malformed HTTP", () => {
  // The contract: every non-2xx body is JSON. Node's own answer to these is a bare status line.
  const cases: [string, () => string, boolean, number][] = [
    ["a chunk size that is not hex", () => `${head(["transfer-encoding: chunked"])}zz\r\n["PING"]\r\n0\r\n\r\n`, false, 400],
    ["Content-Length together with Transfer-Encoding", () => `${head(["content-length: 8", "transfer-encoding: chunked"])}8\r\n["PING"]\r\n0\r\n\r\n`, false, 400],
    ["two different Content-Lengths", () => `${head(["content-length: 8", "content-length: 9"])}["PING"]`, false, 400],
    ["a request line that is not HTTP", () => "GARBAGE\r\n\r\n", false, 400],
    ["a body shorter than its Content-Length, then the end of the stream", () => `${head(["content-length: 100"])}["SET","k"`, true, 400],
    ["20 KB of headers", () => head([`x-padding: ${"p".repeat(20 * 1024)}`]), false, 431],
  ];
  for (const [what, bytes, halfClose, status] of cases) {
    it(`answers ${what} with a JSON ${status} and closes the connection`, async () => {
      const answer = await exchange(bytes(), halfClose);
      expect(answer.status).toBe(status);
      expect(answer.headers["content-type"]).toBe("application/json");
      expect(answer.headers.connection).toBe("close");
      expect(JSON.parse(answer.body)).toEqual({ error: expect.stringMatching(/^ERR /) });
    });
  }

  it("answers a request target that is no URL (http://[::1) with a JSON 401 without the token and 400 with it, never a 500", async () => {
    const target = (auth: string) => `POST http://[::1 HTTP/1.1\r\nhost: shim\r\n${auth}connection: close\r\ncontent-length: 8\r\n\r\n["PING"]`;
    const anonymous = await exchange(target(""));
    expect(anonymous.status).toBe(401);
    expect(chunkedJson(anonymous)).toEqual({ error: "Unauthorized" });
    const holder = await exchange(target(`authorization: Bearer ${own.token}\r\n`));
    expect(holder.status).toBe(400);
    expect(holder.headers["content-type"]).toBe("application/json");
    expect(chunkedJson(holder)).toEqual({ error: expect.stringMatching(/^ERR request target/) });
  });

  it("answers an Expect header other than 100-continue with a JSON 417 with the token, and 401 without it", async () => {
    const expecting = (auth: string) => `POST / HTTP/1.1\r\nhost: shim\r\n${auth}expect: something-else\r\nconnection: close\r\ncontent-length: 8\r\n\r\n["PING"]`;
    const anonymous = await exchange(expecting(""));
    expect([anonymous.status, chunkedJson(anonymous)]).toEqual([401, { error: "Unauthorized" }]);
    const holder = await exchange(expecting(`authorization: Bearer ${own.token}\r\n`));
    expect(holder.status).toBe(417);
    expect(holder.headers["content-type"]).toBe("application/json");
    expect(holder.headers["upstash-sync-token"]).toBeTruthy();
    expect(chunkedJson(holder)).toEqual({ error: expect.stringMatching(/^ERR /) });
  });

  it("answers an Expect: 100-continue without the token with its 401 alone, never inviting the body; with the token, invites it and serves", async () => {
    const url = new URL(own.shim.url);
    /** The headers of a request that expects 100-continue, its body held back: what comes before the shim closes or `settle` says. */
    const expecting = (auth: string, settle: (text: string) => boolean) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect({ host: url.hostname, port: Number(url.port) });
        let text = "";
        socket.on("data", (c: Buffer) => {
          text += c.toString("latin1");
          if (text.startsWith("HTTP/1.1 100 ") && text.endsWith("\r\n\r\n") && !text.includes('"result"')) socket.write('["PING"]');
          if (settle(text)) socket.destroy();
        });
        socket.on("error", reject);
        socket.on("close", () => resolve(text));
        socket.setTimeout(10_000, () => socket.destroy(new Error("no final answer within 10 s")));
        socket.write(`POST / HTTP/1.1\r\nhost: shim\r\n${auth}expect: 100-continue\r\ncontent-length: 8\r\n\r\n`);
      });
    const anonymous = await expecting("", (text) => text.includes("Unauthorized"));
    expect(anonymous.match(/^HTTP\/1\.1 \d+/gm)).toEqual(["HTTP/1.1 401"]);
    const holder = await expecting(`authorization: Bearer ${own.token}\r\n`, (text) => text.includes('"PONG"'));
    expect(holder.match(/^HTTP\/1\.1 \d+/gm)).toEqual(["HTTP/1.1 100", "HTTP/1.1 200"]);
  });

  it("answers a CONNECT with a JSON 405 with the token and 401 without it, and closes, where Node closed the connection without a word", async () => {
    const tunnel = (auth: string) => `CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n${auth}\r\n`;
    const anonymous = await exchange(tunnel(""));
    expect([anonymous.status, anonymous.headers["content-type"], JSON.parse(anonymous.body)]).toEqual([401, "application/json", { error: "Unauthorized" }]);
    expect(anonymous.headers["www-authenticate"]).toBe("Bearer");
    const holder = await exchange(tunnel(`authorization: Bearer ${own.token}\r\n`));
    expect(holder.status).toBe(405);
    expect(holder.headers.connection).toBe("close");
    expect(holder.headers["upstash-sync-token"]).toBeTruthy();
    expect(JSON.parse(holder.body)).toEqual({ error: expect.stringMatching(/^ERR method CONNECT not allowed/) });
  });

  it("survives a CONNECT's client resetting the connection once answered, and keeps serving", async () => {
    // Node hands the socket over with no error listener of its own: a reset there was an
    // uncaught exception, which ends the shim's process
    const url = new URL(own.shim.url);
    const socket = connect({ host: url.hostname, port: Number(url.port) });
    socket.on("error", () => {});
    socket.write(`CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\nauthorization: Bearer ${own.token}\r\n\r\n`);
    await new Promise((resolve) => socket.once("data", resolve));
    const closed = new Promise((resolve) => socket.once("close", resolve));
    socket.resetAndDestroy();
    await closed;
    expect(await own.client().ping()).toBe("PONG");
  });

  it("answers a request asking to upgrade the connection (WebSocket, h2c) as a plain request: never a switch, never a hang", async () => {
    const upgrading = (auth: string) => `POST / HTTP/1.1\r\nhost: shim\r\n${auth}connection: upgrade, close\r\nupgrade: websocket\r\ncontent-length: 8\r\n\r\n["PING"]`;
    const anonymous = await exchange(upgrading(""));
    expect([anonymous.status, chunkedJson(anonymous)]).toEqual([401, { error: "Unauthorized" }]);
    const holder = await exchange(upgrading(`authorization: Bearer ${own.token}\r\n`));
    expect([holder.status, chunkedJson(holder)]).toEqual([200, { result: "PONG" }]);
  });

  it("answers no malformed request that follows a pipelined one still running: that 400 would be read as the first one's answer", async () => {
    const first = JSON.stringify(["INCR", "wire:pipelined"]);
    const answer = await exchange(`${head([`content-length: ${first.length}`])}${first}GARBAGE\r\n\r\n`);
    // the INCR ran (or may have): its answer, or none and a closed connection, never a failure
    expect([0, 200]).toContain(answer.status);
  });

  it("answers a request once: a body that turns out malformed after its 401 or 404 closes the connection without a second answer", async () => {
    const url = new URL(own.shim.url);
    /** A chunked request whose body goes bad once its answer has arrived: everything read until the shim closes. */
    const answeredThenMalformed = (requestHead: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect({ host: url.hostname, port: Number(url.port) });
        let text = "";
        socket.on("data", (c: Buffer) => {
          const first = text === "";
          text += c.toString("latin1");
          if (first) socket.write("zz\r\nnot a chunk\r\n");
        });
        socket.on("error", reject);
        socket.on("close", () => resolve(text));
        socket.setTimeout(10_000, () => socket.destroy(new Error("the shim neither answered nor closed within 10 s")));
        socket.write(`${requestHead}5\r\n["PIN\r\n`);
      });
    const withoutToken = await answeredThenMalformed("POST / HTTP/1.1\r\nhost: shim\r\ntransfer-encoding: chunked\r\n\r\n");
    expect(withoutToken.match(/^HTTP\/1\.1 \d+/gm)).toEqual(["HTTP/1.1 401"]);
    const unknownPath = await answeredThenMalformed(head(["transfer-encoding: chunked"]).replace("POST / ", "POST /nowhere "));
    expect(unknownPath.match(/^HTTP\/1\.1 \d+/gm)).toEqual(["HTTP/1.1 404"]);
  });

  it("keeps serving after them, and logs none of them as the shim's own error", async () => {
    expect(await own.client().ping()).toBe("PONG");
    expect(logged.filter((l) => l.includes("unexpected error"))).toEqual([]);
  });
});

describe("shim bodies that are not UTF-8 text", () => {
  const post = (path: string, body: string | Buffer) =>
    fetch(own.shim.url + path, { method: "POST", body, headers: { authorization: `Bearer ${own.token}`, "content-type": "application/json" } });

  it("refuses bytes that are not UTF-8 with a JSON 400, and writes nothing", async () => {
    // \xff\xfe would be stored as two U+FFFD: a value the caller never sent
    const body = Buffer.concat([Buffer.from('["SET","wire:bytes","'), Buffer.from([0xff, 0xfe]), Buffer.from('"]')]);
    const res = await post("/", body);
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: expect.stringMatching(/^ERR request body is not valid UTF-8/) });
    expect(await own.admin.exists("wire:bytes")).toBe(0);
  });

  it("refuses a lone surrogate escape in valid JSON with a JSON 400, in a single command and a pipeline, and writes nothing", async () => {
    // JSON allows "\ud800"; Redis takes bytes, and a lone surrogate has no UTF-8 form
    for (const [path, body] of [
      ["/", '["SET","wire:lone","a\\ud800b"]'],
      ["/pipeline", '[["SET","wire:lone-pipe","1"],["SET","wire:lone-pipe","\\udc00"]]'],
      ["/multi-exec", '[["SET","wire:lone-tx","1"],["SET","wire:lone-tx","\\udc00"]]'],
      ["/", '["SET","wire:lone-key-\\ud800","1"]'],
    ] as const) {
      const res = await post(path, body);
      expect(res.status, body).toBe(400);
      expect(await res.json()).toEqual({ error: expect.stringMatching(/is not well-formed Unicode text/) });
    }
    expect(await own.admin.keys("wire:lone*")).toEqual([]);
  });

  it("still stores a surrogate pair escape as the character it spells", async () => {
    const res = await post("/", '["SET","wire:pair","\\ud83d\\udea6"]');
    expect(await res.json()).toEqual({ result: "OK" });
    expect(await own.admin.get("wire:pair")).toBe("🚦");
  });
});

describe("shim clients that leave mid-request", () => {
  it("drops a request whose client disconnects mid-body, logging nothing", async () => {
    const before = (await own.stats()).requests;
    const url = new URL(own.shim.url);
    const socket = connect({ host: url.hostname, port: Number(url.port) });
    socket.on("error", () => {});
    socket.write(`${head(["content-length: 1000"])}["SET","wire:left","`);
    await until("the shim is reading the body", async () => (await own.stats()).requests > before);
    socket.destroy();
    await new Promise((r) => setTimeout(r, 200));
    expect(await own.client().ping()).toBe("PONG");
    expect(logged.filter((l) => l.includes("unexpected error"))).toEqual([]);
    expect(await own.admin.exists("wire:left")).toBe(0);
  });
});

describe("shim connections that send nothing", () => {
  // A shim of its own with a short idle timeout; the default is a minute.
  let quiet: OwnShim;
  beforeAll(async () => {
    quiet = await startOwnShim({ idleTimeoutMs: 500 });
  });
  afterAll(async () => {
    await quiet?.close();
  });

  /** Milliseconds until the shim closes a connection that never sends a byte (undefined: still open after `waitMs`). */
  const silentFor = (waitMs: number) =>
    new Promise<number | undefined>((resolve) => {
      const url = new URL(quiet.shim.url);
      const started = Date.now();
      const socket = connect({ host: url.hostname, port: Number(url.port) });
      socket.on("error", () => {});
      socket.on("close", () => resolve(Date.now() - started));
      setTimeout(() => {
        socket.destroy();
        resolve(undefined);
      }, waitMs);
    });

  it("closes a connection that sends no request, where Node's header timeout never starts: anyone could hold sockets without the token", async () => {
    expect(await silentFor(5000)).toBeLessThan(5000);
  });

  it("answers a request that waits on Redis longer than that timeout", async () => {
    await quiet.admin.call("CLIENT", "PAUSE", "1500", "WRITE");
    const res = await fetch(quiet.shim.url, { method: "POST", body: JSON.stringify(["SET", "wire:slow", "1"]), headers: { authorization: `Bearer ${quiet.token}` } });
    expect([res.status, await res.json()]).toEqual([200, { result: "OK" }]);
  });

  it("keeps a stream on a quiet channel open past that timeout", async () => {
    const ch = `quiet:${crypto.randomUUID()}`;
    const res = await fetch(`${quiet.shim.url}/subscribe/${ch}`, { method: "POST", body: "[]", headers: { authorization: `Bearer ${quiet.token}` } });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    expect(text).toBe(`data: subscribe,${ch},1\n\n`);
    await new Promise((r) => setTimeout(r, 1500));
    await quiet.client().publish(ch, "still here");
    text = decoder.decode((await reader.read()).value);
    expect(text).toBe(`data: message,${ch},still here\n\n`);
    await reader.cancel();
  });
});
