import { randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { afterEach, describe, expect, it } from "vitest";
import { type RateLimitMiddlewareOptions, rateLimit } from "../../src/adapters/hono.ts";
import { type ServedApp, serveHono } from "../helpers/serve-hono.ts";
import { services, upstash } from "../helpers/shim.ts";

type Body = { user?: unknown; tokens?: unknown };
type Env = { Bindings: { incoming: IncomingMessage }; Variables: { body: Body } };

const served: ServedApp[] = [];
afterEach(async () => {
  for (const app of served.splice(0)) await app.close();
});

/**
 * A Hono app served over HTTP whose rateLimit counts the user, at the cost, that a middleware
 * before it read from the JSON body, as the careless app reads them: as they came. Its
 * app.onError answers a refusal as it is and any other error with its message, as many an app does.
 */
async function appCountingBody(options: { limit: number; callbacks?: Pick<RateLimitMiddlewareOptions, "identify" | "cost" | "clientIp"> }) {
  const s = services();
  const prefix = `honocb${randomBytes(6).toString("hex")}`;
  const app = new Hono<Env>();
  const errors: unknown[] = [];
  app.onError((err, c) => {
    if (err instanceof HTTPException) return err.getResponse();
    errors.push(err);
    return c.text(err.message, 500);
  });
  app.use(async (c, next) => {
    c.set("body", (await c.req.json()) as Body);
    await next();
  });
  app.use(
    rateLimit({
      url: s.shimUrl,
      token: s.shimToken,
      prefix,
      // a store slow under a loaded machine must not fail open into a count the tests read
      rules: [{ name: "a", limit: options.limit, window: "1h", timeout: 30_000 }],
      clientIp: (c) => c.env.incoming.socket.remoteAddress,
      identify: (c) => c.get("body").user as string | undefined,
      cost: (c) => c.get("body").tokens as number | undefined,
      ...options.callbacks,
    }),
  );
  app.post("/", (c) => c.text("ok"));
  // what app.fetch rejected with: what reached no app.onError
  const rejected: unknown[] = [];
  const http = await serveHono(app, (reason) => rejected.push(reason));
  served.push(http);
  const post = async (json: string) => {
    const res = await fetch(http.url, { method: "POST", body: json, headers: { "content-type": "application/json" } });
    return { status: res.status, text: await res.text() };
  };
  return { post, prefix, errors, rejected };
}

describe("the Hono middleware served over HTTP, with the app's own callbacks", () => {
  it("counts identities that differ only by an unpaired surrogate (read from a JSON body) apart, each against its own quota", async () => {
    const { post, prefix } = await appCountingBody({ limit: 1 });
    // JSON's \u escapes carry a lone surrogate, which no header or URL can; as UTF-8 each is U+FFFD
    const users = ["ada\\ud800", "ada\\udbff", "ada\\udc00", "ada\\ufffd", "ada"];
    for (const user of users) expect((await post(`{"user":"${user}"}`)).status, user).toBe(200);
    for (const user of users) expect((await post(`{"user":"${user}"}`)).status, user).toBe(429);
    expect(await upstash().keys(`${prefix}:*`)).toHaveLength(users.length);
  });

  it("quotes at most 64 characters of a string a cost callback returned (a client's 64 KB text, Number() forgotten) in its TypeError, with its length, and records nothing", async () => {
    const { post, prefix, errors } = await appCountingBody({ limit: 5 });
    const sent = `${"9".repeat(40)}${randomBytes(32_768).toString("hex")}`;
    const answer = await post(JSON.stringify({ user: "ada", tokens: sent }));
    expect(answer.status).toBe(500);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(TypeError);
    const message = (errors[0] as Error).message;
    expect(message).toMatch(/^slidegate: options\.cost must return a number or undefined, not "9{40}[0-9a-f]{24}"… \(65576 characters\)$/);
    // the app that answers its errors' messages hands the client none of its text past that
    expect(answer.text).toBe(message);
    expect(await upstash().keys(`${prefix}:*`)).toEqual([]);
  });

  it("admits exactly the limit of a burst of concurrent requests for one identity of the app's own", async () => {
    const { post } = await appCountingBody({ limit: 20 });
    const statuses = await Promise.all(Array.from({ length: 60 }, () => post('{"user":"ada"}').then((answer) => answer.status)));
    expect(statuses.filter((status) => status === 200)).toHaveLength(20);
    expect(statuses.filter((status) => status === 429)).toHaveLength(40);
  });

  it("hands app.onError an Error naming the callback when identify, cost or clientIp throws what is no Error (a string, undefined), the value as its cause, and records nothing", async () => {
    for (const name of ["identify", "cost", "clientIp"] as const) {
      for (const thrown of ["user lookup failed", undefined]) {
        const { post, prefix, errors, rejected } = await appCountingBody({
          limit: 5,
          callbacks: {
            [name]: () => {
              throw thrown;
            },
          },
        });
        const answer = await post('{"user":"ada"}');
        const what = `${name} throwing ${String(thrown)}`;
        // Hono hands app.onError nothing but an Error: the value went past it, to the server
        expect(rejected, what).toEqual([]);
        expect(answer.status, what).toBe(500);
        expect(errors, what).toHaveLength(1);
        expect(errors[0], what).toBeInstanceOf(Error);
        expect((errors[0] as Error).message, what).toBe(
          `slidegate: options.${name} threw ${thrown === undefined ? "undefined" : JSON.stringify(thrown)}, which is no Error (app.onError is handed Errors alone)`,
        );
        expect((errors[0] as Error).cause, what).toBe(thrown);
        expect(await upstash().keys(`${prefix}:*`), what).toEqual([]);
      }
    }
  });
});
