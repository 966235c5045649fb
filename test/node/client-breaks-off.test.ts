import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { frameworkGates } from "../helpers/framework-origin.ts";
import { answerIn, hasAnswer, rawConnection, sendingBody } from "../helpers/raw-client.ts";
import { until } from "../helpers/until.ts";

// A client that breaks off its request is no failure of the origin's (invariant 7): through the
// built Worker in workerd, raw TCP clients that hang up (or stop sending) mid-upload or
// mid-answer, in front of a real origin. workerd fails the origin's fetch() with the same
// "Network connection lost." either way, and request.signal never fires; the gate tells them
// apart by reading the upload itself. Operators alert on upstream_error: a client that hangs
// up must not raise it, nor hide a real outage among lines any caller can make at will.

const { gate } = frameworkGates();

/** What the origin made of one request, by its path. */
interface Seen {
  headers: IncomingMessage["headers"];
  bytes: number;
  sha256?: string;
  /** "ended": it read the whole body (and answered); "aborted": the connection closed mid-body */
  end?: "ended" | "aborted";
  /** its answer's connection closed before the answer was written whole */
  answerCut?: boolean;
}
const seen = new Map<string, Seen>();
/** how much of an upload to /reset/… the origin reads before it resets the connection */
const RESET_AFTER = 4096;

const origin = createServer((req: IncomingMessage, res: ServerResponse) => {
  const path = req.url ?? "/";
  const record: Seen = { headers: req.headers, bytes: 0 };
  seen.set(path, record);
  const hash = createHash("sha256");
  req.on("data", (chunk: Buffer) => {
    record.bytes += chunk.length;
    hash.update(chunk);
    // an origin that fails mid-upload: a reset, with the client's upload still coming
    if (path.startsWith("/reset") && record.bytes >= RESET_AFTER) req.socket.resetAndDestroy();
  });
  req.on("aborted", () => (record.end ??= "aborted"));
  req.on("error", () => {});
  if (path.startsWith("/refuse")) {
    // an origin that refuses an upload on its headers alone (too large, not signed in), before
    // the body has come, as nginx's client_max_body_size or an auth check does
    req.on("end", () => (record.end ??= "ended"));
    // answered, Node tells of a cut upload no more than by its connection closing
    req.socket.on("close", () => (record.end ??= req.complete ? "ended" : "aborted"));
    res.writeHead(413, { "content-type": "text/plain" });
    res.end("too large\n");
    return;
  }
  if (path.startsWith("/stream")) {
    // an answer the origin writes as it goes (a log tail, an event stream), never ending on its own
    res.writeHead(200, { "content-type": "text/plain" });
    res.write("the first part\n");
    const more = setInterval(() => res.write("more\n"), 20);
    res.on("close", () => {
      clearInterval(more);
      record.answerCut = !res.writableFinished;
    });
    return;
  }
  req.on("end", () => {
    record.end ??= "ended";
    record.sha256 = hash.digest("hex");
    res.end(JSON.stringify({ bytes: record.bytes }));
  });
});
let originUrl: string;
const logs: string[] = [];
let base: URL;
const LIMIT = 100;

beforeAll(async () => {
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  base = new URL(await gate({ rules: [{ name: "m", limit: LIMIT, window: "10m" }] }, { ORIGIN_URL: originUrl }, (line) => logs.push(line)));
});
afterAll(async () => {
  origin.closeAllConnections();
  await new Promise<void>((resolve) => origin.close(() => resolve()));
});

let next = 0;
const freshIp = () => `100.72.${(++next >> 8) & 255}.${next & 255}`;
let paths = 0;
const freshPath = (prefix: string) => `${prefix}/${++paths}`;

/** The Worker's log lines since `mark` (a length of `logs`) naming `event`. */
const since = (mark: number, event: string) => logs.slice(mark).filter((line) => line.includes(`"${event}"`));

/** The first line the Worker logs after `mark` naming one of `events`, once it has come. */
const logged = (mark: number, ...events: string[]) =>
  vi.waitFor(
    () => {
      const line = logs.slice(mark).find((l) => events.some((event) => l.includes(`"${event}"`)));
      expect(line, `a line naming ${events.join(" or ")}`).toBeDefined();
      return JSON.parse(line!.slice(line!.indexOf("{"))) as Record<string, unknown>;
    },
    { timeout: 10_000 },
  );

/** Lines of the gate's failures, and of errors the runtime saw thrown and never caught. */
const failures = (mark: number) => [
  ...since(mark, "slidegate.upstream_error"),
  ...since(mark, "slidegate.internal_error"),
  ...logs.slice(mark).filter((l) => l.includes("Uncaught")),
];

/** How many requests of `ip` the gate has counted, read from its answer to one more. */
async function counted(ip: string): Promise<number> {
  const res = await fetch(new URL("/count", base), { headers: { "cf-connecting-ip": ip } });
  await res.arrayBuffer();
  return LIMIT - Number(res.headers.get("x-ratelimit-remaining")) - 1;
}

describe("a client that hangs up mid-upload", () => {
  it.each([
    ["a Content-Length it never finishes", "content-length: 100000", Buffer.alloc(1000, 7)],
    ["chunked", "transfer-encoding: chunked", Buffer.from(`3e8\r\n${"x".repeat(1000)}\r\n`)],
    // the runtime frames the body by either as by any other length
    ["a Content-Length written with zeros before it, past fifteen digits", "content-length: 0000000000000000100000", Buffer.alloc(1000, 7)],
    ["a Content-Length past what a number holds exactly", "content-length: 9007199254740993", Buffer.alloc(1000, 7)],
  ])("with %s is logged as client_aborted, never as the origin's failure, and counted once", async (_what, framing, bytes) => {
    const ip = freshIp();
    const path = freshPath("/upload");
    const mark = logs.length;
    const upload = await sendingBody(base, { path, ip, framing, first: bytes });
    // the upload is on its way to the origin when the client hangs up
    await until("the origin has the first 1000 bytes", () => (seen.get(path)?.bytes ?? 0) >= 1000);
    upload.socket.destroy();

    const line = await logged(mark, "slidegate.client_aborted", "slidegate.upstream_error", "slidegate.internal_error");
    expect(line).toMatchObject({ event: "slidegate.client_aborted", tier: "default" });
    expect(JSON.stringify(line)).not.toContain(ip);
    // the origin sees the upload broken off, never a shorter one read as whole
    await until("the origin has seen the upload end", () => seen.get(path)?.end !== undefined);
    expect(seen.get(path)?.end).toBe("aborted");
    // admitted before it broke off: charged once
    expect(await counted(ip)).toBe(1);
    expect(failures(mark)).toEqual([]);
  });
});

describe("a client whose upload breaks off while it still reads", () => {
  it.each([
    // it shuts its sending side mid-body (a half-close), then waits for the answer
    ["closes its sending side before its Content-Length is sent", "content-length: 100000", Buffer.alloc(1000, 7), (socket: Socket) => socket.end()],
    // chunk extensions are HTTP, which workerd's own HTTP code does not read (a deployed Worker
    // gets the body from Cloudflare's edge): the runtime fails the read, not the origin
    [
      "sends a chunk extension the runtime cannot read",
      "transfer-encoding: chunked",
      Buffer.from(`3e8\r\n${"x".repeat(1000)}\r\n`),
      (socket: Socket) => socket.write("5;name=value\r\nhello\r\n0\r\n\r\n"),
    ],
  ] as const)("that %s gets a 400 incomplete-body, logged as client_aborted, not the origin's 502", async (_what, framing, bytes, breakOff) => {
    const ip = freshIp();
    const path = freshPath("/upload");
    const mark = logs.length;
    const upload = await sendingBody(base, { path, ip, framing, first: bytes });
    // the upload is on its way to the origin when it breaks off
    await until("the origin has the first 1000 bytes", () => (seen.get(path)?.bytes ?? 0) >= 1000);
    breakOff(upload.socket);
    try {
      await until("the answer has come whole", () => hasAnswer(upload.received()));
      const got = answerIn(upload.received());
      expect(got).toEqual({
        status: 400,
        body: { type: "urn:slidegate:incomplete-body", title: "Incomplete Body", status: 400, detail: "The request body broke off before it was whole." },
      });
      expect(await logged(mark, "slidegate.client_aborted", "slidegate.upstream_error", "slidegate.internal_error")).toMatchObject({ event: "slidegate.client_aborted" });
      await until("the origin has seen the upload end", () => seen.get(path)?.end !== undefined);
      expect(seen.get(path)?.end).toBe("aborted");
      expect(await counted(ip)).toBe(1);
      expect(failures(mark)).toEqual([]);
    } finally {
      upload.socket.destroy();
    }
  });
});

describe("an origin that answers before the upload has come", () => {
  it.each([
    ["finishes its upload", true],
    ["hangs up", false],
  ])("has its answer while still sending, and a client that then %s is logged as no one's failure", async (_what, finishes) => {
    const ip = freshIp();
    const path = freshPath("/refuse");
    const mark = logs.length;
    const upload = await sendingBody(base, { path, ip, framing: "Content-Length: 100000", first: Buffer.alloc(1000, 7) });
    try {
      // 99 000 bytes still to send: a gate that held the origin's answer until it had the whole
      // upload would leave a client that reads before it sends on waiting
      await until("the origin's answer has come", () => upload.received().includes("too large"));
      expect(upload.received()).toMatch(/^HTTP\/1\.1 413 /);
      if (finishes) {
        upload.socket.write(Buffer.alloc(99_000, 7));
        await until("the answer has ended", () => upload.received().endsWith("\r\n0\r\n\r\n"));
      } else upload.socket.destroy();
      // the rest of the upload goes on to the origin, or the origin sees it cut off: never left hanging
      await until("the origin has seen the upload end", () => seen.get(path)?.end !== undefined);
      expect(seen.get(path)?.end).toBe(finishes ? "ended" : "aborted");
      expect(await counted(ip)).toBe(1);
      expect([...failures(mark), ...since(mark, "slidegate.client_aborted")]).toEqual([]);
    } finally {
      upload.socket.destroy();
    }
  });
});

describe("an origin that fails mid-upload", () => {
  it.each([
    ["a client waiting with the rest of its upload", false],
    ["a client still sending", true],
  ])("is still the origin's failure with %s: a 502 and an upstream_error line, none of the client's", async (_what, sending) => {
    const ip = freshIp();
    const path = freshPath("/reset");
    const mark = logs.length;
    const upload = await sendingBody(base, { path, ip, framing: "Content-Length: 100000000", first: Buffer.alloc(2 * RESET_AFTER, 7) });
    // more upload all along, so a piece is on its way to the origin when the origin resets
    const more = sending ? setInterval(() => upload.socket.write(Buffer.alloc(16 * 1024, 8)), 2) : undefined;
    try {
      await until("the answer has come whole", () => hasAnswer(upload.received()));
      expect(answerIn(upload.received()).status).toBe(502);
      expect(await logged(mark, "slidegate.client_aborted", "slidegate.upstream_error", "slidegate.internal_error")).toMatchObject({ event: "slidegate.upstream_error" });
      expect(since(mark, "slidegate.client_aborted")).toEqual([]);
      expect(await counted(ip)).toBe(1);
    } finally {
      clearInterval(more);
      upload.socket.destroy();
    }
  });
});

describe("an upload the client finishes", () => {
  it.each([
    ["a Content-Length", (bytes: Buffer) => ({ header: `content-length: ${bytes.length}`, wire: bytes })],
    [
      "chunked framing",
      (bytes: Buffer) => ({
        header: "transfer-encoding: chunked",
        wire: Buffer.concat([
          Buffer.from(`${(bytes.length >> 1).toString(16)}\r\n`),
          bytes.subarray(0, bytes.length >> 1),
          Buffer.from(`\r\n${(bytes.length - (bytes.length >> 1)).toString(16)}\r\n`),
          bytes.subarray(bytes.length >> 1),
          Buffer.from("\r\n0\r\n\r\n"),
        ]),
      }),
    ],
  ] as const)(
    "with %s reaches the origin framed so, byte for byte",
    async (framing, frame) => {
      const bytes = Buffer.from(Array.from({ length: 3 * 1024 * 1024 + 17 }, (_, i) => (i * 31 + (i >> 12)) & 255));
      const path = freshPath("/upload");
      const mark = logs.length;
      const { header, wire } = frame(bytes);
      const upload = await rawConnection(base);
      try {
        upload.socket.write(`POST ${path} HTTP/1.1\r\nHost: ${base.host}\r\nCF-Connecting-IP: ${freshIp()}\r\n${header}\r\n\r\n`);
        upload.socket.write(wire);
        await until("the answer has come whole", () => hasAnswer(upload.received()), 30_000);
        expect(answerIn(upload.received())).toEqual({ status: 200, body: { bytes: bytes.length } });
        const got = seen.get(path)!;
        expect(got.sha256).toBe(createHash("sha256").update(bytes).digest("hex"));
        // an origin that takes no chunked upload (some CGI and FastCGI stacks) still gets its length
        expect([got.headers["content-length"], got.headers["transfer-encoding"]]).toEqual(
          framing === "a Content-Length" ? [String(bytes.length), undefined] : [undefined, "chunked"],
        );
        expect(failures(mark)).toEqual([]);
      } finally {
        upload.socket.destroy();
      }
    },
    40_000,
  );
});

describe("a client that hangs up while the origin's answer streams to it", () => {
  it.each([
    ["a GET", "GET", ""],
    ["an upload it sent whole", "POST", "content-length: 5\r\n\r\nhello"],
  ])("after %s is logged as nothing at all: no failure of the origin's, the gate's or the client's", async (_what, method, rest) => {
    const path = freshPath("/stream");
    const mark = logs.length;
    const client = await rawConnection(base);
    client.socket.write(`${method} ${path} HTTP/1.1\r\nHost: ${base.host}\r\nCF-Connecting-IP: ${freshIp()}\r\n${rest || "\r\n"}`);
    await until("the first part of the answer has come", () => client.received().includes("the first part"));
    client.socket.destroy();
    await until("the origin's answer has been cut", () => seen.get(path)?.answerCut !== undefined);
    expect(seen.get(path)?.answerCut).toBe(true);
    // a request answered after it: the gate has had its turn to log the one before
    expect(await counted(freshIp())).toBe(0);
    expect([...failures(mark), ...since(mark, "slidegate.client_aborted")]).toEqual([]);
  });
});
