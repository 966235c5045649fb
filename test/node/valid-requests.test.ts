import { createHash } from "node:crypto";
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { type AddressInfo, createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import WebSocket, { WebSocketServer } from "ws";
import { type Echo, frameworkGates, rawRequest } from "../helpers/framework-origin.ts";

// Valid requests the gate must not break, and what it must not tell: the built Worker in
// workerd, the real shim and Redis, and the framework-like origin.

const { gate, origin } = frameworkGates();

let next = 0;
const freshIp = () => `100.65.${(++next >> 8) & 255}.${next & 255}`;
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

describe("GET and HEAD with a body or a Content-Length", () => {
  let base: string;
  beforeAll(async () => {
    base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
  });

  it.each([
    ["GET", [["content-length", "0"]], undefined],
    ["GET", [["content-length", "3"]], "abc"],
    ["GET", [["transfer-encoding", "chunked"]], "a chunked body"],
    ["HEAD", [["content-length", "0"]], undefined],
    ["HEAD", [["content-length", "5"]], "hello"],
  ] as [string, [string, string][], string | undefined][])("%s with %j reaches the origin with its body, charged once", async (method, headers, body) => {
    const ip = freshIp();
    const res = await rawRequest(base, { method, target: "/v1/users", headers: [["cf-connecting-ip", ip], ...headers], body });
    expect(res.status).toBe(200);
    expect(res.headers["x-handler"]).toBe("users");
    expect(res.headers["x-ratelimit-remaining"]).toBe("9");
    // what the origin would read sent directly: a search query in a GET body, say
    if (method === "GET") expect((JSON.parse(res.body) as Echo).bodyBytes).toBe(body?.length ?? 0);
    // the next request of the same caller sees exactly one unit spent before it
    const after = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", ip]] });
    expect(after.headers["x-ratelimit-remaining"]).toBe("8");
  });

  it("still forwards bodies on every other method, DELETE and OPTIONS included", async () => {
    for (const method of ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]) {
      const res = await rawRequest(base, {
        method,
        target: "/upload",
        headers: [
          ["cf-connecting-ip", freshIp()],
          ["content-length", "7"],
        ],
        body: "payload",
      });
      expect(res.status, method).toBe(200);
      expect((JSON.parse(res.body) as Echo).bodyBytes, method).toBe(7);
    }
  });
});

describe("the query string", () => {
  it.each([
    // an empty query is still one: "?" ends the target the client signed or the origin keys a cache by
    ["/v1/users?", "/v1/users?"],
    ["/v1/users?q=%zz&r=%7e&s=a+b&t=&&u", "/v1/users?q=%zz&r=%7e&s=a+b&t=&&u"],
    ["/v1/users?%%", "/v1/users?%%"],
  ])("%s reaches the origin byte for byte, as workerd hands it to the gate", async (target, forwarded) => {
    const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, { target, headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(200);
    expect((JSON.parse(res.body) as Echo).target).toBe(forwarded);
  });
});

describe("an upload that expects 100 Continue", () => {
  it("reaches the origin whole and gets the origin's answer, as it would sent directly", async () => {
    const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
    const payload = "x".repeat(64 * 1024);
    const res = await rawRequest(base, {
      method: "POST",
      target: "/upload",
      headers: [
        ["cf-connecting-ip", freshIp()],
        ["content-length", String(payload.length)],
        ["expect", "100-continue"],
      ],
      body: payload,
    });
    expect(res.status).toBe(200);
    expect((JSON.parse(res.body) as Echo).bodyBytes).toBe(payload.length);
  });
});

describe("an upload that expects 100 Continue, refused by the gate", () => {
  it("gets its 429 before it sends the body, as RFC 9110 lets a server answer in place of 100 Continue", async () => {
    const base = new URL(await gate({ rules: [{ name: "m", limit: 1, window: "10m" }] }));
    const ip = freshIp();
    expect((await rawRequest(base.href, { target: "/v1/users", headers: [["cf-connecting-ip", ip]] })).status).toBe(200);
    // the headers alone: a client that waits for 100 Continue (curl does, for bodies over 1 MB)
    // sends nothing more until the server speaks; before, the gate waited for the body it drains
    const sent = { body: false };
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        {
          host: base.hostname,
          port: base.port,
          method: "POST",
          path: "/upload",
          agent: false,
          headers: { "cf-connecting-ip": ip, "content-length": String(4 << 20), expect: "100-continue" },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
          req.destroy();
        },
      );
      req.on("continue", () => {
        sent.body = true;
        req.end(Buffer.alloc(4 << 20));
      });
      req.on("error", (e) => (sent.body ? undefined : reject(e)));
      req.setTimeout(20_000, () => reject(new Error("no answer within 20 s to the headers alone")));
      req.flushHeaders();
    });
    expect(status).toBe(429);
    expect(sent.body).toBe(false);
  });
});

describe("a TRACE request, which undici builds no Request of", () => {
  it("gets the origin's 405 directly and through the gate, counted once", async () => {
    const direct = await rawRequest(origin().url, { method: "TRACE", target: "/v1/users" });
    expect(direct.status).toBe(405);
    expect(direct.headers.allow).toContain("GET");
    const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, { method: "TRACE", target: "/v1/users", headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(405);
    expect(res.headers["x-ratelimit-remaining"]).toBe("9");
  }, 10_000);
});

describe("an origin that answers a status no response can carry", () => {
  it.each([[103], [600]])("answers %i as a 502 from the origin, logged as the origin's, not as a failure of the gate", async (status) => {
    // an origin of raw sockets: a framework would not write these
    const server = createServer((socket) => {
      socket.once("data", () => socket.end(`HTTP/1.1 ${status} Odd\r\nContent-Length: 0\r\n\r\n`));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const logs: string[] = [];
      const { port } = server.address() as AddressInfo;
      const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] }, { ORIGIN_URL: `http://127.0.0.1:${port}` }, (line) => logs.push(line));
      const res = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", freshIp()]] });
      expect(res.status).toBe(502);
      await vi.waitFor(() => expect(logs.join("\n")).toContain("slidegate.upstream_error"), { timeout: 10_000 });
      expect(logs.join("\n")).not.toContain("slidegate.internal_error");
    } finally {
      server.close();
    }
  });
});

describe("an origin's answer with many headers to drop", () => {
  it("keeps the status, the body, both cookies and the other headers, and drops only the gate's own names", async () => {
    const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, { target: "/v1/many-headers", headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(201);
    expect(res.body).toBe("the body");
    expect(res.headers["x-kept"]).toBe("yes");
    expect(res.headers["set-cookie"]).toEqual(["a=1; Path=/", "b=2, with a comma; Path=/"]);
    expect(Object.keys(res.headers).filter((h) => h.startsWith("x-slidegate-forged"))).toEqual([]);
    expect(res.headers["x-ratelimit-remaining"]).toBe("9");
  });
});

describe("WebSocket upgrades", () => {
  let base: string;
  beforeAll(async () => {
    base = await gate({ rules: [{ name: "sockets", limit: 1, window: "10m", path: "/v1/*" }] });
  });

  const connect = (ip: string) => {
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}v1/socket`, { headers: { "cf-connecting-ip": ip } });
    return new Promise<{ ws?: WebSocket; status?: number }>((resolve, reject) => {
      ws.once("open", () => resolve({ ws }));
      ws.once("unexpected-response", (_req, res) => {
        resolve({ status: res.statusCode });
        res.resume();
        ws.terminate();
      });
      ws.once("error", reject);
    });
  };

  it("proxies an admitted upgrade both ways, and counts it as one request", async () => {
    const ip = freshIp();
    const before = origin().hits("socket");
    const { ws, status } = await connect(ip);
    expect(status).toBeUndefined();
    const echoed = new Promise<string>((resolve) => ws!.once("message", (data) => resolve(data.toString())));
    ws!.send("hello through the gate");
    expect(await echoed).toBe("echo: hello through the gate");
    const binary = new Promise<Buffer>((resolve) => ws!.once("message", (data) => resolve(data as Buffer)));
    ws!.send(Buffer.from([0, 1, 2, 255]));
    expect([...(await binary)]).toEqual([0, 1, 2, 255]);
    ws!.close();
    expect(origin().hits("socket") - before).toBe(1);
    // the one request the rule allows is spent
    expect((await connect(ip)).status).toBe(429);
    expect(origin().hits("socket") - before).toBe(1);
  });
});

describe('allow and deny lists come before "key required"', () => {
  it("an allow-listed IP without a key goes straight through; a deny-listed one gets 403", async () => {
    const base = await gate({
      identity: { header: "x-api-key", required: true },
      allow: { ips: ["192.0.2.0/24"] },
      deny: { ips: ["198.51.100.0/24"] },
      rules: [{ name: "m", limit: 1, window: "10m" }],
    });
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", "192.0.2.44"]] })).status);
    expect(codes).toEqual([200, 200, 200]);
    const denied = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", "198.51.100.44"]] });
    expect(denied.status).toBe(403);
    expect(JSON.parse(denied.body)).toMatchObject({ type: "urn:slidegate:forbidden" });
    const other = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", "203.0.113.44"]] });
    expect(other.status).toBe(401);
    expect(other.headers["www-authenticate"]).toMatch(/^Bearer /);
  });
});

describe("a misconfigured gate", () => {
  it("answers every caller a generic 500 and keeps the details for the log", async () => {
    const logs: string[] = [];
    const secretHash = sha256("a-denied-key");
    const base = await gate(
      JSON.stringify({ deny: { keys: [secretHash], ips: ["198.51.100.0/24"] }, rules: [{ name: "default", limit: 0, window: "10s" }] }),
      { ORIGIN_URL: "https://deploy:hunter2@origin.internal.example:8443/api" },
      (line) => logs.push(line),
    );
    const res = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(500);
    expect(res.headers["content-type"]).toBe("application/problem+json");
    const body = JSON.parse(res.body) as { type: string; detail: string };
    expect(body.type).toBe("urn:slidegate:configuration-error");
    for (const leak of ["hunter2", "origin.internal", secretHash, "198.51.100", "RATE_LIMITS", "limit"]) expect(res.body, leak).not.toContain(leak);
    // workerd's output reaches this process a moment after the answer
    await vi.waitFor(() => expect(logs.join("\n")).toContain("RATE_LIMITS.rules[0].limit: must be at least 1"), { timeout: 10_000 });
  });

  it("never echoes an ORIGIN_URL that is not a URL, not even to the log", async () => {
    const logs: string[] = [];
    const base = await gate({ rules: [{ name: "default", limit: 5, window: "10s" }] }, { ORIGIN_URL: "hunter2 is no url" }, (line) => logs.push(line));
    const res = await rawRequest(base, { target: "/", headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(500);
    expect(res.body).not.toContain("hunter2");
    await vi.waitFor(() => expect(logs.join("\n")).toContain("ORIGIN_URL: is not a URL"), { timeout: 10_000 });
    expect(logs.join("\n")).not.toContain("hunter2");
  });

  // The path and query are appended to ORIGIN_URL: a query or fragment in it would carry every
  // request's path into the query or drop it, and a scheme fetch cannot load would pass for an
  // origin that cannot be reached (a 502) when it is the gate's configuration at fault.
  it.each([
    ["a query", (origin: string) => `${origin}/?tenant=hunter2`],
    ["a fragment", (origin: string) => `${origin}/#hunter2`],
    ["a scheme other than http or https", (origin: string) => `${origin.replace(/^http:/, "ftp:")}/hunter2`],
  ])("refuses an ORIGIN_URL with %s as a configuration error, naming it, without echoing it", async (_, spelled) => {
    const logs: string[] = [];
    const base = await gate({ rules: [{ name: "default", limit: 5, window: "10s" }] }, { ORIGIN_URL: spelled(origin().url) }, (line) => logs.push(line));
    const res = await rawRequest(base, { target: "/v1/users?q=1", headers: [["cf-connecting-ip", freshIp()]] });
    expect(res.status).toBe(500);
    expect((JSON.parse(res.body) as { type: string }).type).toBe("urn:slidegate:configuration-error");
    await vi.waitFor(() => expect(logs.join("\n")).toContain("ORIGIN_URL: "), { timeout: 10_000 });
    expect(logs.join("\n")).not.toContain("hunter2");
  });
});

describe("the origin learns the client", () => {
  const forged: [string, string][] = [
    ["x-forwarded-for", "10.9.8.7"],
    ["x-forwarded-host", "admin.internal"],
    ["x-forwarded-proto", "http"],
    ["x-real-ip", "10.1.1.1"],
    ["forwarded", "for=10.2.2.2;host=admin.internal"],
    // other names and spellings origins read a client address from
    ["X_Forwarded_For", "10.3.3.3"],
    ["client-ip", "10.4.4.4"],
    ["x-cluster-client-ip", "10.5.5.5"],
    ["X_Real_IP", "10.6.6.6"],
    // read by the common PHP client-address function (HTTP_X_FORWARDED, HTTP_FORWARDED_FOR)
    ["x-forwarded", "for=10.7.7.7"],
    ["forwarded-for", "10.8.8.8"],
    // the scheme as Rack reads it besides X-Forwarded-Proto (HTTP_X_FORWARDED_SCHEME, HTTP_X_FORWARDED_SSL)
    ["x-forwarded-scheme", "http"],
    ["x-forwarded-ssl", "off"],
    // the proxy's own name (Apache mod_proxy, Traefik)
    ["x-forwarded-server", "admin.internal"],
    // a client certificate as a TLS-terminating proxy vouches for it (RFC 9440, which has the
    // proxy drop the client's own; Envoy's XFCC; ASP.NET Core's certificate forwarding; Azure's)
    ["client-cert", ":MIIBzz==:"],
    ["client-cert-chain", ":MIIBzz==:"],
    ["x-forwarded-client-cert", 'Hash=1;Subject="CN=admin"'],
    ["x-client-cert", "MIIBzz=="],
    ["x-arr-clientcert", "MIIBzz=="],
    // Traefik's PassTLSClientCert, and an AWS Application Load Balancer's mutual TLS
    ["x-forwarded-tls-client-cert", "MIIBzz=="],
    ["x-forwarded-tls-client-cert-info", 'Subject="CN=admin"'],
    ["x-amzn-mtls-clientcert", "-----BEGIN%20CERTIFICATE-----"],
    ["x-amzn-mtls-clientcert-leaf", "-----BEGIN%20CERTIFICATE-----"],
    ["x-amzn-mtls-clientcert-serial-number", "01"],
    ["x-amzn-mtls-clientcert-issuer", "CN=Acme CA"],
    ["x-amzn-mtls-clientcert-subject", "CN=admin"],
    ["x-amzn-mtls-clientcert-validity", "NotBefore=2025-01-01T00:00:00Z;NotAfter=2099-01-01T00:00:00Z"],
  ];

  it("in X-Forwarded-For (the gate's canonical address, replacing the client's), with forged X-Forwarded-* dropped", async () => {
    const base = await gate({ rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, { target: "/v1/users", headers: [["cf-connecting-ip", "2001:0DB8:0000:0000:0000:0000:0000:0042"], ...forged] });
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers["x-forwarded-for"]).toBe("2001:db8::42");
    for (const name of [
      "x-forwarded-host",
      "x-forwarded-proto",
      "x-real-ip",
      "forwarded",
      "x_forwarded_for",
      "client-ip",
      "x-cluster-client-ip",
      "x_real_ip",
      "x-forwarded",
      "forwarded-for",
      "x-forwarded-scheme",
      "x-forwarded-ssl",
      "x-forwarded-server",
      "client-cert",
      "client-cert-chain",
      "x-forwarded-client-cert",
      "x-client-cert",
      "x-arr-clientcert",
      "x-forwarded-tls-client-cert",
      "x-forwarded-tls-client-cert-info",
      "x-amzn-mtls-clientcert",
      "x-amzn-mtls-clientcert-leaf",
      "x-amzn-mtls-clientcert-serial-number",
      "x-amzn-mtls-clientcert-issuer",
      "x-amzn-mtls-clientcert-subject",
      "x-amzn-mtls-clientcert-validity",
    ])
      expect(echo.headers[name], name).toBeUndefined();
    expect(echo.rawHeaders.filter((h) => h.toLowerCase() === "x-forwarded-for")).toHaveLength(1);
  });

  it.each([false, true])(
    "never forwards a client's Proxy header, which CGI origins take for the proxy of their own outbound requests (httpoxy), whatever passForwardedHeaders (%s) says",
    async (passForwardedHeaders) => {
      const base = await gate({ passForwardedHeaders, rules: [{ name: "m", limit: 10, window: "10m" }] });
      const res = await rawRequest(base, {
        target: "/v1/users",
        headers: [
          ["cf-connecting-ip", "192.0.2.11"],
          ["Proxy", "http://attacker.example:3128"],
          ["X-Kept", "yes"],
        ],
      });
      const echo = JSON.parse(res.body) as Echo;
      expect(echo.headers.proxy).toBeUndefined();
      expect(echo.headers["x-kept"]).toBe("yes");
    },
  );

  it("in a header of the operator's choosing spelled with _, which no spelling of the client's can join", async () => {
    const base = await gate({ clientIpHeader: "X_Client_Addr", rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, {
      target: "/v1/users",
      headers: [
        ["cf-connecting-ip", "192.0.2.10"],
        ["X-Client-Addr", "10.0.0.9"],
        ["x_client_addr", "10.0.0.8"],
      ],
    });
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers.x_client_addr).toBe("192.0.2.10");
    expect(echo.headers["x-client-addr"]).toBeUndefined();
  });

  it("in a header of the operator's choosing, with the client's forwarding headers passed when configured", async () => {
    const base = await gate({ clientIpHeader: "X-Client-IP", passForwardedHeaders: true, rules: [{ name: "m", limit: 10, window: "10m" }] });
    const res = await rawRequest(base, {
      target: "/v1/users",
      headers: [["cf-connecting-ip", "::ffff:192.0.2.9"], ["x-client-ip", "10.0.0.1"], ["X_Client_IP", "10.0.0.2"], ...forged],
    });
    const echo = JSON.parse(res.body) as Echo;
    expect(echo.headers["x-client-ip"]).toBe("192.0.2.9");
    // the gate's own header in another spelling is still the gate's
    expect(echo.headers.x_client_ip).toBeUndefined();
    expect(echo.headers["x-forwarded-host"]).toBe("admin.internal");
    expect(echo.headers["x-forwarded-for"]).toBe("10.9.8.7");
    expect(echo.headers["x-forwarded-tls-client-cert"]).toBe("MIIBzz==");
    expect(echo.headers["x-amzn-mtls-clientcert-subject"]).toBe("CN=admin");
  });
});

describe("streaming both ways", () => {
  // An origin that moves only in step with its client: it asks for the next upload chunk once it
  // has read the one before, and writes the next event once the client has read the one before.
  // A gate that held back either way until the end would stall the exchange (the test's timeout).
  const CHUNK = 64 * 1024;
  const CHUNKS = 24;
  const steps: { read?: (total: number) => void; wrote?: () => void } = {};
  const server = createHttpServer(async (req, res) => {
    if (req.url === "/duplex") {
      // answers each piece of the upload as it reads it, the answer open from the first
      res.writeHead(200, { "content-type": "text/plain" });
      res.flushHeaders();
      let total = 0;
      req.on("data", (chunk: Buffer) => {
        total += chunk.length;
        res.write(`${total}\n`);
      });
      req.on("end", () => res.end("done\n"));
      return;
    }
    if (req.url === "/events") {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      let sent = 1;
      res.write("data: 1\n\n");
      steps.wrote = () => (++sent < 5 ? res.write(`data: ${sent}\n\n`) : res.end(`data: ${sent}\n\n`));
      return;
    }
    let total = 0;
    for await (const chunk of req) {
      total += (chunk as Buffer).length;
      steps.read?.(total);
    }
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(String(total));
  });
  const sockets = new WebSocketServer({ server, perMessageDeflate: { threshold: 0 }, handleProtocols: (offered) => [...offered].at(-1) ?? false });
  const closes: string[] = [];
  sockets.on("connection", (ws) => {
    ws.on("message", (data, binary) => (data.toString() === "close, please" ? ws.close(4001, "as asked") : ws.send(data, { binary })));
    ws.on("close", (code, reason) => closes.push(`${code} ${reason.toString()}`));
  });
  let base: string;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = await gate({ rules: [{ name: "m", limit: 100, window: "10m" }] }, { ORIGIN_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
  afterAll(async () => {
    for (const ws of sockets.clients) ws.terminate();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it.each(["POST", "GET"])("%s: an upload sent chunk by chunk, each only once the origin has read the one before, reaches it whole", async (method) => {
    const url = new URL(base);
    const answer = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(
        { host: url.hostname, port: url.port, method, path: "/upload", agent: false, headers: { "cf-connecting-ip": freshIp(), "transfer-encoding": "chunked" } },
        (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve(body));
        },
      );
      req.on("error", reject);
      let written = 1;
      steps.read = (total) => {
        if (total < written * CHUNK) return;
        if (written++ < CHUNKS) req.write(Buffer.alloc(CHUNK, written));
        else req.end();
      };
      req.write(Buffer.alloc(CHUNK, 1));
    });
    expect(answer).toBe(String(CHUNK * CHUNKS));
  });

  it("an upload the origin answers as it reads it: each piece goes only once the answer to the one before has come", async () => {
    // the origin's answer is under way, and the gate has handed it on, while the upload is still coming
    const url = new URL(base);
    const answer = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({
        host: url.hostname,
        port: url.port,
        method: "POST",
        path: "/duplex",
        agent: false,
        headers: { "cf-connecting-ip": freshIp(), "transfer-encoding": "chunked" },
      });
      req.on("error", reject);
      req.on("response", (res) => {
        let text = "";
        let written = 1;
        res.on("data", (c: Buffer) => {
          text += c.toString();
          if (!text.endsWith(`${written * 1000}\n`)) return;
          if (written++ < 5) req.write("x".repeat(1000));
          else req.end();
        });
        res.on("end", () => resolve(text));
      });
      req.write("x".repeat(1000));
    });
    // the count after each piece (a piece may arrive in parts), and the end
    expect(answer).toMatch(/^(?:\d+\n)*1000\n(?:\d+\n)*2000\n(?:\d+\n)*3000\n(?:\d+\n)*4000\n(?:\d+\n)*5000\ndone\n$/);
  });

  it("an event stream: each event reaches the client before the origin writes the next", async () => {
    const res = await fetch(`${base}events`, { headers: { "cf-connecting-ip": freshIp() } });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(res.headers.get("x-ratelimit-limit")).toBe("100");
    const events: string[] = [];
    const decoder = new TextDecoder();
    let text = "";
    for await (const chunk of res.body!) {
      text += decoder.decode(chunk, { stream: true });
      const complete = text.split("\n\n");
      text = complete.pop()!;
      for (const event of complete) {
        events.push(event);
        steps.wrote?.();
      }
    }
    expect(events).toEqual(["data: 1", "data: 2", "data: 3", "data: 4", "data: 5"]);
  });

  const open = (protocols: string[]) => {
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}socket`, protocols, { headers: { "cf-connecting-ip": freshIp() } });
    return new Promise<WebSocket>((resolve, reject) => {
      ws.once("open", () => resolve(ws));
      ws.once("unexpected-response", (_req, res) => reject(new Error(`status ${res.statusCode}`)));
      ws.once("error", reject);
    });
  };
  const closed = (ws: WebSocket) => new Promise<string>((resolve) => ws.once("close", (code, reason) => resolve(`${code} ${reason.toString()}`)));

  it("a WebSocket keeps the subprotocol and compression the origin chose, and each side's close code and reason", async () => {
    const ws = await open(["chat.v1", "chat.v2"]);
    expect(ws.protocol).toBe("chat.v2");
    expect(ws.extensions).toContain("permessage-deflate");
    const large = "z".repeat(200_000);
    const echoed = new Promise<string>((resolve) => ws.once("message", (data) => resolve(data.toString())));
    ws.send(large);
    expect(await echoed).toBe(large);
    const byOrigin = closed(ws);
    ws.send("close, please");
    expect(await byOrigin).toBe("4001 as asked");

    const second = await open(["chat.v1"]);
    const count = closes.length;
    second.close(4002, "done here");
    await closed(second);
    await vi.waitFor(() => expect(closes.length).toBe(count + 1), { timeout: 10_000 });
    expect(closes.at(-1)).toBe("4002 done here");
  });
});

describe("a header value that is not UTF-8", () => {
  // obs-text (RFC 9110 §5.5): a Latin-1 filename in Content-Disposition, say, which the origin
  // reads and writes as bytes. With more than a few headers to drop, the gate copies the others
  // instead of deleting the dropped ones: that copy must keep the bytes too.
  const LATIN1 = 'attachment; filename="caf\u00e9.txt"';
  const server = createHttpServer((req, res) => {
    req.resume();
    const headers: Record<string, string> = { "content-type": "application/json", "content-disposition": LATIN1 };
    if (req.url?.includes("many")) for (let i = 0; i < 20; i++) headers[`x-slidegate-forged-${i}`] = "1";
    res.writeHead(200, headers);
    res.end(JSON.stringify(req.rawHeaders));
  });
  let base: string;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = await gate({ rules: [{ name: "m", limit: 100, window: "10m" }] }, { ORIGIN_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  const listed = Array.from({ length: 20 }, (_, i) => `x-hop-${i}`);
  it.each([
    ["a few headers to drop", "/few", []],
    ["many request headers to drop", "/few", [["connection", listed.join(", ")], ...listed.map((name): [string, string] => [name, "1"])]],
    ["many response headers to drop", "/many", []],
  ] as [string, string, [string, string][]][])("reaches the origin and comes back byte for byte, with %s", async (_, target, extra) => {
    // Node writes and reads header values as Latin-1: é is the one byte E9 on the wire
    const res = await rawRequest(base, { target, headers: [["cf-connecting-ip", freshIp()], ["x-note", LATIN1], ...extra] });
    expect(res.status).toBe(200);
    const received = JSON.parse(res.body) as string[];
    expect(received[received.findIndex((h) => h.toLowerCase() === "x-note") + 1]).toBe(LATIN1);
    expect(res.headers["content-disposition"]).toBe(LATIN1);
    expect(Object.keys(res.headers).filter((h) => h.startsWith("x-hop-") || h.startsWith("x-slidegate-forged"))).toEqual([]);
  });
});

describe("an origin's redirects to its own address", () => {
  // An origin that builds its absolute URLs from the Host it receives (Express's res.redirect
  // of a URL made from req.host, Django's and Rails' absolute URLs, nginx's own redirects):
  // through the gate that Host is ORIGIN_URL's, an address the public must never learn. It
  // answers the headers the query names, with {host} replaced by the Host it received and
  // {HOST} by the same in upper case.
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    const host = req.headers.host ?? "";
    const asked = new URL(req.url ?? "/", "http://origin");
    const headers: Record<string, string> = { "content-type": "text/plain", "x-origin-host": host, "x-origin-path": asked.pathname };
    for (const name of ["location", "content-location", "refresh", "link", "alt-svc"]) {
      const template = asked.searchParams.get(name);
      // written as Latin-1, as Node writes any header value: a char past U+007F is one byte
      if (template !== null) headers[name] = template.replaceAll("{host}", host).replaceAll("{HOST}", host.toUpperCase());
    }
    // a template with a line break is that header sent once per line
    const lines = Object.entries(headers).map(([name, value]) => [name, value.includes("\n") ? value.split("\n") : value] as const);
    res.writeHead(Number(asked.searchParams.get("status") ?? 302), Object.fromEntries(lines));
    res.end("moved");
  };
  const origin = createHttpServer(serve);
  // on the default port, on an address of its own: spelled out, :80 is no part of the origin
  const onPort80 = createHttpServer(serve);
  // the usual deployment: the public side on https, the origin on http
  const PUBLIC = "https://api.example.com";
  let port: number;
  let base: string;
  let port80: string | undefined;
  beforeAll(async () => {
    await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
    port = (origin.address() as AddressInfo).port;
    base = await gate({ rules: [{ name: "m", limit: 1000, window: "10m" }] }, { ORIGIN_URL: `http://127.0.0.1:${port}` });
    // port 80 takes privileges a test run may not have: that one test is skipped then
    const address = `127.0.0.${2 + Math.floor(Math.random() * 250)}`;
    port80 = await new Promise<string | undefined>((resolve) => {
      onPort80.once("error", () => resolve(undefined));
      onPort80.listen(80, address, () => resolve(address));
    });
  });
  afterAll(async () => {
    for (const server of [origin, onPort80]) {
      server.closeAllConnections();
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  /** The origin's answer through the gate at `gateBase`, to a client that asked for https://api.example.com. */
  const through = (gateBase: string, headers: Record<string, string>, status = 302) => {
    const target = `/v1/go?${new URLSearchParams({ status: String(status), ...headers })}`;
    return rawRequest(gateBase, {
      target,
      headers: [
        ["host", "api.example.com"],
        // the URL the Worker is handed, as Miniflare's dispatchFetch sets it: on https, as at the edge
        ["mf-original-url", `${PUBLIC}${target}`],
        ["cf-connecting-ip", freshIp()],
      ],
    });
  };

  it("an origin's redirect to its own address comes back naming the public host, path, query and fragment as the origin wrote them", async () => {
    const res = await through(base, { location: "HTTP://{host}/login/../in?next=%2Fv1%2Fusers&q=a%20b&e=caf%C3%A9&sp=x y#top" });
    expect(res.headers["x-origin-host"]).toBe(`127.0.0.1:${port}`);
    expect(res.status).toBe(302);
    expect(res.headers.location).toBe(`${PUBLIC}/login/../in?next=%2Fv1%2Fusers&q=a%20b&e=caf%C3%A9&sp=x y#top`);
    expect(res.headers["x-ratelimit-limit"]).toBe("1000");
  });

  it("an origin's Alt-Svc never reaches the client: it would send the client to the origin's own address, past the gate", async () => {
    for (const altSvc of ['h3="{host}"; ma=86400', 'h3=":443"; ma=86400', "clear"]) {
      const res = await through(base, { "alt-svc": altSvc }, 200);
      expect(res.status, altSvc).toBe(200);
      expect(res.headers["alt-svc"], altSvc).toBeUndefined();
    }
  });

  it("an origin's redirect to its own name in upper case comes back naming the public host", async () => {
    const byName = await gate({ rules: [{ name: "m", limit: 1000, window: "10m" }] }, { ORIGIN_URL: `http://localhost:${port}` });
    const res = await through(byName, { location: "http://{HOST}/v1/users?page=2" }, 301);
    expect(res.headers["x-origin-host"]).toBe(`localhost:${port}`);
    expect([res.status, res.headers.location]).toEqual([301, `${PUBLIC}/v1/users?page=2`]);
  });

  it("an origin on the default port that spells :80 out in its redirect comes back naming the public host", async (context) => {
    if (!port80) context.skip();
    const defaultPort = await gate({ rules: [{ name: "m", limit: 1000, window: "10m" }] }, { ORIGIN_URL: `HTTP://${port80}:80/` });
    const res = await through(defaultPort, { location: "HTTP://{HOST}:80/dir/?a=1#b" }, 301);
    expect(res.headers["x-origin-host"]).toBe(port80);
    expect([res.status, res.headers.location]).toEqual([301, `${PUBLIC}/dir/?a=1#b`]);
  });

  it("an origin's Content-Location (and a Refresh's url) naming its own address come back naming the public host", async () => {
    const res = await through(base, { "content-location": "http://{host}/v1/users/7?v=2", refresh: "5; url=http://{host}/v1/next#n" }, 201);
    expect(res.status).toBe(201);
    expect(res.headers["content-location"]).toBe(`${PUBLIC}/v1/users/7?v=2`);
    expect(res.headers.refresh).toBe(`5; url=${PUBLIC}/v1/next#n`);
  });

  it("an origin's Link header (an API's pagination) naming its own address comes back naming the public host, its other targets as they were", async () => {
    const link =
      '<http://{host}/v1/users?page=2>; rel="next", </v1/users?page=1>; rel="prev", <https://docs.example.net/users>; rel="help", <HTTP://{HOST}/v1/users?page=9>; rel="last"';
    const res = await through(base, { link }, 200);
    expect(res.status).toBe(200);
    expect(res.headers.link).toBe(
      `<${PUBLIC}/v1/users?page=2>; rel="next", </v1/users?page=1>; rel="prev", <https://docs.example.net/users>; rel="help", <${PUBLIC}/v1/users?page=9>; rel="last"`,
    );
  });

  it("an origin's Link header naming its own address in an anchor, behind a < in its target or a quoted parameter, comes back naming the public host", async () => {
    const cases: [string, string][] = [
      // anchor (RFC 8288 §3.2): the context's URI, quoted or a token
      ['</v1/users/7/edit>; rel="edit-form"; anchor="http://{host}/v1/users/7"', `</v1/users/7/edit>; rel="edit-form"; anchor="${PUBLIC}/v1/users/7"`],
      ["</v1/users/7/edit>; rel=edit-form; ANCHOR = http://{host}/v1/users/7, </b>; rel=b", `</v1/users/7/edit>; rel=edit-form; ANCHOR = ${PUBLIC}/v1/users/7, </b>; rel=b`],
      // a target echoing a query as decoded (a < in it): the target runs to its first >
      ['<http://{host}/v1/search?q=<b>; rel="next"', `<${PUBLIC}/v1/search?q=<b>; rel="next"`],
      // a < or > inside a quoted parameter is no target's
      ['</a>; title="a <b", <http://{host}/v1/users?page=3>; rel="last"', `</a>; title="a <b", <${PUBLIC}/v1/users?page=3>; rel="last"`],
      ['</a>; title="\\"<", <http://{host}/c>; rel="last"', `</a>; title="\\"<", <${PUBLIC}/c>; rel="last"`],
      // a URL of its own in angle brackets within a quoted title, and after a < no > closed
      ['</a>; title="see <http://{host}/d>"', `</a>; title="see <${PUBLIC}/d>"`],
      ["<http://{host}/a; rel=next, <http://{host}/b>; rel=last", `<${PUBLIC}/a; rel=next, <${PUBLIC}/b>; rel=last`],
    ];
    for (const [link, sent] of cases) {
      const res = await through(base, { link }, 200);
      expect([res.status, res.headers.link], link).toEqual([200, sent]);
      expect(res.headers.link, link).not.toContain(`127.0.0.1:${port}`);
    }
  });

  it("an origin's redirect to its own address without a scheme (//host/path) comes back naming the public host", async () => {
    // it means the origin's own scheme (http), not the client's (https)
    const res = await through(base, { location: "//{host}/v1/users" }, 307);
    expect([res.status, res.headers.location]).toEqual([307, `${PUBLIC}/v1/users`]);
  });

  it("an origin's redirect with bytes that are not ASCII comes back naming the public host, never failing", async () => {
    // Node writes and reads header values as Latin-1: "caf\u00c3\u00a9" is café in UTF-8 on the wire
    const utf8 = await through(base, { location: "http://{host}/caf\u00c3\u00a9?x=1" });
    expect([utf8.status, utf8.headers.location]).toEqual([302, `${PUBLIC}/caf\u00c3\u00a9?x=1`]);
    // é as the one byte E9 (an origin echoing a decoded Latin-1 path): the runtime hands it to
    // the gate as U+FFFD, and no one can write the byte back; percent-encoded, as a URL parser writes it
    const latin1 = await through(base, { location: "http://{host}/caf\u00e9?x=1" });
    expect([latin1.status, latin1.headers.location]).toEqual([302, `${PUBLIC}/caf%EF%BF%BD?x=1`]);
  });

  it("an origin's URL header sent twice, each naming its own address, comes back naming the public host in both", async () => {
    // the runtime hands the gate one value, the two joined by ", ": the second is a URL of its own
    const res = await through(base, { location: "http://{host}/a\nhttp://{host}/b?c=d", "content-location": "/x\nhttp://{host}/y", refresh: "0\n1; url=http://{host}/z" });
    expect(res.status).toBe(302);
    expect([res.headers.location, res.headers["content-location"], res.headers.refresh]).toEqual([`${PUBLIC}/a, ${PUBLIC}/b?c=d`, `/x, ${PUBLIC}/y`, `0, 1; url=${PUBLIC}/z`]);
    // a comma and a space within one URL is no second header: that URL is rewritten as one
    const one = await through(base, { location: "http://{host}/a, b?c=d, e" });
    expect(one.headers.location).toBe(`${PUBLIC}/a, b?c=d, e`);
  });

  it("under an ORIGIN_URL with a path, a redirect within that path comes back on the public side's own path, and one outside it on the public origin", async () => {
    const prefixed = await gate({ rules: [{ name: "m", limit: 1000, window: "10m" }] }, { ORIGIN_URL: `http://127.0.0.1:${port}/api/` });
    const res = await through(prefixed, { location: "http://{host}/api/login?next=%2Fv1#f" });
    // the origin got the request at /api + the public path: the way back is the same map
    expect(res.headers["x-origin-path"]).toBe("/api/v1/go");
    expect(res.headers.location).toBe(`${PUBLIC}/login?next=%2Fv1#f`);
    // outside that path no public URL leads: the path stays, the origin's address does not
    for (const [location, sent] of [
      ["http://{host}/api", `${PUBLIC}/api`],
      ["http://{host}/", `${PUBLIC}/`],
      ["http://{host}/API/x?y#z", `${PUBLIC}/API/x?y#z`],
      ["http://{host}/api%2Fx", `${PUBLIC}/api%2Fx`],
    ]) {
      expect((await through(prefixed, { location: location! })).headers.location, location).toBe(sent);
    }
  });

  it("relative redirects and redirects to other hosts pass unchanged", async () => {
    for (const location of ["/login?next=%2Fv1", "login", "?page=2", "#top", "https://accounts.example.net/oauth?redirect_uri=http%3A%2F%2F{host}%2Fcb", "http://127.0.0.1:1/x"]) {
      const res = await through(base, { location });
      const sent = location.replaceAll("{host}", `127.0.0.1:${port}`);
      expect([res.status, res.headers.location], location).toEqual([302, sent]);
    }
  });

  it("a redirect that is no URL passes unchanged, and the answer is still the origin's 3xx", async () => {
    for (const location of ["http://{host}:99999/login", "http://[{host}/login", "https://exa mple.com/"]) {
      const res = await through(base, { location, "content-location": location });
      const sent = location.replaceAll("{host}", `127.0.0.1:${port}`);
      expect([res.status, res.headers.location, res.headers["content-location"]], location).toEqual([302, sent, sent]);
    }
  });
});
