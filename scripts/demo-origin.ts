import { createHash } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A small echo API to stand behind the gate in local development and tests.
 *
 *   GET  /status/<code>  answers that status, with an `x-origin-status` header
 *   GET  /bytes/<n>      n bytes of a fixed binary pattern (byte i = i * 7 mod 256)
 *   GET  /cookies        two `Set-Cookie` fields, and `X-RateLimit-Limit` and `X-Slidegate-Fail-Open` of the origin's own
 *   POST /upload         the SHA-256 and length of the body it received
 *   GET  /__origin/hits/<id>  how many requests carried x-request-id <id>
 *   *    anything else   a JSON echo of method, path, query and headers
 *
 * Every request is counted by its `x-request-id` header (see `hits`).
 */
export interface RunningOrigin {
  url: string;
  /** how many requests carried this x-request-id */
  hits(id: string): number;
  close(): Promise<void>;
}

export function patternBytes(n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = (i * 7) & 0xff;
  return out;
}

async function digestBody(req: IncomingMessage): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash("sha256");
  let bytes = 0;
  for await (const chunk of req) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { sha256: hash.digest("hex"), bytes };
}

export async function startOrigin(options: { port?: number; host?: string } = {}): Promise<RunningOrigin> {
  const counts = new Map<string, number>();
  // Large headers welcome (Node's default cap is 16 KB): the gate forwards what clients send.
  const server = createServer({ maxHeaderSize: 1 << 20 }, async (req, res) => {
    const id = req.headers["x-request-id"];
    if (typeof id === "string") counts.set(id, (counts.get(id) ?? 0) + 1);
    // Concatenated, not resolved: a path like "//x" is a path here, not a host.
    const url = new URL(`http://origin${req.url ?? "/"}`);
    const status = /^\/status\/(\d{3})$/.exec(url.pathname);
    const bytes = /^\/bytes\/(\d+)$/.exec(url.pathname);
    const hits = /^\/__origin\/hits\/(.+)$/.exec(url.pathname);
    if (hits) {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify({ hits: counts.get(decodeURIComponent(hits[1]!)) ?? 0 }));
    }
    if (status) {
      const code = Number(status[1]);
      res.writeHead(code, { "x-origin-status": String(code), "content-type": "text/plain" });
      return res.end(code === 204 || code === 304 ? undefined : `status ${code}`);
    }
    if (bytes) {
      const body = patternBytes(Number(bytes[1]));
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length, "x-origin-sha256": createHash("sha256").update(body).digest("hex") });
      return res.end(body);
    }
    if (url.pathname === "/cookies") {
      res.writeHead(200, {
        "content-type": "text/plain",
        "set-cookie": ["a=1; Path=/", "b=2, with a comma; Path=/"],
        "x-ratelimit-limit": "origin's own",
        "x-slidegate-fail-open": "written by the origin",
      });
      return res.end("cookies");
    }
    if (url.pathname === "/upload") {
      const body = await digestBody(req);
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify(body));
    }
    const body = await digestBody(req);
    res.writeHead(200, { "content-type": "application/json", "x-origin": "slidegate-demo" });
    res.end(JSON.stringify({ method: req.method, path: url.pathname, query: url.search, headers: req.headers, body }));
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits: (id) => counts.get(id) ?? 0,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
