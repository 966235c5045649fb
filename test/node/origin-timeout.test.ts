import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { WebSocket, WebSocketServer } from "ws";
import { frameworkGates } from "../helpers/framework-origin.ts";
import { answerIn, hasAnswer, rawConnection, sendingBody } from "../helpers/raw-client.ts";
import { until } from "../helpers/until.ts";

// originTimeout, through the built Worker in workerd in front of a real origin: the time the gate
// waits on the origin for its response head is bounded, and only that. What is the origin's
// (no head, an upload it stops taking) ends in a 504 and an origin_timeout error line; what is
// the client's (an upload it sends slowly, or breaks off) never does, nor does a body or a
// WebSocket that goes on past the limit once the head has come. Unset, nothing is bounded.
// Limits and delays are far apart: each test asserts what comes, never when.

const { gate } = frameworkGates();

/** What the origin made of one request, by its path. */
interface Seen {
  bytes: number;
  /** its connection closed before it answered (the gate's fetch aborted) */
  closedUnanswered?: boolean;
}
const seen = new Map<string, Seen>();
/** the answers the origin holds back, to close when the file is done */
const held: (ServerResponse | Socket)[] = [];
/** how long /slow-body streams its body, ms: far past the wide gate's limit */
const STREAM_MS = 3000;
/** how long /late takes to start its answer, ms */
const LATE_MS = 1500;

const origin = createServer((req: IncomingMessage, res: ServerResponse) => {
  const path = req.url ?? "/";
  const record: Seen = { bytes: 0 };
  seen.set(path, record);
  res.on("close", () => (record.closedUnanswered = !res.headersSent));
  req.on("error", () => {});
  // an origin that stops taking the upload: it reads none of it, and never answers
  if (path.startsWith("/upload-stall")) {
    req.pause();
    held.push(res);
    return;
  }
  req.on("data", (chunk: Buffer) => (record.bytes += chunk.length));
  req.on("end", () => {
    if (path.startsWith("/hang")) {
      // the whole request read, and no answer ever
      held.push(res);
    } else if (path.startsWith("/late")) {
      setTimeout(() => res.end("late, but here"), LATE_MS);
    } else if (path.startsWith("/slow-body")) {
      // the head at once, then the body a part at a time, for far longer than the limit
      res.writeHead(200, { "content-type": "text/plain" });
      const started = Date.now();
      let part = 0;
      res.write(`part ${part++}\n`);
      const more = setInterval(() => {
        res.write(`part ${part++}\n`);
        if (Date.now() - started >= STREAM_MS) {
          clearInterval(more);
          res.end("the end\n");
        }
      }, 100);
      res.on("close", () => clearInterval(more));
    } else res.end(JSON.stringify({ bytes: record.bytes }));
  });
});
const sockets = new WebSocketServer({ noServer: true });
origin.on("upgrade", (req, socket: Socket, head) => {
  socket.on("error", () => {});
  // a handshake the origin never answers
  if (req.url?.startsWith("/hang")) {
    seen.set(req.url, { bytes: 0 });
    socket.on("close", () => (seen.get(req.url!)!.closedUnanswered = true));
    held.push(socket);
    return;
  }
  sockets.handleUpgrade(req, socket, head, (ws) => ws.on("message", (data) => ws.send(`echo: ${data.toString()}`)));
});

/** a gate's base URL and its log lines */
interface Gate {
  base: URL;
  logs: string[];
}
/** the limit the gates under test set, and the gates */
const SHORT = 300;
const WIDE = 1000;
let short: Gate;
let wide: Gate;
let unset: Gate;
const LIMIT = 100;

beforeAll(async () => {
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  const originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  const start = async (more: Record<string, unknown>): Promise<Gate> => {
    const logs: string[] = [];
    const base = new URL(await gate({ rules: [{ name: "m", limit: LIMIT, window: "10m" }], ...more }, { ORIGIN_URL: originUrl }, (line) => logs.push(line)));
    return { base, logs };
  };
  [short, wide, unset] = await Promise.all([start({ originTimeout: `${SHORT}ms` }), start({ originTimeout: "1s" }), start({})]);
});
afterAll(async () => {
  for (const answer of held) answer.destroy();
  for (const ws of sockets.clients) ws.terminate();
  origin.closeAllConnections();
  await new Promise<void>((resolve) => origin.close(() => resolve()));
});

let next = 0;
const freshIp = () => `100.73.${(++next >> 8) & 255}.${next & 255}`;
let paths = 0;
const freshPath = (prefix: string) => `${prefix}/${++paths}`;

/** The Worker's log lines since `mark` (a length of its `logs`) naming `event`. */
const since = (gate: Gate, mark: number, event: string) => gate.logs.slice(mark).filter((line) => line.includes(`"${event}"`));

/** The first line `gate` logs after `mark` naming one of `events`, once it has come. */
const logged = (gate: Gate, mark: number, ...events: string[]) =>
  vi.waitFor(
    () => {
      const line = gate.logs.slice(mark).find((l) => events.some((event) => l.includes(`"${event}"`)));
      expect(line, `a line naming ${events.join(" or ")}`).toBeDefined();
      return JSON.parse(line!.slice(line!.indexOf("{"))) as Record<string, unknown>;
    },
    { timeout: 10_000 },
  );

/** Lines of failures besides an origin timeout: the origin's, the gate's, the client's, and errors never caught. */
const otherFailures = (gate: Gate, mark: number) => [
  ...since(gate, mark, "slidegate.upstream_error"),
  ...since(gate, mark, "slidegate.internal_error"),
  ...since(gate, mark, "slidegate.client_aborted"),
  ...gate.logs.slice(mark).filter((l) => l.includes("Uncaught")),
];

/** How many requests of `ip` `gate` has counted, read from its answer to one more. */
async function counted(gate: Gate, ip: string): Promise<number> {
  const res = await fetch(new URL("/count", gate.base), { headers: { "cf-connecting-ip": ip } });
  await res.arrayBuffer();
  return LIMIT - Number(res.headers.get("x-ratelimit-remaining")) - 1;
}

const ORIGIN_TIMEOUT = { type: "urn:slidegate:origin-timeout", title: "Gateway Timeout", status: 504, detail: "The origin did not answer in time." };

/** A pause of the test's own, `times` the short limit: the client taking its time, never a race with the gate. */
const pastTheLimit = (times: number) => new Promise((resolve) => setTimeout(resolve, times * SHORT));

describe("an origin that sends no response head within originTimeout", () => {
  it("gets the client a 504 origin-timeout naming nothing internal, logged as the origin's failure, its request aborted and counted once", async () => {
    const ip = freshIp();
    const path = freshPath("/hang");
    const mark = short.logs.length;
    const res = await fetch(new URL(path, short.base), { headers: { "cf-connecting-ip": ip } });
    const body = await res.text();
    expect([res.status, res.headers.get("content-type"), res.headers.get("cache-control")]).toEqual([504, "application/problem+json", "no-store"]);
    expect(JSON.parse(body)).toEqual(ORIGIN_TIMEOUT);
    const line = await logged(short, mark, "slidegate.origin_timeout", "slidegate.upstream_error", "slidegate.internal_error");
    expect(line).toEqual({ event: "slidegate.origin_timeout", tier: "default", tag: expect.any(String), method: "GET", path, originTimeoutMs: SHORT });
    // the origin's address and the caller's are no part of it
    const originPort = String((origin.address() as AddressInfo).port);
    for (const internal of ["127.0.0.1", originPort, ip]) expect(JSON.stringify(line) + body).not.toContain(internal);
    // the gate stopped waiting on it: the origin sees its request closed, unanswered
    await until("the origin has seen its request closed", () => seen.get(path)?.closedUnanswered === true);
    expect(await counted(short, ip)).toBe(1);
    expect(otherFailures(short, mark)).toEqual([]);
  }, 30_000);

  it("gets a WebSocket handshake it never answers the same 504, logged the same", async () => {
    const path = freshPath("/hang");
    const mark = short.logs.length;
    const ws = new WebSocket(new URL(path, short.base).href.replace(/^http/, "ws"), { headers: { "cf-connecting-ip": freshIp() } });
    const got = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      ws.once("unexpected-response", (_req, res) => {
        let body = "";
        res.on("data", (chunk: Buffer) => (body += chunk.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.once("open", () => reject(new Error("the handshake was answered")));
      ws.once("error", () => {});
    });
    expect(got.status).toBe(504);
    expect(JSON.parse(got.body)).toEqual(ORIGIN_TIMEOUT);
    expect(await logged(short, mark, "slidegate.origin_timeout", "slidegate.upstream_error")).toMatchObject({ event: "slidegate.origin_timeout" });
    ws.terminate();
  }, 30_000);

  it("after reading an upload whole gets the 504 and an origin_timeout line, never a client_aborted one", async () => {
    const ip = freshIp();
    const path = freshPath("/hang");
    const mark = short.logs.length;
    const upload = await sendingBody(short.base, { path, ip, framing: "content-length: 1000", first: Buffer.alloc(1000, 7) });
    try {
      await until("the answer has come whole", () => hasAnswer(upload.received()));
      expect(answerIn(upload.received())).toEqual({ status: 504, body: ORIGIN_TIMEOUT });
      expect(seen.get(path)?.bytes).toBe(1000);
      expect(await logged(short, mark, "slidegate.origin_timeout", "slidegate.client_aborted", "slidegate.upstream_error")).toMatchObject({
        event: "slidegate.origin_timeout",
        method: "POST",
      });
      expect(await counted(short, ip)).toBe(1);
      expect(otherFailures(short, mark)).toEqual([]);
    } finally {
      upload.socket.destroy();
    }
  }, 30_000);

  it("gets a GET with a body, which the runtime sends as it came, the same 504", async () => {
    const path = freshPath("/hang");
    const mark = short.logs.length;
    const client = await rawConnection(short.base);
    try {
      client.socket.write(`GET ${path} HTTP/1.1\r\nHost: ${short.base.host}\r\nCF-Connecting-IP: ${freshIp()}\r\ncontent-length: 5\r\n\r\nhello`);
      await until("the answer has come whole", () => hasAnswer(client.received()));
      expect(answerIn(client.received())).toEqual({ status: 504, body: ORIGIN_TIMEOUT });
      expect(seen.get(path)?.bytes).toBe(5);
      expect(await logged(short, mark, "slidegate.origin_timeout", "slidegate.upstream_error")).toMatchObject({ event: "slidegate.origin_timeout", method: "GET" });
    } finally {
      client.socket.destroy();
    }
  }, 30_000);

  it("that stops taking an upload mid-way, with the client still sending, gets the 504 and an origin_timeout line", async () => {
    const ip = freshIp();
    const path = freshPath("/upload-stall");
    const mark = short.logs.length;
    const upload = await sendingBody(short.base, { path, ip, framing: "content-length: 1000000000", first: Buffer.alloc(64 * 1024, 7) });
    // more all along: the gate never waits on the client, only on the origin to take it
    const more = setInterval(() => upload.socket.write(Buffer.alloc(64 * 1024, 8)), 5);
    try {
      await until("the answer has come whole", () => hasAnswer(upload.received()));
      expect(answerIn(upload.received())).toEqual({ status: 504, body: ORIGIN_TIMEOUT });
      expect(await logged(short, mark, "slidegate.origin_timeout", "slidegate.client_aborted", "slidegate.upstream_error")).toMatchObject({
        event: "slidegate.origin_timeout",
      });
      expect(await counted(short, ip)).toBe(1);
      expect(otherFailures(short, mark)).toEqual([]);
    } finally {
      clearInterval(more);
      upload.socket.destroy();
    }
  }, 30_000);
});

describe("a client's own time is not the origin's", () => {
  it("a client that hangs up mid-upload after holding it for five times the limit is logged as client_aborted, never origin_timeout", async () => {
    const ip = freshIp();
    const path = freshPath("/upload");
    const mark = short.logs.length;
    const upload = await sendingBody(short.base, { path, ip, framing: "content-length: 100000", first: Buffer.alloc(1000, 7) });
    await until("the origin has the first 1000 bytes", () => (seen.get(path)?.bytes ?? 0) >= 1000);
    // the gate waits on the client all this while, not on the origin
    await pastTheLimit(5);
    expect(upload.received()).toBe("");
    upload.socket.destroy();
    expect(await logged(short, mark, "slidegate.client_aborted", "slidegate.origin_timeout", "slidegate.upstream_error")).toMatchObject({
      event: "slidegate.client_aborted",
    });
    expect(since(short, mark, "slidegate.origin_timeout")).toEqual([]);
    expect(await counted(short, ip)).toBe(1);
  }, 30_000);

  it("a client that uploads for longer than the limit, in pieces far apart, gets the answer of an origin that answers once it has it all", async () => {
    const path = freshPath("/upload");
    const mark = wide.logs.length;
    const upload = await sendingBody(wide.base, { path, ip: freshIp(), framing: "content-length: 5000", first: Buffer.alloc(1000, 7) });
    try {
      // five pieces 0.7 s apart: 2.8 s of the client's, nearly three times the limit
      for (let piece = 1; piece < 5; piece++) {
        await new Promise((resolve) => setTimeout(resolve, 700));
        upload.socket.write(Buffer.alloc(1000, piece));
      }
      await until("the answer has come whole", () => hasAnswer(upload.received()));
      expect(answerIn(upload.received())).toEqual({ status: 200, body: { bytes: 5000 } });
      expect([...since(wide, mark, "slidegate.origin_timeout"), ...otherFailures(wide, mark)]).toEqual([]);
    } finally {
      upload.socket.destroy();
    }
  }, 30_000);
});

describe("an answer whose head comes within originTimeout", () => {
  it("streams its body for three times the limit to its end, uncut", async () => {
    const path = freshPath("/slow-body");
    const mark = wide.logs.length;
    const res = await fetch(new URL(path, wide.base), { headers: { "cf-connecting-ip": freshIp() } });
    expect(res.status).toBe(200);
    const body = await res.text();
    expect(body).toMatch(/^part 0\npart 1\n(?:part \d+\n)+the end\n$/);
    expect(body.split("\n").length).toBeGreaterThan(STREAM_MS / 100 / 2);
    // a request answered after it: the gate has had its turn to log anything of the one before
    expect(await counted(wide, freshIp())).toBe(0);
    expect([...since(wide, mark, "slidegate.origin_timeout"), ...otherFailures(wide, mark)]).toEqual([]);
  }, 30_000);

  it("a WebSocket goes on past the limit: the limit covers the 101 alone", async () => {
    const mark = wide.logs.length;
    const ws = new WebSocket(new URL("/socket", wide.base).href.replace(/^http/, "ws"), { headers: { "cf-connecting-ip": freshIp() } });
    try {
      await new Promise<void>((resolve, reject) => {
        ws.once("open", () => resolve());
        ws.once("unexpected-response", (_req, res) => reject(new Error(`answered ${res.statusCode}`)));
        ws.once("error", reject);
      });
      let closed: string | undefined;
      ws.once("close", (code, reason) => (closed = `closed ${code} ${reason.toString()}`));
      // the next message, or how the socket closed instead
      const echo = () =>
        new Promise<string>((resolve) => {
          const onMessage = (data: WebSocket.RawData) => {
            ws.off("close", onClose);
            resolve(data.toString());
          };
          const onClose = (code: number, reason: Buffer) => {
            ws.off("message", onMessage);
            resolve(`closed ${code} ${reason.toString()}`);
          };
          ws.once("message", onMessage);
          ws.once("close", onClose);
        });
      const first = echo();
      ws.send("at once");
      expect(await first).toBe("echo: at once");
      // three times the limit, the socket still open both ways
      await new Promise((resolve) => setTimeout(resolve, 3 * WIDE));
      expect(closed).toBeUndefined();
      const later = echo();
      ws.send("much later");
      expect(await later).toBe("echo: much later");
      expect(ws.readyState).toBe(WebSocket.OPEN);
      expect([...since(wide, mark, "slidegate.origin_timeout"), ...otherFailures(wide, mark)]).toEqual([]);
    } finally {
      ws.terminate();
    }
  }, 30_000);
});

describe("without originTimeout", () => {
  it("an origin that starts its answer after 1.5 s answers through the gate: the gate sets no time limit of its own", async () => {
    const mark = unset.logs.length;
    const res = await fetch(new URL(freshPath("/late"), unset.base), { headers: { "cf-connecting-ip": freshIp() } });
    expect([res.status, await res.text()]).toEqual([200, "late, but here"]);
    expect([...since(unset, mark, "slidegate.origin_timeout"), ...otherFailures(unset, mark)]).toEqual([]);
  }, 30_000);
});
