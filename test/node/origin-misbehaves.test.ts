import { readFileSync } from "node:fs";
import { createServer as createHttpServer, type Server as HttpServer, request as httpRequest } from "node:http";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { frameworkGates } from "../helpers/framework-origin.ts";

// Invariants 5, 7 and 8 against an origin that misbehaves, through the built Worker in workerd:
// every way an origin fails or answers what HTTP forbids ends in the same 502 problem+json that
// names nothing internal, with the details in an upstream_error line, the request counted once;
// what the origin may legally send (a 100 KB header block) goes through; a body cut mid-way
// reaches the client cut; a stalled origin holds only its own callers. Where workerd decides
// (what fetch() makes of the origin's bytes), the gate is compared with a Worker that does
// nothing but fetch(request).

const { gate } = frameworkGates();

/** the sockets of answers the origin holds back, until the test releases them */
const stalled: Socket[] = [];
const behaviours: Record<string, (s: Socket) => void> = {
  "/close": (s) => s.end(),
  "/reset": (s) => s.resetAndDestroy(),
  "/garbage": (s) => s.end("this is not HTTP at all\r\n\r\n"),
  "/chunked-cut": (s) => {
    s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
    setImmediate(() => s.resetAndDestroy());
  },
  "/length-cut": (s) => {
    s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello");
    setTimeout(() => s.resetAndDestroy(), 50);
  },
  "/length-end": (s) => {
    s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello");
    setTimeout(() => s.end(), 50);
  },
  "/body-stall": (s) => {
    s.write("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello");
    stalled.push(s);
  },
  "/head-stall": (s) => void stalled.push(s),
  "/two-lengths": (s) => s.end("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
  "/length-and-chunked": (s) => s.end("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
  "/continue": (s) => s.end("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
  "/early-hints": (s) => s.end("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
  "/big-header": (s) => s.end(`HTTP/1.1 200 OK\r\nX-Big: ${"a".repeat(100 * 1024)}\r\nContent-Length: 5\r\n\r\nhello`),
  "/bad-name": (s) => s.end("HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 5\r\n\r\nhello"),
  "/nul-value": (s) => s.end("HTTP/1.1 200 OK\r\nX-Nul: a\0b\r\nContent-Length: 5\r\n\r\nhello"),
  "/status-0": (s) => s.end("HTTP/1.1 0 Zero\r\nContent-Length: 5\r\n\r\nhello"),
  "/status-999": (s) => s.end("HTTP/1.1 999 Odd\r\nContent-Length: 5\r\n\r\nhello"),
  "/ok": (s) => s.end("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
};

function rawOrigin(onConnect?: (s: Socket) => void): Promise<{ server: Server; url: string }> {
  const server = createServer((socket) => {
    socket.on("error", () => {});
    if (onConnect) return onConnect(socket);
    let head = "";
    socket.on("data", function first(chunk: Buffer) {
      head += chunk.toString("latin1");
      if (!head.includes("\r\n\r\n")) return;
      socket.off("data", first);
      const path = head.split(" ")[1]!.split("?")[0]!;
      (behaviours[path] ?? behaviours["/ok"]!)(socket);
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })));
}

interface Got {
  status?: number;
  headers?: Record<string, unknown>;
  body: string;
  aborted: boolean;
  error?: string;
}
function get(base: string, path: string, headers: Record<string, string> = {}, timeoutMs = 8000): Promise<Got> {
  return new Promise((resolve) => {
    const url = new URL(path, base);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), timeoutMs);
    const req = httpRequest(url, { headers, agent: false, signal: ac.signal, maxHeaderSize: 256 * 1024 }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString(), aborted: false });
      });
      res.on("error", (e) => {
        clearTimeout(timer);
        resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString(), aborted: true, error: e.message });
      });
    });
    req.on("error", (e) => {
      clearTimeout(timer);
      resolve({ body: "", aborted: true, error: e.message });
    });
    req.end();
  });
}

let origin: { server: Server; url: string };
let bare: Miniflare;
let bareUrl: string;
const logs: string[] = [];
let gateUrl: string;
/** an HTTP server, to stand at a port an https:// ORIGIN_URL names */
let plain: HttpServer;
const extraServers: Server[] = [];

let next = 0;
const freshIp = () => `100.71.${(++next >> 8) & 255}.${next & 255}`;
const LIMIT = 100;
const BAD_GATEWAY = { type: "urn:slidegate:bad-gateway", title: "Bad Gateway", status: 502, detail: "The origin could not be reached." };

beforeAll(async () => {
  origin = await rawOrigin();
  plain = createHttpServer((_req, res) => res.end("plain"));
  await new Promise<void>((resolve) => plain.listen(0, "127.0.0.1", resolve));
  bare = new Miniflare({
    modules: true,
    compatibilityDate: /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync("wrangler.toml", "utf8"))![1]!,
    bindings: { ORIGIN: origin.url },
    script: "export default { fetch(request, env) { const url = new URL(request.url); return fetch(new Request(env.ORIGIN + url.pathname + url.search, request)); } };",
  });
  bareUrl = (await bare.ready).href;
  gateUrl = await gate({ rules: [{ name: "m", limit: LIMIT, window: "10m" }] }, { ORIGIN_URL: origin.url }, (line) => logs.push(line));
});

afterAll(async () => {
  for (const socket of stalled) socket.destroy();
  await bare?.dispose();
  origin?.server.close();
  plain?.close();
  for (const server of extraServers) server.close();
});

/** How many requests of `ip` the gate has counted, read from its next answer. */
async function counted(base: string, ip: string): Promise<number> {
  const res = await get(base, "/ok", { "cf-connecting-ip": ip });
  return LIMIT - Number(res.headers?.["x-ratelimit-remaining"]) - 1;
}

/** The Worker's log lines naming `event`, once at least `atLeast` of them have arrived. */
async function logged(lines: string[], event: string, atLeast: number): Promise<string[]> {
  return await vi.waitFor(
    () => {
      const found = lines.filter((line) => line.includes(`"${event}"`));
      expect(found.length).toBeGreaterThanOrEqual(atLeast);
      return found;
    },
    { timeout: 10_000 },
  );
}

/** What the public may read of a 502: the fixed problem, and nothing of the origin or the runtime. */
function expectBareBadGateway(res: Got, originPort: string) {
  expect(res.aborted).toBe(false);
  expect(res.status).toBe(502);
  expect(res.headers?.["content-type"]).toBe("application/problem+json");
  expect(JSON.parse(res.body)).toEqual(BAD_GATEWAY);
  const everything = JSON.stringify(res.headers) + res.body;
  for (const internal of ["127.0.0.1", originPort, "no-such-host", "reference", "workerd", "Error", "kj/"]) expect(everything).not.toContain(internal);
}

describe("an origin that fails or answers what HTTP forbids", () => {
  it.each([
    ["resets the connection after reading the request", "/reset"],
    ["closes the connection after reading the request", "/close"],
    ["answers bytes that are not HTTP", "/garbage"],
    ["answers two different Content-Length values", "/two-lengths"],
    ["answers a header whose name holds a space", "/bad-name"],
    ["answers a NUL in a header value", "/nul-value"],
    ["answers status 0", "/status-0"],
    ["answers status 999", "/status-999"],
    // workerd's fetch() hands back the interim answer as if it were the final one, and the
    // final one is lost: the bare Worker fails on it too
    ["answers an unsolicited 100 Continue before its 200", "/continue"],
    ["answers 103 Early Hints before its 200", "/early-hints"],
  ])("that %s gets a 502 problem+json naming nothing internal, logged as the origin's, counted once", async (_what, path) => {
    const ip = freshIp();
    const before = (await logged(logs, "slidegate.upstream_error", 0)).length;
    const res = await get(gateUrl, path, { "cf-connecting-ip": ip });
    expectBareBadGateway(res, new URL(origin.url).port);
    await logged(logs, "slidegate.upstream_error", before + 1);
    expect(logs.join("\n")).not.toContain("slidegate.internal_error");
    expect(await counted(gateUrl, ip)).toBe(1);
    // workerd fails it on its own too: the bare Worker cannot answer it either
    expect((await get(bareUrl, path)).status).toBe(500);
  });

  const elsewhere = {
    "refuses the connection": async () => {
      const gone = await rawOrigin();
      await new Promise((resolve) => gone.server.close(resolve));
      return gone.url;
    },
    "accepts the connection and closes it at once": async () => {
      const closer = await rawOrigin((socket) => socket.destroy());
      extraServers.push(closer.server);
      return closer.url;
    },
    "has a host name that does not resolve": async () => "http://no-such-host.invalid",
    "is named https:// at a port that speaks plain HTTP": async () => `https://127.0.0.1:${(plain.address() as AddressInfo).port}`,
  };
  it.each(Object.keys(elsewhere))(
    "at an ORIGIN_URL that %s gets a 502 problem+json naming nothing internal, logged, counted once",
    async (what) => {
      const url = await elsewhere[what as keyof typeof elsewhere]();
      const lines: string[] = [];
      const base = await gate({ rules: [{ name: "m", limit: 2, window: "10m" }] }, { ORIGIN_URL: url }, (line) => lines.push(line));
      const ip = freshIp();
      const res = await get(base, "/v1/users", { "cf-connecting-ip": ip });
      expectBareBadGateway(res, new URL(url).port || "no-such-host");
      await logged(lines, "slidegate.upstream_error", 1);
      expect(lines.join("\n")).not.toContain("slidegate.internal_error");
      // counted once: of a limit of 2, the second request is still admitted, the third is not
      expect((await get(base, "/v1/users", { "cf-connecting-ip": ip })).status).toBe(502);
      expect((await get(base, "/v1/users", { "cf-connecting-ip": ip })).status).toBe(429);
    },
    20_000,
  );
});

describe("what an origin may send", () => {
  it("a 100 KB header block reaches the client whole, as through a bare Worker", async () => {
    const res = await get(gateUrl, "/big-header", { "cf-connecting-ip": freshIp() });
    expect(res.status).toBe(200);
    expect(res.body).toBe("hello");
    expect(res.headers?.["x-big"]).toBe("a".repeat(100 * 1024));
    expect((await get(bareUrl, "/big-header")).headers?.["x-big"]).toBe("a".repeat(100 * 1024));
  });

  it("Content-Length beside Transfer-Encoding is read as chunked (RFC 9112 §6.3), as through a bare Worker", async () => {
    const res = await get(gateUrl, "/length-and-chunked", { "cf-connecting-ip": freshIp() });
    const direct = await get(bareUrl, "/length-and-chunked");
    for (const got of [res, direct]) {
      expect(got.status).toBe(200);
      expect(got.body).toBe("hello");
      expect(got.headers?.["content-length"]).toBeUndefined();
    }
  });
});

describe("a body the origin cuts mid-way", () => {
  it.each([
    ["resets", "/length-cut"],
    ["closes", "/length-end"],
  ])("with a Content-Length it never completes (the origin %s) reaches the client as an aborted 200, counted once", async (_how, path) => {
    const ip = freshIp();
    const res = await get(gateUrl, path, { "cf-connecting-ip": ip });
    expect(res.status).toBe(200);
    expect(res.aborted).toBe(true);
    expect(res.body).toBe("hello");
    expect(await counted(gateUrl, ip)).toBe(1);
  });

  it("chunked reaches the client exactly as through a bare Worker: workerd decides how a cut stream ends", async () => {
    // workerd ends a chunked answer whose body stream errors with the last chunk, as if it were
    // complete: the gate hands the stream on and has nothing else to cut it with
    const res = await get(gateUrl, "/chunked-cut", { "cf-connecting-ip": freshIp() });
    const direct = await get(bareUrl, "/chunked-cut");
    expect({ status: res.status, aborted: res.aborted, body: res.body }).toEqual({ status: direct.status, aborted: direct.aborted, body: direct.body });
  });
});

describe("an origin that stalls", () => {
  it.each([
    ["before any header", "/head-stall"],
    ["in the body", "/body-stall"],
  ])(
    "%s holds only its own caller: others are answered meanwhile, and its request is counted once",
    async (_when, path) => {
      const ip = freshIp();
      const held = stalled.length;
      const waiting = get(gateUrl, path, { "cf-connecting-ip": ip }, 60_000);
      await vi.waitFor(() => expect(stalled.length).toBe(held + 1), { timeout: 10_000 });
      const other = await get(gateUrl, "/ok", { "cf-connecting-ip": freshIp() });
      expect(other.status).toBe(200);
      expect(other.body).toBe("hello");
      // released by the test: the origin drops the connection it held
      stalled[held]!.resetAndDestroy();
      const res = await waiting;
      if (path === "/head-stall") expect(res.status).toBe(502);
      else expect(res.aborted).toBe(true);
      expect(await counted(gateUrl, ip)).toBe(1);
    },
    20_000,
  );
});
