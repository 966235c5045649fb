import { randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { Hono } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import { rateLimit } from "../../src/adapters/hono.ts";
import { type ServedApp, serveHono } from "../helpers/serve-hono.ts";
import { services, upstash } from "../helpers/shim.ts";

type Env = { Bindings: { incoming: IncomingMessage }; Variables: { user: unknown } };

const served: ServedApp[] = [];
afterEach(async () => {
  for (const app of served.splice(0)) await app.close();
});

/** A Hono app served over HTTP whose rateLimit counts the user a middleware before it read from the JSON body. */
async function appCountingBodyUser(options: { limit: number }) {
  const s = services();
  const prefix = `honocb${randomBytes(6).toString("hex")}`;
  const app = new Hono<Env>();
  app.use(async (c, next) => {
    c.set("user", ((await c.req.json()) as { user?: unknown }).user);
    await next();
  });
  app.use(
    rateLimit({
      url: s.shimUrl,
      token: s.shimToken,
      prefix,
      rules: [{ name: "a", limit: options.limit, window: "1h" }],
      clientIp: (c) => c.env.incoming.socket.remoteAddress,
      identify: (c) => c.get("user") as string,
    }),
  );
  app.post("/", (c) => c.text("ok"));
  const http = await serveHono(app);
  served.push(http);
  const post = async (json: string) => (await fetch(http.url, { method: "POST", body: json, headers: { "content-type": "application/json" } })).status;
  return { post, prefix };
}

describe("the Hono middleware served over HTTP, with the app's own callbacks", () => {
  it("counts identities that differ only by an unpaired surrogate (read from a JSON body) apart, each against its own quota", async () => {
    const { post, prefix } = await appCountingBodyUser({ limit: 1 });
    // JSON's \u escapes carry a lone surrogate, which no header or URL can; as UTF-8 each is U+FFFD
    const users = ["ada\\ud800", "ada\\udbff", "ada\\udc00", "ada\\ufffd", "ada"];
    for (const user of users) expect(await post(`{"user":"${user}"}`), user).toBe(200);
    for (const user of users) expect(await post(`{"user":"${user}"}`), user).toBe(429);
    expect(await upstash().keys(`${prefix}:*`)).toHaveLength(users.length);
  });
});
