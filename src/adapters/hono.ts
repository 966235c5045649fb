/**
 * slidegate as Hono middleware: limits each request, sets the rate-limit headers on the
 * response with `c.header()` (so a proxied `fetch()` response works too), and throws an
 * `HTTPException` carrying slidegate's problem+json answer when the request may not pass, so
 * `app.onError` can restyle it.
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit } from "slidegate/hono";
 * const app = new Hono<{ Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string } }>();
 * app.use("/api/*", rateLimit({ rules: [{ name: "default", limit: 5, window: "10s" }] }));
 */
import type { Context, MiddlewareHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { FAIL_OPEN_HEADER } from "../http/answers.ts";
import { problem } from "../http/problem.ts";
import { CostError, shown } from "../script/limiter.ts";
import {
  assertIdentityConfiguration,
  assertOptionsObject,
  assertStoreOption,
  countedLogs,
  describe,
  headerAddressWarning,
  isPromise,
  type LimitResult,
  limiterFor,
  notOnCloudflare,
  parseLimits,
  type RateLimiter,
  type RateLimiterOptions,
} from "./shared.ts";

// Each optional field takes undefined as written (`url: process.env.UPSTASH_REDIS_REST_URL`), as
// the middleware does at run time: under exactOptionalPropertyTypes a bare `?:` would refuse it.
export interface RateLimitMiddlewareOptions extends Omit<RateLimiterOptions, "url" | "token"> {
  /** default: c.env.UPSTASH_REDIS_REST_URL */
  url?: string | undefined;
  /** default: c.env.UPSTASH_REDIS_REST_TOKEN */
  token?: string | undefined;
  /**
   * an identity of your own (a user id, say) to count the request against, instead of its API
   * key or client IP; undefined: those. The rules that cover the request, the lists and the
   * address rules (by client IP) still apply. Returned synchronously; undefined, null or a
   * blank string (an anonymous visitor, an empty header): the API key or client IP.
   */
  identify?: ((c: Context) => string | null | undefined) | undefined;
  /**
   * what a request weighs, a whole number from 1 to the rules' limits (else the request gets
   * 400); default: each rule's own cost. Returned synchronously: anything but a number or
   * undefined (a Promise, a string) throws a TypeError, the app's mistake, for `app.onError`.
   */
  cost?: ((c: Context) => number | undefined) | undefined;
  /**
   * the client's address as the runtime knows it, in place of `CF-Connecting-IP`, which only
   * Cloudflare's edge sets and any client can write on Node, Bun or Deno: say,
   * `(c) => getConnInfo(c).remote.address` with Hono's `getConnInfo` for the runtime (off
   * Cloudflare, a middleware built without it says so in a warning). Once
   * given, the header is never read: undefined or null (a Unix socket) counts in the one
   * bucket of unknown callers. Returned synchronously; anything but a string, undefined or
   * null throws a TypeError, for `app.onError`.
   */
  clientIp?: ((c: Context) => string | null | undefined) | undefined;
}

/**
 * The headers of every slidegate middleware a request has passed, outermost first: a global
 * limit and a stricter one on a route both write theirs after `next()`, the outer last, and
 * its own alone would put its remaining over the route's (a 429 saying 97 remain).
 */
const stacked = new WeakMap<Context, Headers[]>();
/** The logs the middlewares before this one counted the request in, by key. */
const countedBefore = new WeakMap<Context, Set<string>>();
/** The middlewares a request has met: one met again (registered on an app and on its sub-app) must not count it again. */
const ranOn = new WeakMap<Context, Set<MiddlewareHandler>>();
const TRIO = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"] as const;
const LISTS = ["RateLimit-Policy", "RateLimit", "X-Slidegate-Shadow", "X-Slidegate-Shadow-Denied"] as const;

/** Several middlewares' headers as one decision over all their rules would say them (see rateLimitFields). */
function mergeHeaders(all: readonly Headers[]): Headers {
  if (all.length === 1) return all[0]!;
  const merged = new Headers();
  // the trio of the limit a client should watch: least remaining; on a tie, the one that resets last
  const remaining = (h: Headers) => Number(h.get("X-RateLimit-Remaining"));
  const reset = (h: Headers) => Number(h.get("X-RateLimit-Reset"));
  let tightest: Headers | undefined;
  for (const h of all.filter((h) => h.has("X-RateLimit-Remaining"))) {
    if (!tightest || remaining(h) < remaining(tightest) || (remaining(h) === remaining(tightest) && reset(h) > reset(tightest))) tightest = h;
  }
  if (tightest) for (const name of TRIO) merged.set(name, tightest.get(name)!);
  for (const name of LISTS) {
    const items = all.flatMap((h) => h.get(name) ?? []);
    if (items.length) merged.set(name, items.join(", "));
  }
  const failedOpen = all.find((h) => h.has(FAIL_OPEN_HEADER));
  if (failedOpen) merged.set(FAIL_OPEN_HEADER, failedOpen.get(FAIL_OPEN_HEADER)!);
  const waits = all.flatMap((h) => h.get("Retry-After") ?? []);
  if (waits.length) merged.set("Retry-After", String(Math.max(...waits.map(Number))));
  return merged;
}

/**
 * A store binding as a request reads it ("" when unset). One that is no string (a Secrets Store
 * binding, whose value only its get() gives) would be "[object Object]" as a URL or a token: a
 * store failure on every decision, so with `fail: "open"` no limit at all.
 */
function binding(env: Record<string, unknown>, name: string): string {
  const value = env[name];
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  throw new TypeError(
    `slidegate: the binding ${name}: must be a string (a variable or a secret), not ${describe(value)}; give the store as options.url and options.token otherwise`,
  );
}

/**
 * `callback(c)`, one of the app's callbacks named `name`. What it throws is the app's own, and
 * thrown as it is; but a value that is no Error (a string, undefined) Hono hands no
 * `app.onError`: it goes past the app to the server, a 500 the app never sees (on Node, an
 * unhandled rejection where nothing catches `app.fetch`). Such a value is thrown as an Error
 * that names the callback, the value its cause.
 */
function called<T>(name: "identify" | "cost" | "clientIp", callback: (c: Context) => T, c: Context): T {
  try {
    return callback(c);
  } catch (e) {
    if (e instanceof Error) throw e;
    throw new Error(`slidegate: options.${name} threw ${shown(e)}, which is no Error (app.onError is handed Errors alone)`, { cause: e });
  }
}

/** Throws an error naming the bad option at once: `rateLimit({...})` never builds a middleware that would fail later. */
export function rateLimit(options: RateLimitMiddlewareOptions): MiddlewareHandler {
  assertOptionsObject(options, "rateLimit()");
  const { url, token, identify, cost, clientIp, ...limits } = options;
  for (const [name, callback] of Object.entries({ identify, cost, clientIp })) {
    if (callback === undefined) continue;
    if (typeof callback !== "function") throw new TypeError(`slidegate: options.${name} must be a function`);
    // Its Promise is refused on every request (a TypeError for app.onError): said now, as any option is.
    // A function that returns one without being async (or async compiled away) is still caught then.
    if (/^\[object Async(?:Generator)?Function\]$/.test(Object.prototype.toString.call(callback))) {
      throw new TypeError(
        `slidegate: options.${name} is an async function: it is called synchronously, and its Promise would fail every request. Do the async work in a middleware before rateLimit, keep the result with c.set(), and read it here with c.get()`,
      );
    }
  }
  // a store given in code is checked now; one from the bindings can be read only per request
  if (url !== undefined) assertStoreOption("url", url);
  if (token !== undefined) assertStoreOption("token", token);
  assertIdentityConfiguration(limits, "count each request as an identity of your own with options.identify: (c) => …");
  const config = parseLimits(limits, ["url", "token", "identify", "cost", "clientIp"]);
  const runtime = clientIp === undefined ? notOnCloudflare() : undefined;
  if (runtime !== undefined) {
    console.warn(
      headerAddressWarning(
        runtime,
        'Give rateLimit() clientIp, the address as the runtime knows it: (c) => getConnInfo(c).remote.address, with getConnInfo from @hono/node-server/conninfo, hono/bun or hono/deno; behind Cloudflare alone, clientIp: (c) => c.req.header("cf-connecting-ip") says so.',
      ),
    );
  }
  // The store may come from the bindings, known only per request: one limiter per store, kept for the isolate.
  let limiter: { url: string; token: string; limiter: RateLimiter } | undefined;
  const limiterOf = (c: Context) => {
    const env = (c.env ?? {}) as Record<string, unknown>;
    const u = url ?? binding(env, "UPSTASH_REDIS_REST_URL");
    const t = token ?? binding(env, "UPSTASH_REDIS_REST_TOKEN");
    if (limiter?.url !== u || limiter.token !== t) {
      // Said as the app set it up: on Node the variables are in process.env, which no binding
      // reads. An option written but undefined (url: process.env.UPSTASH_REDIS_REST_URL, read
      // before the variables were loaded) is not one "not given": told so, the app would look
      // for a fault in code that is right.
      const how = (name: "url" | "token") => (Object.hasOwn(options, name) ? `options.${name} is undefined` : `options.${name} was not given`);
      const unset = [
        ...(u ? [] : [`the binding UPSTASH_REDIS_REST_URL is unset and ${how("url")}`]),
        ...(t ? [] : [`the binding UPSTASH_REDIS_REST_TOKEN is unset and ${how("token")}`]),
      ];
      if (unset.length) {
        const written = (!u && Object.hasOwn(options, "url")) || (!t && Object.hasOwn(options, "token"));
        const hint = written
          ? "a variable read from process.env is undefined until it is set: check it is set (or the .env file loaded) before rateLimit() is called"
          : "on Node, Bun or Deno, which have no bindings, give url and token to rateLimit(), from process.env say";
        throw new Error(`slidegate: no store for rateLimit(): ${unset.join("; ")} (${hint})`);
      }
      // named as the app set them: it wrote no options.url
      if (url === undefined && u) assertStoreOption("url", u, "the binding UPSTASH_REDIS_REST_URL");
      if (token === undefined && t) assertStoreOption("token", t, "the binding UPSTASH_REDIS_REST_TOKEN");
      limiter = { url: u, token: t, limiter: limiterFor(config, u, t, false) };
    }
    return limiter.limiter;
  };

  // A cost that is no number at all is the app's mistake, not the request's: an error for
  // app.onError (a 500), where a 400 would tell every client its request was at fault.
  const costOf = (c: Context): number | undefined => {
    const n: unknown = cost ? called("cost", cost, c) : undefined;
    if (n === undefined || typeof n === "number") return n;
    // as limit() says a cost: "3" for a bigint or a Number object would read as the number it is not
    const what = isPromise(n) ? "a Promise (it is called synchronously)" : shown(n);
    throw new TypeError(`slidegate: options.cost must return a number or undefined, not ${what}`);
  };

  // the app's own reading of the address: once there is one, the forgeable header never counts
  const clientIpOf = (c: Context): string | null | undefined => {
    if (!clientIp) return undefined;
    const ip: unknown = called("clientIp", clientIp, c);
    if (ip === undefined || ip === null) return null;
    if (typeof ip === "string") return ip;
    throw new TypeError(`slidegate: options.clientIp must return a string, undefined or null, not ${isPromise(ip) ? "a Promise (it is called synchronously)" : typeof ip}`);
  };

  // named as the app wrote it: the library's own check would name its `identity` option, which a
  // Hono app never wrote
  const identityOf = (c: Context): string | null | undefined => {
    if (!identify) return undefined;
    const id: unknown = called("identify", identify, c);
    if (id === undefined || id === null || typeof id === "string") return id;
    throw new TypeError(`slidegate: options.identify must return a string, undefined or null, not ${isPromise(id) ? "a Promise (it is called synchronously)" : typeof id}`);
  };

  const middleware: MiddlewareHandler = async (c, next) => {
    // Told apart from two middlewares sharing a log, whose fix (names, prefixes) this is not, and
    // said before the second count: the request is counted once, by the first run
    const ran = ranOn.get(c) ?? new Set<MiddlewareHandler>();
    if (ran.has(middleware)) {
      throw new Error(
        "slidegate: one rateLimit middleware runs twice on this request: it is registered twice on the request's way (app.use on an app and on a sub-app mounted in it, or on two patterns the path matches), and would count each request twice. Build it once and register it once.",
      );
    }
    ranOn.set(c, ran.add(middleware));
    let result: LimitResult;
    const passed = stacked.get(c) ?? [];
    try {
      result = await limiterOf(c).limit(c.req.raw, { cost: costOf(c), identity: identityOf(c), clientIp: clientIpOf(c) });
    } catch (e) {
      // a cost computed from the request (`?tokens=-5`) is the request's fault: answer it, record nothing
      if (e instanceof CostError) {
        // named as every refusal names its reason: an app.onError that answers err.message would say nothing
        throw new HTTPException(400, {
          res: problem(400, "invalid-cost", "Bad Request", e.message.replace(/^slidegate: /, "This request's ")),
          message: "invalid-cost",
          cause: e,
        });
      }
      throw e;
    }
    // Two middlewares that name a rule alike on one prefix count in one log: every request both
    // cover would be counted twice in it, and each would read the other's requests as its own
    const seen = countedBefore.get(c) ?? new Set<string>();
    const shared = countedLogs(result).find((log) => seen.has(log.key));
    if (shared) {
      throw new Error(
        `slidegate: two rateLimit middlewares on this request count in one log, rule "${shared.rule}" on prefix "${shared.prefix}": each request both cover would be counted twice. Give their rules different names, or each middleware a prefix of its own.`,
      );
    }
    for (const log of countedLogs(result)) seen.add(log.key);
    countedBefore.set(c, seen);
    stacked.set(c, [...passed, result.headers]);
    if (!result.success) {
      const res = result.response();
      // An app.onError that answers with a response of its own (c.json(…, err.status)) keeps
      // what c.header() set: the wait and the limits, as it does under a stacked middleware,
      // whose headers come after next(), and how to authenticate, which a 401 must say
      const fields = mergeHeaders(stacked.get(c)!);
      if (result.retryAfter !== undefined && !fields.has("Retry-After")) c.header("Retry-After", String(result.retryAfter));
      const challenge = res.headers.get("WWW-Authenticate");
      if (challenge !== null) c.header("WWW-Authenticate", challenge);
      for (const [name, value] of fields) c.header(name, value);
      // Hono (4.8 on) copies the headers of the response it holds onto whatever app.onError
      // returns, a `new Response(…)` too, but holds one only once c.res is read: until then
      // c.header() keeps them aside for c.json() and its kind alone (4.7 builds a bare 404 here, so changes nothing)
      void c.res;
      throw new HTTPException(res.status as ContentfulStatusCode, { res, message: result.reason });
    }
    await next();
    // an inner one's, refusal included, are all there by now
    for (const [name, value] of mergeHeaders(stacked.get(c)!)) c.header(name, value);
  };
  return middleware;
}
