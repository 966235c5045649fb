import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { brotliCompressSync, brotliDecompressSync, deflateSync, gunzipSync, gzipSync, inflateSync } from "node:zlib";
import { Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { frameworkGates } from "../helpers/framework-origin.ts";

// Invariant 8 for what HTTP says about representations: content codings, ranges, conditional
// requests and large bodies, through the built Worker in workerd against an origin that answers
// as a real server does. Each answer is compared with the origin's own, and where workerd's
// fetch() changes it (it decodes and re-encodes gzip and br, and sends every origin its own
// Accept-Encoding), with what a Worker that does nothing but fetch(request) delivers: the gate
// must add nothing to what the runtime does.

const { gate } = frameworkGates();

const TEXT = Buffer.from("a representation, compressed by the origin. ".repeat(400));
const CODED = { gzip: gzipSync(TEXT), deflate: deflateSync(TEXT), br: brotliCompressSync(TEXT) } as const;
const decode: Record<string, (b: Buffer) => Buffer> = { gzip: gunzipSync, deflate: inflateSync, br: brotliDecompressSync };
const RANGED = Buffer.from("0123456789abcdefghijklmnopqrstuvwxyz");
const LAST_MODIFIED = "Mon, 01 Jan 2024 00:00:00 GMT";
const MiB = 1 << 20;
/** the i-th MiB of a large body: a byte that changes per MiB, so a lost or repeated MiB changes the hash */
const mebibyte = (i: number) => Buffer.alloc(MiB, i % 251);
const sha256 = (...parts: Buffer[]) => parts.reduce((h, p) => h.update(p), createHash("sha256")).digest("hex");

/** The coding a server picks for an Accept-Encoding: br, else gzip, when listed and not refused (q=0); else none. */
function negotiate(accept: string | undefined): "br" | "gzip" | "identity" {
  const listed = new Set(
    (accept ?? "")
      .split(",")
      .map((c) => c.trim().toLowerCase())
      .filter((c) => c && !/;\s*q=0(?:\.0*)?$/.test(c))
      .map((c) => c.split(";")[0]!.trim()),
  );
  return listed.has("br") ? "br" : listed.has("gzip") ? "gzip" : "identity";
}

interface Received {
  method: string;
  headers: IncomingHttpHeaders;
  bytes: number;
  sha256: string;
}

/** What the origin received last, by path. */
const received = new Map<string, Received>();
/** The MiBs of a large download the origin holds back until the client has read its first. */
let releaseDownload: () => void = () => {};
let originHasFirstMiB: () => void = () => {};

async function serve(req: IncomingMessage, res: ServerResponse) {
  const path = (req.url ?? "/").split("?")[0]!;
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    hash.update(chunk);
    bytes += chunk.length;
    if (bytes >= MiB) originHasFirstMiB();
  }
  received.set(path, { method: req.method ?? "", headers: req.headers, bytes, sha256: hash.digest("hex") });
  const coding = /^\/coded\/(gzip|deflate|br)$/.exec(path)?.[1] as keyof typeof CODED | undefined;
  if (coding) {
    const body = CODED[coding];
    res.writeHead(200, { "content-type": "text/plain", "content-encoding": coding, "content-length": body.length, vary: "Accept-Encoding", etag: `"${coding}"` });
    return res.end(body);
  }
  switch (path) {
    case "/negotiated": {
      // as a server with compression on (nginx's gzip and brotli modules): the coding the
      // client accepts, br first, and a HEAD answered with the length its GET would have
      const coding = negotiate(req.headers["accept-encoding"]);
      const body = coding === "identity" ? TEXT : CODED[coding];
      const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? "");
      const headers = { "content-type": "text/plain", vary: "Accept-Encoding", etag: `"n-${coding}"`, ...(coding === "identity" ? {} : { "content-encoding": coding }) };
      if (range) {
        // a range of the representation as coded, as nginx serves a precompressed file (gzip_static)
        const [from, to] = [Number(range[1]), Number(range[2])];
        res.writeHead(206, { ...headers, "content-range": `bytes ${from}-${to}/${body.length}`, "content-length": to - from + 1 });
        return res.end(body.subarray(from, to + 1));
      }
      res.writeHead(200, { ...headers, "content-length": body.length });
      return res.end(req.method === "HEAD" ? undefined : body);
    }
    case "/archive.tar.gz": {
      const body = CODED.gzip;
      res.writeHead(200, { "content-type": "application/gzip", "content-length": body.length, etag: '"archive"' });
      return res.end(body);
    }
    case "/upload":
      res.writeHead(200, { "content-type": "text/plain" });
      return res.end(`${bytes} ${received.get(path)!.sha256}`);
    case "/ranged": {
      // as nginx serves a static file: one range as 206, several as multipart/byteranges, If-Range by the ETag
      const range = req.headers.range;
      const ifRange = req.headers["if-range"];
      const common = { etag: '"r1"', "accept-ranges": "bytes", "last-modified": LAST_MODIFIED };
      if (!range || (ifRange !== undefined && ifRange !== '"r1"')) {
        res.writeHead(200, { ...common, "content-type": "text/plain", "content-length": RANGED.length });
        return res.end(RANGED);
      }
      const ranges = range
        .replace(/^bytes=/, "")
        .split(",")
        .map((r) => r.trim().split("-").map(Number) as [number, number]);
      if (ranges.length === 1) {
        const [from, to] = ranges[0]!;
        res.writeHead(206, { ...common, "content-type": "text/plain", "content-range": `bytes ${from}-${to}/${RANGED.length}`, "content-length": to - from + 1 });
        return res.end(RANGED.subarray(from, to + 1));
      }
      const parts = ranges.map(
        ([from, to]) => `--B0UNDARY\r\nContent-Type: text/plain\r\nContent-Range: bytes ${from}-${to}/${RANGED.length}\r\n\r\n${RANGED.subarray(from, to + 1)}\r\n`,
      );
      const body = Buffer.from(`${parts.join("")}--B0UNDARY--\r\n`);
      res.writeHead(206, { ...common, "content-type": "multipart/byteranges; boundary=B0UNDARY", "content-length": body.length });
      return res.end(body);
    }
    case "/large":
      // a HEAD is answered with the length a GET would have, and no body
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": 50 * MiB, etag: '"large"' });
      if (req.method === "HEAD") return res.end();
      res.write(mebibyte(0));
      await new Promise<void>((resolve) => (releaseDownload = resolve));
      for (let i = 1; i < 50; i++) if (!res.write(mebibyte(i))) await new Promise((resolve) => res.once("drain", resolve));
      return res.end();
    case "/conditional": {
      const common = { etag: '"c1"', "last-modified": LAST_MODIFIED, "cache-control": "max-age=60", vary: "Accept-Encoding" };
      if (req.headers["if-none-match"] === '"c1"' || req.headers["if-modified-since"] === LAST_MODIFIED) {
        res.writeHead(304, common);
        return res.end();
      }
      res.writeHead(200, { ...common, "content-type": "text/plain" });
      return res.end("the representation");
    }
    case "/cacheable": {
      // what a cache and a browser read besides the representation; with ?many, more hop-by-hop
      // names than the gate deletes one by one, so it copies the headers instead
      res.setHeader("cache-control", "public, max-age=300, s-maxage=600, stale-while-revalidate=30");
      res.setHeader("age", "42");
      res.setHeader("date", "Mon, 01 Jan 2024 00:00:05 GMT");
      res.setHeader("expires", "Mon, 01 Jan 2024 00:05:05 GMT");
      res.setHeader("vary", "Accept, Authorization");
      res.setHeader("set-cookie", ["a=1; Expires=Wed, 21 Oct 2099 07:28:00 GMT; Path=/", "b=2; Expires=Thu, 22 Oct 2099 07:28:00 GMT; HttpOnly"]);
      res.setHeader("www-authenticate", ['Basic realm="files"', 'Bearer realm="api", error="invalid_token"']);
      res.setHeader("link", ["</v1/b>; rel=next", "</v1/a>; rel=prev"]);
      if (req.url?.endsWith("?many")) {
        const listed = Array.from({ length: 20 }, (_, i) => `x-hop-${i}`);
        res.setHeader("connection", listed.join(", "));
        for (const name of listed) res.setHeader(name, "dropped");
      }
      res.writeHead(200, { "content-type": "text/plain", "content-length": 2 });
      return res.end("ok");
    }
    case "/no-content":
      res.writeHead(204, { "x-origin": "204" });
      return res.end();
    case "/reset-content":
      res.writeHead(205, { "x-origin": "205" });
      return res.end();
    case "/conditional-many":
    case "/reset-content-many": {
      // more hop-by-hop names than the gate deletes one by one: it copies the headers instead
      const listed = Array.from({ length: 20 }, (_, i) => `x-hop-${i}`);
      const headers: Record<string, string> = { etag: '"m1"', "x-origin": "kept", connection: listed.join(", ") };
      for (const name of listed) headers[name] = "dropped";
      res.writeHead(path === "/conditional-many" ? 304 : 205, headers);
      return res.end();
    }
  }
  res.writeHead(404).end();
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One request, its answer read raw: no decoding, the headers as they came. */
function send(base: string, path: string, options: { method?: string; headers?: Record<string, string>; body?: Buffer } = {}): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: url.hostname, port: url.port, method: options.method ?? "GET", path, headers: options.headers ?? {}, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });
}

/** What a client can tell of an answer's representation. */
const representation = (a: Answer) => ({
  status: a.status,
  body: a.body.toString("base64"),
  ...Object.fromEntries(
    ["content-encoding", "content-length", "content-type", "content-range", "etag", "last-modified", "cache-control", "vary", "accept-ranges", "x-origin"].map((h) => [
      h,
      a.headers[h],
    ]),
  ),
});

let origin: Server;
let originUrl: string;
let bare: Miniflare;
let bareUrl: string;
let gateUrl: string;

beforeAll(async () => {
  origin = createServer((req, res) => void serve(req, res));
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  // a Worker that does nothing but pass the request on: what workerd itself makes of each answer
  bare = new Miniflare({
    modules: true,
    compatibilityDate: /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync("wrangler.toml", "utf8"))![1]!,
    bindings: { ORIGIN: originUrl },
    script: "export default { fetch(request, env) { const url = new URL(request.url); return fetch(new Request(env.ORIGIN + url.pathname + url.search, request)); } };",
  });
  bareUrl = (await bare.ready).href;
  gateUrl = await gate({ rules: [{ name: "m", limit: 10_000, window: "10m" }] }, { ORIGIN_URL: originUrl });
});

afterAll(async () => {
  await bare?.dispose();
  origin?.closeAllConnections();
  await new Promise((resolve) => origin?.close(resolve));
});

describe("content codings", () => {
  // undefined: a client that sends no Accept-Encoding, to which any coding is acceptable
  const accepts = ["gzip, br", "br", undefined, "identity"];
  const cases = (["gzip", "deflate", "br"] as const).flatMap((coding) => accepts.map((accept) => [coding, accept] as const));

  it.each(cases)("an origin's %s answer to Accept-Encoding %j reaches the client as through a bare Worker, its headers matching its bytes", async (coding, accept) => {
    const headers: Record<string, string> = accept === undefined ? {} : { "accept-encoding": accept };
    const viaGate = await send(gateUrl, `/coded/${coding}`, { headers });
    const viaBare = await send(bareUrl, `/coded/${coding}`, { headers });
    expect(representation(viaGate)).toEqual(representation(viaBare));
    // whatever workerd made of it, the body is what the Content-Encoding it carries says
    const carried = viaGate.headers["content-encoding"];
    expect(carried === undefined ? viaGate.body : decode[carried as string]!(viaGate.body)).toEqual(TEXT);
    if (viaGate.headers["content-length"] !== undefined) expect(Number(viaGate.headers["content-length"])).toBe(viaGate.body.length);
    if (accept === undefined || (accept === "gzip, br" && coding !== "br") || accept === coding) {
      // a coding the client takes as the origin chose it: the origin's own bytes and length
      const direct = await send(originUrl, `/coded/${coding}`, { headers });
      expect(representation(viaGate)).toEqual(representation(direct));
    }
  });

  // workerd hands a Worker `Accept-Encoding: br, gzip` whatever the client sent, and keeps the
  // client's in cf.clientAcceptEncoding; the origin, told the runtime's, answered a client that
  // takes no coding with one the runtime then had to undo
  it.each([
    ["identity", "identity"],
    ["gzip;q=0, br", "gzip;q=0, br"],
    ["zstd", "zstd"],
    ["gzip, deflate, br, zstd", "gzip, deflate, br, zstd"],
    [undefined, undefined],
  ])("the origin is sent the client's own Accept-Encoding (%j), or none when it sent none", async (accept, sent) => {
    await send(gateUrl, "/coded/gzip", { headers: accept === undefined ? {} : { "accept-encoding": accept } });
    expect(received.get("/coded/gzip")!.headers["accept-encoding"]).toBe(sent);
  });

  it.each(["identity", "gzip", "br", undefined, "zstd"])(
    "an origin that negotiates a coding answers Accept-Encoding %j through the gate as it answers it directly: its coding, its bytes, its length",
    async (accept) => {
      const headers: Record<string, string> = accept === undefined ? {} : { "accept-encoding": accept };
      const direct = await send(originUrl, "/negotiated", { headers });
      const viaGate = await send(gateUrl, "/negotiated", { headers });
      expect(representation(viaGate)).toEqual(representation(direct));
    },
  );

  it("a HEAD from a client that takes no coding gets the Content-Length its GET gets, and no Content-Encoding", async () => {
    const headers = { "accept-encoding": "identity" };
    const head = await send(gateUrl, "/negotiated", { method: "HEAD", headers });
    const get = await send(gateUrl, "/negotiated", { headers });
    expect(get.body).toEqual(TEXT);
    expect(head.headers["content-encoding"]).toBeUndefined();
    expect(head.headers["content-length"]).toBe(String(TEXT.length));
  });

  it("a range asked for by a client that takes no coding arrives with the bytes its Content-Range names", async () => {
    const answer = await send(gateUrl, "/negotiated", { headers: { "accept-encoding": "identity", range: "bytes=0-9" } });
    expect(answer.status).toBe(206);
    expect(answer.headers["content-encoding"]).toBeUndefined();
    expect(answer.headers["content-range"]).toBe(`bytes 0-9/${TEXT.length}`);
    expect(answer.body).toEqual(TEXT.subarray(0, 10));
  });
  it.each(["gzip, br", "identity", undefined])(
    "a precompressed download (application/gzip, no Content-Encoding) arrives byte for byte with its length, to Accept-Encoding %j",
    async (accept) => {
      const answer = await send(gateUrl, "/archive.tar.gz", { headers: accept === undefined ? {} : { "accept-encoding": accept } });
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual(CODED.gzip);
      expect(answer.headers["content-length"]).toBe(String(CODED.gzip.length));
      expect(answer.headers["content-encoding"]).toBeUndefined();
      expect(answer.headers["content-type"]).toBe("application/gzip");
    },
  );

  it.each([
    ["Content-Length", { "content-length": String(CODED.gzip.length) }],
    ["chunked", { "transfer-encoding": "chunked" }],
  ])("an upload with Content-Encoding: gzip (%s) reaches the origin byte for byte, with its header and framing", async (_framing, framing) => {
    const direct = await send(originUrl, "/upload", { method: "PUT", headers: { "content-encoding": "gzip", ...framing }, body: CODED.gzip });
    const seenDirect = received.get("/upload")!;
    const viaGate = await send(gateUrl, "/upload", { method: "PUT", headers: { "content-encoding": "gzip", ...framing }, body: CODED.gzip });
    const seen = received.get("/upload")!;
    expect(viaGate.body.toString()).toBe(direct.body.toString());
    expect(seen.sha256).toBe(sha256(CODED.gzip));
    expect(seen.headers["content-encoding"]).toBe("gzip");
    expect(seen.headers["content-length"]).toBe(seenDirect.headers["content-length"]);
    expect(seen.headers["transfer-encoding"]).toBe(seenDirect.headers["transfer-encoding"]);
  });
});

describe("range requests", () => {
  it.each([
    ["one range", { range: "bytes=0-9" }, 206],
    ["two ranges (multipart/byteranges)", { range: "bytes=0-1, 5-7" }, 206],
    ["a range If-Range its ETag", { range: "bytes=3-5", "if-range": '"r1"' }, 206],
    ["a range If-Range another ETag", { range: "bytes=3-5", "if-range": '"old"' }, 200],
  ] as const)("%s: the origin's answer arrives as it sent it, and the origin sees Range and If-Range", async (_name, headers, status) => {
    const direct = await send(originUrl, "/ranged", { headers });
    const viaGate = await send(gateUrl, "/ranged", { headers });
    expect(viaGate.status).toBe(status);
    expect(representation(viaGate)).toEqual(representation(direct));
    expect(received.get("/ranged")!.headers.range).toBe(headers.range);
    expect(received.get("/ranged")!.headers["if-range"]).toBe("if-range" in headers ? headers["if-range"] : undefined);
  });

  it("a HEAD of a 50 MB resource keeps its Content-Length and carries no body", async () => {
    const answer = await send(gateUrl, "/large", { method: "HEAD" });
    expect(answer.status).toBe(200);
    expect(answer.headers["content-length"]).toBe(String(50 * MiB));
    expect(answer.headers.etag).toBe('"large"');
    expect(answer.body.length).toBe(0);
    expect(received.get("/large")!.method).toBe("HEAD");
  });
});

describe("conditional requests and answers without content", () => {
  it.each([
    ["If-None-Match", { "if-none-match": '"c1"' }],
    ["If-Modified-Since", { "if-modified-since": LAST_MODIFIED }],
  ])("%s reaches the origin, and its 304 reaches the client with its ETag and validators, and no body", async (name, headers) => {
    const direct = await send(originUrl, "/conditional", { headers });
    const viaGate = await send(gateUrl, "/conditional", { headers });
    expect(viaGate.status).toBe(304);
    expect(representation(viaGate)).toEqual(representation(direct));
    expect(received.get("/conditional")!.headers[name.toLowerCase()]).toBe(Object.values(headers)[0]);
  });

  it("an unconditional request gets the 200 with the origin's ETag, Cache-Control and Vary as it sent them", async () => {
    const viaGate = await send(gateUrl, "/conditional");
    const direct = await send(originUrl, "/conditional");
    expect(viaGate.status).toBe(200);
    expect(representation(viaGate)).toEqual(representation(direct));
  });

  it.each(["/cacheable", "/cacheable?many"])(
    "%s: the origin's caching and authentication headers (Age, Date, Expires, each Set-Cookie with its Expires, each WWW-Authenticate) arrive as it wrote them",
    async (path) => {
      const viaGate = await send(gateUrl, path);
      const direct = await send(originUrl, path);
      const kept = (a: Answer) =>
        Object.fromEntries(["cache-control", "age", "date", "expires", "vary", "set-cookie", "www-authenticate", "link", "content-length"].map((h) => [h, a.headers[h]]));
      expect(viaGate.status).toBe(200);
      expect(kept(viaGate)).toEqual(kept(direct));
      expect(viaGate.headers["set-cookie"]).toHaveLength(2);
      expect(Object.keys(viaGate.headers).filter((h) => h.startsWith("x-hop-"))).toEqual([]);
    },
  );

  it.each([
    ["/no-content", 204],
    ["/reset-content", 205],
    ["/conditional-many", 304],
    ["/reset-content-many", 205],
  ])("%s: the origin's %i arrives with its headers, no body and no Transfer-Encoding", async (path, status) => {
    for (const method of ["GET", "POST"]) {
      const viaGate = await send(gateUrl, path, { method });
      const viaBare = await send(bareUrl, path, { method });
      expect(viaGate.status, method).toBe(status);
      expect(viaGate.body.length, method).toBe(0);
      expect(viaGate.headers["transfer-encoding"], method).toBeUndefined();
      expect(viaGate.headers["x-origin"], method).toBe(viaBare.headers["x-origin"]);
      expect(viaGate.headers.etag, method).toBe(viaBare.headers.etag);
      // the names the origin's Connection listed are its hop's own
      expect(
        Object.keys(viaGate.headers).filter((h) => h.startsWith("x-hop-")),
        method,
      ).toEqual([]);
    }
  });
});

describe("large bodies", () => {
  it("a 50 MB download arrives whole, streamed: the client reads the first MiB before the origin writes the second", async () => {
    const url = new URL(gateUrl);
    const got = await new Promise<{ status: number; length?: string; bytes: number; sha256: string }>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: "/large", agent: false }, (res) => {
        const hash = createHash("sha256");
        let bytes = 0;
        res.on("data", (chunk: Buffer) => {
          hash.update(chunk);
          bytes += chunk.length;
          // the rest is written only now: a gate that buffered the answer would wait forever
          if (bytes >= MiB) releaseDownload();
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, length: res.headers["content-length"], bytes, sha256: hash.digest("hex") }));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end();
    });
    expect(got).toEqual({ status: 200, length: String(50 * MiB), bytes: 50 * MiB, sha256: sha256(...Array.from({ length: 50 }, (_, i) => mebibyte(i))) });
  }, 60_000);

  it("a 50 MB upload reaches the origin whole, streamed: the origin reads the first MiB before the client sends the second", async () => {
    const url = new URL(gateUrl);
    const parts = Array.from({ length: 50 }, (_, i) => mebibyte(i + 7));
    const firstArrived = new Promise<void>((resolve) => (originHasFirstMiB = resolve));
    const answer = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, method: "PUT", path: "/upload", agent: false, headers: { "content-length": String(50 * MiB) } }, (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => (text += chunk));
        res.on("end", () => resolve(text));
        res.on("error", reject);
      });
      req.on("error", reject);
      void (async () => {
        req.write(parts[0]);
        // a gate that read the whole upload before sending it on would wait forever here
        await firstArrived;
        for (const part of parts.slice(1)) if (!req.write(part)) await new Promise((resolve) => req.once("drain", resolve));
        req.end();
      })();
    });
    expect(answer).toBe(`${50 * MiB} ${sha256(...parts)}`);
    expect(received.get("/upload")!.headers["content-length"]).toBe(String(50 * MiB));
  }, 60_000);
});
