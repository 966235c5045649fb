import { describe, expect, it, vi } from "vitest";
import { withheldFromOrigin } from "../../src/gateway/proxy.ts";
import worker from "../../src/index.ts";
import { makeGate, request, services, sha256Hex, statuses } from "./helpers.ts";

const generous = () => makeGate({ rules: [{ name: "a", limit: 1000, window: "1m" }] });

describe("proxy to the origin", () => {
  it("passes origin status codes and headers through unchanged", async () => {
    const gate = generous();
    for (const code of [200, 201, 204, 301, 404, 418, 500, 503]) {
      const res = await gate(request(`/status/${code}`));
      expect(res.status).toBe(code);
      expect(res.headers.get("x-origin-status")).toBe(String(code));
      expect(res.headers.get("X-RateLimit-Limit")).toBe("1000");
      await res.body?.cancel();
    }
  });

  it("keeps each Set-Cookie of the origin apart; the gate's rate-limit headers win over the origin's, and only the gate writes X-Slidegate-*", async () => {
    const res = await generous()(request("/cookies"));
    expect(res.status).toBe(200);
    expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2, with a comma; Path=/"]);
    expect(res.headers.get("X-RateLimit-Limit")).toBe("1000");
    expect(res.headers.has("X-Slidegate-Fail-Open")).toBe(false);
    expect(await res.text()).toBe("cookies");
  });

  it("passes a binary body through byte for byte", async () => {
    const res = await generous()(request("/bytes/300000"));
    const body = new Uint8Array(await res.arrayBuffer());
    expect(body.length).toBe(300000);
    expect(body[299999]).toBe((299999 * 7) & 0xff);
    expect(await sha256Hex(body)).toBe(res.headers.get("x-origin-sha256"));
  });

  it("forwards method, path, query, headers and body, less hop-by-hop headers", async () => {
    const payload = crypto.getRandomValues(new Uint8Array(50_000));
    const res = await generous()(
      request("/v1/echo?q=1&r=%20x", {
        method: "PUT",
        body: payload,
        headers: { "x-custom": "kept", "keep-alive": "timeout=5", "x-drop-me": "1", connection: "x-drop-me", "content-type": "application/octet-stream" },
      }),
    );
    const echo = (await res.json()) as { method: string; path: string; query: string; headers: Record<string, string>; body: { sha256: string; bytes: number } };
    expect(echo.method).toBe("PUT");
    expect(echo.path).toBe("/v1/echo");
    expect(echo.query).toBe("?q=1&r=%20x");
    expect(echo.headers["x-custom"]).toBe("kept");
    expect(echo.headers["keep-alive"]).toBeUndefined();
    expect(echo.headers["x-drop-me"]).toBeUndefined();
    expect(echo.body).toEqual({ sha256: await sha256Hex(payload), bytes: 50_000 });
    expect(JSON.stringify(echo)).not.toContain(services.shimToken);
  });

  it("drops every hop-by-hop header a client sends (RFC 9110 §7.6.1), Proxy-Connection among them", async () => {
    const hopByHop = {
      "keep-alive": "timeout=5",
      "proxy-authorization": "Basic eDp5",
      "proxy-authenticate": "Basic",
      "proxy-connection": "keep-alive",
      te: "trailers",
      trailer: "x-sum",
      upgrade: "h2c",
    };
    const res = await generous()(request("/v1/echo", { headers: { ...hopByHop, "x-custom": "kept" } }));
    expect(res.status).toBe(200);
    const { headers } = (await res.json()) as { headers: Record<string, string> };
    expect(headers["x-custom"]).toBe("kept");
    for (const name of Object.keys(hopByHop)) expect(headers[name], name).toBeUndefined();
  });

  it("withholds from the origin exactly the key headers withheldFromOrigin names, which check-config warns about", async () => {
    const names = [
      "x-api-key",
      "authorization",
      "X_API_Key",
      "proxy-authorization",
      "proxy-authenticate",
      "trailer",
      "expect",
      "x-real-ip",
      "X_Real_IP",
      "x-forwarded-for",
      "x-original-url",
      "Proxy",
    ];
    for (const passForwardedHeaders of [false, true]) {
      for (const name of names) {
        const options = { clientIpHeader: "x-client-address", passForwardedHeaders };
        const gate = makeGate({ rules: [{ name: "a", limit: 10, window: "1m" }], identity: { header: name }, ...options });
        const res = await gate(request("/v1/echo", { ip: "192.0.2.79", headers: { [name]: "sk-withheld" } }));
        expect(res.status, name).toBe(200);
        const echoed = ((await res.json()) as { headers: Record<string, string> }).headers[name.toLowerCase()];
        const reaches = echoed === "sk-withheld";
        expect(reaches, `${name}, passForwardedHeaders ${passForwardedHeaders}`).toBe(withheldFromOrigin(name, options) === undefined);
      }
    }
  });

  it("writes the client address as RFC 7239 says when clientIpHeader is Forwarded: for=, an IPv6 address quoted in brackets", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 10, window: "1m" }], clientIpHeader: "Forwarded" });
    for (const [ip, forwarded] of [
      ["192.0.2.80", "for=192.0.2.80"],
      ["2001:db8::80", 'for="[2001:db8::80]"'],
    ]) {
      // the client's own Forwarded never reaches the origin: the gate's replaces it
      const res = await gate(request("/v1/echo", { ip, headers: { forwarded: "for=203.0.113.66;proto=https" } }));
      expect(res.status).toBe(200);
      expect(((await res.json()) as { headers: Record<string, string> }).headers.forwarded, ip).toBe(forwarded);
    }
  });

  it("a Connection header listing things that are no header names still reaches the origin, charged once", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 2, window: "1m" }] });
    const odd = { connection: "keep-alive, a b, (x), x-drop-me", "x-drop-me": "1" };
    const res = await gate(request("/v1/echo", { ip: "192.0.2.77", headers: odd }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { headers: Record<string, string> }).headers["x-drop-me"]).toBeUndefined();
    expect(await statuses(gate, 2, "/v1/echo", { ip: "192.0.2.77", headers: odd })).toEqual([200, 429]);
    expect(gate.logs.filter((l) => l.level === "error")).toEqual([]);
  });

  it("drops every header a Connection header lists however many it lists, and keeps the others", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 5, window: "1m" }] });
    const listed = Array.from({ length: 300 }, (_, i) => `x-hop-${i}`);
    const headers: Record<string, string> = { connection: listed.join(", "), "x-keep-a": "1", "x-keep-b": "2" };
    for (const name of listed) headers[name] = "v";
    // each delete searches the whole list: hundreds of them cost time quadratic in the headers
    const deletes = vi.spyOn(Headers.prototype, "delete");
    let res: Response;
    try {
      res = await gate(request("/v1/echo", { ip: "192.0.2.78", headers }));
      expect(deletes.mock.calls.length).toBeLessThanOrEqual(32);
    } finally {
      deletes.mockRestore();
    }
    expect(res.status).toBe(200);
    const echoed = Object.keys(((await res.json()) as { headers: Record<string, string> }).headers);
    expect(echoed.filter((h) => h.startsWith("x-hop-"))).toEqual([]);
    expect(echoed.filter((h) => h.startsWith("x-keep-")).sort()).toEqual(["x-keep-a", "x-keep-b"]);
    expect(res.headers.get("X-RateLimit-Remaining")).toBe("4");
  });

  it("answers 502 problem+json when the origin cannot be reached", async () => {
    const gate = makeGate({ rules: [{ name: "a", limit: 10, window: "1m" }] }, { origin: new URL("http://127.0.0.1:9") });
    const res = await gate(request());
    expect(res.status).toBe(502);
    expect(await res.json()).toMatchObject({ type: "urn:slidegate:bad-gateway" });
  });
});

describe("the Worker entry", () => {
  // RATE_LIMITS may be a JSON string (a secret, a dashboard variable) as well as the TOML table Env types.
  const env = (overrides: Record<string, unknown>) =>
    ({
      ORIGIN_URL: services.originUrl,
      UPSTASH_REDIS_REST_URL: services.shimUrl,
      UPSTASH_REDIS_REST_TOKEN: services.shimToken,
      RATE_LIMITS: JSON.stringify({ prefix: `t${crypto.randomUUID().slice(0, 8)}`, rules: [{ name: "default", limit: 2, window: "10s" }] }),
      ...overrides,
    }) as unknown as Env;

  it("builds the gate from its environment (RATE_LIMITS as a JSON string or a TOML table)", async () => {
    const asString = env({});
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await worker.fetch(request(), asString)).status);
    expect(codes).toEqual([200, 200, 429]);
    const asTable = env({ RATE_LIMITS: { prefix: `t${crypto.randomUUID().slice(0, 8)}`, rules: [{ name: "default", limit: 1, window: "10s" }] } });
    expect((await worker.fetch(request(), asTable)).status).toBe(200);
    expect((await worker.fetch(request(), asTable)).status).toBe(429);
  });

  it("answers a generic 500 problem+json when the configuration is invalid, and logs each bad field", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const res = await worker.fetch(request(), env({ RATE_LIMITS: '{"rules":[{"name":"default","limit":0,"window":"10s"}]}', UPSTASH_REDIS_REST_TOKEN: "" }));
      expect(res.status).toBe(500);
      const body = (await res.json()) as { type: string; detail: string };
      expect(body.type).toBe("urn:slidegate:configuration-error");
      expect(body.detail).not.toContain("RATE_LIMITS");
      const lines = logged.mock.calls.map((c) => String(c[0]));
      expect(lines.some((l) => l.includes("RATE_LIMITS.rules[0].limit: must be at least 1") && l.includes("UPSTASH_REDIS_REST_TOKEN: is not set"))).toBe(true);
    } finally {
      logged.mockRestore();
    }
  });

  it("refuses an ADMIN_TOKEN no request can carry, with a space or line break at an end or a control character inside, naming it, without echoing it", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const token = "0123456789abcdef0123456789abcdef";
      // pasted with the newline its terminal printed, say: a header value loses it, so every sign-in was a 401 for the right token
      for (const secret of [`${token}\n`, ` ${token}`, `${token}\r\n`, `${token.slice(0, 16)}\n${token.slice(16)}`]) {
        logged.mockClear();
        const unsendable = env({ ADMIN_TOKEN: secret });
        expect((await worker.fetch(request(), unsendable)).status).toBe(200);
        const res = await worker.fetch(
          new Request("https://gate.example/__slidegate/usage", { method: "POST", headers: { authorization: `Bearer ${secret.replace(/\s/g, "")}` }, body: '{"ip":"192.0.2.1"}' }),
          unsendable,
        );
        expect([JSON.stringify(secret), res.status, ((await res.json()) as { type: string }).type]).toEqual([JSON.stringify(secret), 500, "urn:slidegate:configuration-error"]);
        const lines = logged.mock.calls.map((c) => String(c[0]));
        expect(lines.some((l) => l.includes("ADMIN_TOKEN: holds a space or line break at an end, or a control character"))).toBe(true);
        expect(lines.join("\n")).not.toContain(token.slice(16));
      }
    } finally {
      logged.mockRestore();
    }
  });

  it.each([
    ["an em dash, as a word processor writes --", "0123456789abcdef\u20140123456789abcdef"],
    ["an accented letter, which a browser sends as one byte the gate reads as U+FFFD", "0123456789abcdef\u00e90123456789abcdef"],
  ])("refuses an ADMIN_TOKEN holding a character outside ASCII (%s), naming it, without echoing it", async (_, token) => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const unsendable = env({ ADMIN_TOKEN: token });
      expect((await worker.fetch(request(), unsendable)).status).toBe(200);
      // whatever a sign-in sends (here the token's UTF-8 bytes, as a header built in JavaScript can hold them), the configuration error answers
      const res = await worker.fetch(
        new Request("https://gate.example/__slidegate/usage", {
          method: "POST",
          headers: { authorization: `Bearer ${String.fromCharCode(...new TextEncoder().encode(token))}` },
          body: '{"ip":"192.0.2.1"}',
        }),
        unsendable,
      );
      expect([res.status, ((await res.json()) as { type: string }).type]).toEqual([500, "urn:slidegate:configuration-error"]);
      const lines = logged.mock.calls.map((c) => String(c[0]));
      expect(lines.some((l) => l.includes("ADMIN_TOKEN: holds a character outside ASCII"))).toBe(true);
      expect(lines.join("\n")).not.toContain(token.slice(17));
    } finally {
      logged.mockRestore();
    }
  });

  it("refuses an ADMIN_TOKEN too short to outlast guessing from many addresses: the admin API answers its configuration error, the gate goes on, and the token is never echoed", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      const short = "short-admin-token-0123456789abc"; // 31 characters
      const weak = env({ ADMIN_TOKEN: short });
      expect((await worker.fetch(request(), weak)).status).toBe(200);
      for (const path of ["/__slidegate/", "/__slidegate/usage"]) {
        const res = await worker.fetch(
          new Request(`https://gate.example${path}`, {
            method: path.endsWith("/") ? "GET" : "POST",
            headers: { authorization: `Bearer ${short}` },
            body: path.endsWith("/") ? null : "{}",
          }),
          weak,
        );
        expect([path, res.status, ((await res.json()) as { type: string }).type]).toEqual([path, 500, "urn:slidegate:configuration-error"]);
      }
      const lines = logged.mock.calls.map((c) => String(c[0]));
      expect(lines.some((l) => l.includes("ADMIN_TOKEN: must be at least 32 characters"))).toBe(true);
      expect(lines.join("\n")).not.toContain(short);
      // 32 characters will do
      const strong = env({ ADMIN_TOKEN: `${short}d` });
      expect(
        (
          await worker.fetch(
            new Request("https://gate.example/__slidegate/usage", { method: "POST", headers: { authorization: `Bearer ${short}d` }, body: '{"ip":"192.0.2.1"}' }),
            strong,
          )
        ).status,
      ).toBe(200);
    } finally {
      logged.mockRestore();
    }
  });

  it("answers its configuration error for an Upstash URL that is no http(s) URL or holds credentials, or a token no header can carry, naming the field and never echoing its value, not even to the log", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    const warned = vi.spyOn(console, "warn").mockImplementation(() => {});
    try {
      const cases: [Record<string, string>, string, string][] = [
        // the database's Redis URL pasted for the REST one: its password is in it
        [{ UPSTASH_REDIS_REST_URL: "rediss://default:hunter2-redis-password@eu1-example.upstash.io:6379" }, "UPSTASH_REDIS_REST_URL:", "hunter2"],
        // the two secrets swapped: the token is where the URL goes
        [{ UPSTASH_REDIS_REST_URL: services.shimToken, UPSTASH_REDIS_REST_TOKEN: services.shimUrl }, "UPSTASH_REDIS_REST_URL:", services.shimToken],
        [{ UPSTASH_REDIS_REST_URL: services.shimUrl.replace("//", "//user:hunter2-password@") }, "UPSTASH_REDIS_REST_URL:", "hunter2"],
        [{ UPSTASH_REDIS_REST_TOKEN: `${services.shimToken.slice(0, 8)}\nhunter2-rest-of-token` }, "UPSTASH_REDIS_REST_TOKEN:", "hunter2"],
      ];
      for (const [overrides, named, secret] of cases) {
        logged.mockClear();
        warned.mockClear();
        const res = await worker.fetch(request("/v1/echo"), env(overrides));
        const text = await res.text();
        expect([named, res.status, (JSON.parse(text) as { type?: string }).type]).toEqual([named, 500, "urn:slidegate:configuration-error"]);
        expect(text).not.toContain(secret);
        const lines = [...logged.mock.calls, ...warned.mock.calls].map((c) => c.map(String).join(" "));
        expect(lines.some((l) => l.includes("slidegate.config_error") && l.includes(named))).toBe(true);
        expect(lines.join("\n")).not.toContain(secret);
      }
    } finally {
      logged.mockRestore();
      warned.mockRestore();
    }
  });

  it("answers its configuration error for a secret bound as no string (a Secrets Store binding), naming it, never throwing", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      // a Secrets Store binding: an object whose value only its get() gives
      const binding = { get: async () => "0123456789abcdef0123456789abcdef" };
      for (const name of ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "ADMIN_TOKEN"]) {
        logged.mockClear();
        let status: unknown;
        try {
          const res = await worker.fetch(request("/__slidegate/usage"), env({ [name]: binding }));
          status = [res.status, ((await res.json()) as { type?: string }).type];
        } catch (e) {
          status = `threw ${e}`;
        }
        expect([name, status]).toEqual([name, [500, "urn:slidegate:configuration-error"]]);
        expect(logged.mock.calls.map((c) => c.map(String).join(" ")).some((l) => l.includes("slidegate.config_error") && l.includes(`${name}:`))).toBe(true);
      }
    } finally {
      logged.mockRestore();
    }
  });

  it("answers its configuration error for an ORIGIN_URL that is no http(s) URL, naming it and never echoing it, not even to the log", async () => {
    const logged = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      for (const origin of ["ftp://deploy:hunter2@origin.internal.example/", "ws://deploy:hunter2@origin.internal.example:8080/api"]) {
        logged.mockClear();
        const res = await worker.fetch(request("/v1/echo"), env({ ORIGIN_URL: origin }));
        const text = await res.text();
        expect([origin, res.status, (JSON.parse(text) as { type?: string }).type]).toEqual([origin, 500, "urn:slidegate:configuration-error"]);
        expect(text).not.toContain("hunter2");
        const lines = logged.mock.calls.map((c) => c.map(String).join(" "));
        expect(lines.some((l) => l.includes("slidegate.config_error") && l.includes("ORIGIN_URL:"))).toBe(true);
        expect(lines.join("\n")).not.toContain("hunter2");
      }
    } finally {
      logged.mockRestore();
    }
  });

  it("never puts the Upstash token in a response", async () => {
    const res = await worker.fetch(request("/v1/echo"), env({}));
    const text = await res.text();
    expect(text).not.toContain(services.shimToken);
    for (const [, value] of res.headers) expect(value).not.toContain(services.shimToken);
  });
});
