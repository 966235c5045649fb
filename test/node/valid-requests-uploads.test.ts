import { Agent, type ClientRequest, request as httpRequest, type IncomingMessage } from "node:http";
import { describe, expect, it } from "vitest";
import { frameworkGates, rawRequest } from "../helpers/framework-origin.ts";

// The gate's own answers (429, 403, 401) to a request whose upload it never reads, through the
// built Worker in workerd with the real shim, Redis and origin: the client gets the answer
// whatever its upload does, and the connection serves its next request.

const { gate } = frameworkGates();

let next = 0;
const freshIp = () => `100.66.${(++next >> 8) & 255}.${next & 255}`;

/** An answer read whole: its status, its Content-Length and its body. */
const readWhole = (res: IncomingMessage) =>
  new Promise<{ status: number; length?: string; body: string }>((resolve, reject) => {
    let body = "";
    res.on("data", (c: Buffer) => (body += c.toString()));
    res.on("end", () => resolve({ status: res.statusCode ?? 0, length: res.headers["content-length"], body }));
    res.on("error", reject);
  });

/** The answer to a request whose client sends nothing more until it has one: an error after 20 s without. */
const answerTo = (req: ClientRequest) =>
  new Promise<IncomingMessage>((resolve, reject) => {
    req.once("response", resolve);
    req.once("error", reject);
    req.setTimeout(20_000, () => reject(new Error("no answer within 20 s to an upload waiting for one")));
  });

describe("an upload the gate answers on its own", () => {
  it("a client that sends more only once it has the answer (an upload of unknown length) gets its 429 at once, whole", async () => {
    const base = new URL(await gate({ rules: [{ name: "m", limit: 1, window: "10m" }] }));
    const ip = freshIp();
    expect((await rawRequest(base.href, { target: "/v1/users", headers: [["cf-connecting-ip", ip]] })).status).toBe(200);
    // as an interactive upload does (the origin's answer says what to send next): the first
    // chunk, then nothing until the server speaks. A gate that read the upload before it
    // answered waited for bytes this client sends only after the answer.
    const req = httpRequest({
      host: base.hostname,
      port: base.port,
      method: "POST",
      path: "/upload",
      agent: false,
      headers: { "cf-connecting-ip": ip, "transfer-encoding": "chunked" },
    });
    try {
      const answered = answerTo(req);
      req.write("the first part of an upload of unknown length");
      const got = await readWhole(await answered);
      expect(got.status).toBe(429);
      expect(Number(got.length)).toBe(Buffer.byteLength(got.body));
      expect(JSON.parse(got.body)).toMatchObject({ type: "urn:slidegate:rate-limited", status: 429 });
    } finally {
      req.destroy();
    }
  });

  it("a client that uploads piece by piece to the admin API's bare prefix gets its 308 to the console at once", async () => {
    const base = new URL(await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] }, { ADMIN_TOKEN: "a".repeat(40) }));
    const req = httpRequest({ host: base.hostname, port: base.port, method: "POST", path: "/__slidegate", agent: false, headers: { "transfer-encoding": "chunked" } });
    try {
      const answered = answerTo(req);
      req.write("the first part");
      const res = await answered;
      const got = await readWhole(res);
      expect([got.status, res.headers.location]).toEqual([308, "/__slidegate/"]);
      expect(Number(got.length)).toBe(Buffer.byteLength(got.body));
    } finally {
      req.destroy();
    }
  });

  it("a client that finishes its upload after the answer has the connection for its next request", async () => {
    const base = new URL(await gate({ deny: { ips: ["198.51.100.0/24"] }, rules: [{ name: "m", limit: 10, window: "10m" }] }));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const denied = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const req = httpRequest(
          { host: base.hostname, port: base.port, method: "POST", path: "/upload", agent, headers: { "cf-connecting-ip": "198.51.100.9", "content-length": String(64 * 1024) } },
          (res) => {
            // the rest of the upload goes only now, the answer in hand
            req.end(Buffer.alloc(48 * 1024, 2));
            void readWhole(res).then((got) => resolve({ status: got.status, reused: req.reusedSocket }), reject);
          },
        );
        req.on("error", reject);
        req.setTimeout(20_000, () => reject(new Error("no answer within 20 s to an upload waiting for one")));
        req.write(Buffer.alloc(16 * 1024, 1));
      });
      expect(denied).toEqual({ status: 403, reused: false });
      const admitted = await new Promise<{ status: number; reused: boolean; bodyBytes: number }>((resolve, reject) => {
        const req = httpRequest(
          { host: base.hostname, port: base.port, method: "POST", path: "/upload", agent, headers: { "cf-connecting-ip": freshIp(), "content-length": "7" } },
          (res) =>
            void readWhole(res).then(
              (got) => resolve({ status: got.status, reused: req.reusedSocket, bodyBytes: (JSON.parse(got.body) as { bodyBytes: number }).bodyBytes }),
              reject,
            ),
        );
        req.on("error", reject);
        req.end("payload");
      });
      expect(admitted).toEqual({ status: 200, reused: true, bodyBytes: 7 });
    } finally {
      agent.destroy();
    }
  });
});
