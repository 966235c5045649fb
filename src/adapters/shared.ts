/**
 * What the library and the Hono middleware share: their options' checks and the limiter over a
 * configuration already checked. Not exported from the package: `createRateLimiter` and
 * `rateLimit` are the ways in, and both check everything first.
 */
import { echo } from "../admin/unknown-fields.ts";
import { didYouMean, nearest } from "../config/nearest.ts";
import { configurationWarnings, type GateConfig, parseRateLimits, type RateLimits, routeParameterIn } from "../config/rate-limits.ts";
import { storeFailureOf } from "../decision/decide.ts";
import { givenAddress, identify } from "../decision/identity.ts";
import { ADDRESS_SCOPE, aged, createPipeline, type Step } from "../decision/pipeline.ts";
import { createFailureLog } from "../gateway/failure-log.ts";
import { answer, type Reason } from "../http/answers.ts";
import { canonicalPath, methodsOf } from "../http/canonical.ts";
import { matchPaths } from "../http/query-routes.ts";
import { type Decision, shown } from "../script/limiter.ts";

/** Fields of RATE_LIMITS that only the gateway, which answers for and forwards to an origin, can honour (see `GATEWAY_ONLY`). */
type GatewayOnly = "cors" | "clientIpHeader" | "passForwardedHeaders" | "originTimeout";

/**
 * The store, and the same fields as RATE_LIMITS: `rules` (or `tiers`), `identity`, `fail`,
 * `timeout`, lists, … — but `cors`, `clientIpHeader`, `passForwardedHeaders` and `originTimeout`:
 * the answers are the application's to open to other sites, and it forwards no request.
 */
export interface RateLimiterOptions extends Omit<RateLimits, GatewayOnly> {
  /** the Upstash REST URL (or the slidegate shim's) */
  url: string;
  token: string;
}

export interface LimitResult {
  /** go ahead: admitted, failed open, allow-listed, or no rule applied */
  success: boolean;
  reason: Reason;
  /** the headers to put on your response (X-RateLimit-*, RateLimit, RateLimit-Policy; Retry-After when denied) */
  headers: Headers;
  /** whole seconds to wait, when denied or blocked */
  retryAfter?: number;
  decision?: Decision;
  /** the answer slidegate would give (400 / 401 / 403 / 429 / 503 problem+json, headers set), or 204 when it lets the request through */
  response(): Response;
}

// undefined, where an option takes it, is the option left out, as the fields of RateLimits take it:
// a bare `?:` would refuse it under exactOptionalPropertyTypes
export interface LimitOptions {
  /**
   * What this call weighs against every rule it is checked against: a whole number from 1 to
   * the smallest of their limits (default: each rule's own cost). Anything else throws a
   * {@link CostError} (a TypeError) before Redis is asked — except above an API key's own
   * limits, which only its script call reads: then after that call, which records nothing
   * (README, "Use as a library").
   */
  cost?: number | undefined;
  /**
   * For a Request: count it against this identity of your own (a user id, say) instead of its
   * API key or client IP. The rules that cover the request by path and method, the allow and
   * deny lists and the address rules (by its client IP) apply as for any request; the key
   * registry and `identity.required` do not. Undefined, null or a blank string: none (the
   * request's own key or IP); anything but a string throws a TypeError, as one beside an
   * identity of your own (`limit("user-42", { identity })`) does.
   */
  identity?: string | null | undefined;
  /**
   * For a Request: the client's address as your runtime knows it (the socket's remote address,
   * or what your own proxy wrote), in place of `CF-Connecting-IP`, which only Cloudflare's edge
   * sets and any client can write elsewhere. It is what the request is counted as without an
   * API key, and what the lists and address rules read. null: no address is known (the request
   * counts in the one bucket of unknown callers, as text that is no address does); undefined:
   * `CF-Connecting-IP`; anything else throws a TypeError.
   */
  clientIp?: string | null | undefined;
}

export interface RateLimiter {
  /**
   * A Request: identity from the API-key header or the client IP (or the `identity` and
   * `clientIp` options), rules matched on its canonical path and methods, lists applied, as
   * the gateway does.
   */
  limit(request: Request, options?: LimitOptions): Promise<LimitResult>;
  /** An identity of your own, over every rule of the default tier: a cost alone (`identity` and `clientIp` go with a Request) */
  limit(identity: string, options?: Pick<LimitOptions, "cost">): Promise<LimitResult>;
  /** Either, when which one is known only at run time: a cost alone */
  limit(input: Request | string, options?: Pick<LimitOptions, "cost">): Promise<LimitResult>;
}

const passed = () => new Response(null, { status: 204 });

/** The failure log's interval, and so how long counted store failures wait for a later call to write them. */
const FAILURE_TAIL_MS = 1000;

const LIMIT_OPTIONS: readonly string[] = ["cost", "identity", "clientIp"] satisfies (keyof LimitOptions)[];

/** Why the library and the middleware refuse each field only the gateway honours. */
const GATEWAY_ONLY: Record<GatewayOnly, string> = {
  cors: "is the gateway's alone: put CORS headers on the answers of your application yourself (with Hono, register hono/cors before rateLimit, listing Retry-After and the rate-limit headers in exposeHeaders)",
  clientIpHeader:
    "is the header in which the gateway tells its origin the client address; the library forwards no request and never reads the address from it: give clientIp, the address as your runtime knows it (limit(request, { clientIp }), or clientIp: (c) => … in Hono)",
  passForwardedHeaders: "is the gateway's alone: the library forwards no request, so it has no forwarding headers to pass or drop",
  originTimeout:
    "is the gateway's alone: the library forwards no request, so it has no origin to wait on; bound your own calls (fetch(url, { signal: AbortSignal.timeout(30_000) }))",
};

/**
 * Checks the limit fields of `options` ("options.rules[0].limit: …"), throwing an error that
 * names each bad one (a misspelt one with every option the caller takes: `own` and the limit
 * fields). A configuration that is valid but can be walked around (an API-key
 * header with made-up keys let through and no address floor) is said once, in a warning, as
 * `npm run check-config` says it for the gateway.
 */
export function parseLimits(limits: Omit<RateLimits, GatewayOnly>, own: readonly string[] = ["url", "token"]): GateConfig {
  // taken, each would do nothing, and `clientIpHeader` reads as where the address comes from
  for (const [field, why] of Object.entries(GATEWAY_ONLY)) {
    if (Object.hasOwn(Object(limits), field)) throw new Error(`slidegate: invalid options: options.${field}: ${why}`);
  }
  const parsed = parseRateLimits(limits, "options");
  // a misspelt option is told what it may have been: the caller's own (url, identify, …) too, and never one refused above
  const told = (error: string) =>
    error.replace(/^(options\.([^.[]+): unknown field \(allowed: )([^)]*)\)(?:; did you mean "[^"]*"\?)?$/, (_, head: string, name: string, fields: string) => {
      const allowed = [...own, ...fields.split(", ").filter((f) => !Object.hasOwn(GATEWAY_ONLY, f))];
      return `${head}${allowed.join(", ")})${didYouMean(name, allowed)}`;
    });
  if (!parsed.ok) throw new Error(`slidegate: invalid options: ${parsed.errors.map(told).join("; ")}`);
  const patterns = routePatterns(limits);
  if (patterns.length) throw new Error(`slidegate: invalid options: ${patterns.join("; ")}`);
  for (const warning of configurationWarnings(parsed.config)) console.warn(`slidegate: ${warning}`);
  return parsed.config;
}

/**
 * An error for each rule path written as the app's router writes a route (`/v1/users/:id`): a
 * rule's path is a glob matched on the request's path, where `:id` is the text ":id" alone, so
 * the rule would count no request the route serves. (`%3A` writes a segment that starts with a
 * colon, should one be meant.)
 */
function routePatterns(limits: Omit<RateLimits, GatewayOnly>): string[] {
  const lists: [string, unknown][] = [
    ["options.rules", limits.rules],
    ["options.addressRules", limits.addressRules],
    ...Object.entries(limits.tiers ?? {}).map(([tier, set]): [string, unknown] => [`options.tiers.${tier}.rules`, (set as { rules?: unknown } | undefined)?.rules]),
  ];
  return lists.flatMap(([field, list]) =>
    (Array.isArray(list) ? list : []).flatMap((rule: unknown, i) => {
      const path = (rule as { path?: unknown } | null)?.path;
      const route = typeof path === "string" ? routeParameterIn(path) : undefined;
      if (route === undefined) return [];
      return [
        `${field}[${i}].path: ${JSON.stringify(route.parameter)} is a route parameter, which a rule's path does not take: it is a glob matched on the request's path (* for any text, slashes included), where ${JSON.stringify(route.parameter)} matches only itself; write ${JSON.stringify(route.glob)}`,
      ];
    }),
  );
}

/**
 * Throws when `identity`, the identity configuration ({ header, unknownKeys, … }), is a
 * function: one who wrote it meant who each request is counted as, which the library takes
 * with each call and the middleware as `identify` (`how`). The configuration's own check would
 * say only that it must be an object.
 */
export function assertIdentityConfiguration(limits: object, how: string): void {
  if (typeof (limits as { identity?: unknown }).identity === "function")
    throw new Error(`slidegate: invalid options: options.identity: is the identity configuration ({ header, unknownKeys, … }), not a function: ${how}`);
}

/**
 * Throws unless both store options are given and well formed. `given`: the other options' names,
 * where a misspelt one ("uri", "tokn") is told as the one missing.
 */
export function assertStore(url: string, token: string, given: readonly string[] = []): void {
  // "options.uri: unknown field" would follow once the store was right: said now, beside what it was meant to be
  const misspelt = (name: string) => {
    const meant = given.find((g) => nearest(g, [name]) === name);
    return meant === undefined ? "" : `; ${echo(meant)} is no option: did you mean "${name}"?`;
  };
  if (!url && !token) {
    throw new Error(
      `slidegate: options.url and options.token are required (the UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN of your database)${misspelt("url")}${misspelt("token")}`,
    );
  }
  // the one missing alone: told of both, an app that gave the other looks for what is wrong with it
  if (!url) throw new Error(`slidegate: options.url is required (the UPSTASH_REDIS_REST_URL of your database)${misspelt("url")}`);
  if (!token) throw new Error(`slidegate: options.token is required (the UPSTASH_REDIS_REST_TOKEN of your database)${misspelt("token")}`);
  assertStoreOption("url", url);
  assertStoreOption("token", token);
}

/**
 * One store option as given, checked when the limiter or middleware is built: a URL the REST
 * client cannot fetch (`localhost:8079`, no scheme, credentials in it) or a token no request
 * header can carry would make every decision a store failure, so with `fail: "open"` the limit
 * would silently never apply. The message never repeats a token, nor a URL's credentials.
 *
 * @example
 * assertStoreOption("url", "localhost:8079"); // throws "slidegate: options.url: must be an http(s) URL …"
 */
export function assertStoreOption(name: "url" | "token", value: unknown, label = `options.${name}`): void {
  if (name === "token") {
    if (typeof value !== "string" || value.trim() === "")
      throw new TypeError(`slidegate: ${label}: must be a non-empty string, not ${typeof value === "string" ? JSON.stringify(value) : describe(value)}`);
    // Headers trims HTTP white space around a value; within one, a line break, a NUL or a character past U+00FF cannot go
    const lead = /^[\t\n\r ]*/.exec(value)![0].length;
    const within = value
      .slice(lead)
      .replace(/[\t\n\r ]+$/, "")
      .search(/[\0\r\n\u0100-\uffff]/);
    if (within >= 0) {
      const c = value.charCodeAt(lead + within);
      const what = c === 0 ? "a NUL" : c === 10 || c === 13 ? "a line break" : `U+${c.toString(16).toUpperCase().padStart(4, "0")}`;
      throw new TypeError(`slidegate: ${label}: holds ${what} (at index ${lead + within}), which no request header can carry: check the value as copied (it is not repeated here)`);
    }
    return;
  }
  const parsed = typeof value === "string" && URL.canParse(value) ? new URL(value) : undefined;
  if (parsed?.protocol !== "https:" && parsed?.protocol !== "http:") {
    throw new TypeError(
      `slidegate: ${label}: must be an http(s) URL, like https://example.upstash.io, not ${typeof value !== "string" ? describe(value) : value.trim() === "" ? "an empty string" : URL.canParse(value) ? JSON.stringify(withoutCredentials(value)) : "a URL (not repeated here: with the url and the token swapped, it is the token)"}`,
    );
  }
  // fetch() refuses a URL with credentials: no call to the store would be sent
  if (parsed.username || parsed.password) {
    throw new TypeError(
      `slidegate: ${label}: must hold no credentials (user:password@), which fetch() refuses: give the REST URL alone (${parsed.protocol}//${parsed.host}) and the REST token as the token`,
    );
  }
}

/** A URL as an error may show it: the Redis URL (`rediss://default:password@host:6379`) carries a password. */
const withoutCredentials = (url: string) => url.replace(/^([^/?#@]*?:\/\/)?[^/?#]*@/, "$1…@");

/** Throws a TypeError saying what to pass when `options` is no object: destructuring it would say only "Cannot destructure". */
export function assertOptionsObject(options: unknown, called: string): void {
  // an array is the rules alone, passed as the options: told so, not as a missing store
  if (typeof options !== "object" || options === null || Array.isArray(options))
    throw new TypeError(`slidegate: ${called} takes an options object ({ url, token, rules }), not ${describe(options)}`);
}

export const describe = (value: unknown) => (value === null ? "null" : typeof value === "object" ? (value.constructor?.name ?? "an object") : typeof value);

/**
 * Whether `value` is a Promise (or another thenable), which an option or a callback of the
 * middleware must not be: it is refused with a TypeError that says so. A Promise's rejection is
 * marked handled first, since nothing else will await it: on Node an unhandled rejection (a user
 * lookup that failed) ends the process, where the TypeError is the app's to handle. Another
 * thenable's then() is never called: a query builder runs its query when it is.
 */
export function isPromise(value: unknown): value is PromiseLike<unknown> {
  if ((typeof value !== "object" && typeof value !== "function") || value === null) return false;
  let then: unknown;
  try {
    then = (value as PromiseLike<unknown>).then;
  } catch {
    return false;
  }
  if (typeof then !== "function") return false;
  // by its brand, not instanceof: a Promise of another realm is one too
  if (Object.prototype.toString.call(value) === "[object Promise]") {
    try {
      Promise.prototype.then.call(value, undefined, () => {});
    } catch {
      // a toStringTag that lies: no Promise, no rejection to leave unhandled
    }
  }
  return true;
}

/**
 * An identity of the application's own, as given: an empty or blank one would put every
 * caller the application failed to name in one shared bucket, so it is refused.
 */
function ownIdentity(value: unknown, what: string): string {
  if (typeof value !== "string" || value.trim() === "") {
    throw new TypeError(`slidegate: ${what} must be a non-empty string, not ${typeof value === "string" ? shown(value) : describe(value)}`);
  }
  return value;
}

/**
 * The identity option beside a Request: none (undefined, null, blank: an anonymous visitor,
 * an empty header) leaves the request its own API key or client IP; any other string is the
 * identity; anything else is a programming error.
 */
function ownOrNone(value: unknown): string | undefined {
  if (value === undefined || value === null || (typeof value === "string" && value.trim() === "")) return undefined;
  return ownIdentity(value, "the identity option");
}

/**
 * A Request, by what the pipeline reads of one: not by `instanceof`, which a Request of another
 * realm or fetch implementation (undici's, a test runner's) fails.
 */
function isRequest(input: unknown): input is Request {
  if (typeof input !== "object" || input === null) return false;
  const r = input as Partial<Request>;
  return typeof r.url === "string" && typeof r.method === "string" && typeof r.headers?.get === "function";
}

/** A log a decision counted in: `key` names it whole (prefix, identity, tier or address scope, and the rule whose log it is). */
export interface CountedLog {
  prefix: string;
  rule: string;
  key: string;
}

const logsOf = new WeakMap<LimitResult, readonly CountedLog[]>();

/** The logs the decision of `result` counted in (none for a request no rule decided): two stacked middlewares must not share one. */
export const countedLogs = (result: LimitResult): readonly CountedLog[] => logsOf.get(result) ?? [];

/**
 * The runtime, when it is not a Cloudflare Worker (workerd's `navigator.userAgent` says
 * `Cloudflare-Workers`; a Worker without `navigator`, from a compatibility date before
 * 2022-03-21 or with `no_global_navigator`, still has workerd's own `WebSocketPair`): there,
 * `CF-Connecting-IP` is whatever the client wrote, and a caller who writes a new value with
 * each request is a new caller each time, past the address rules.
 */
export function notOnCloudflare(): string | undefined {
  const { navigator, WebSocketPair } = globalThis as { navigator?: { userAgent?: unknown }; WebSocketPair?: unknown };
  const agent = navigator?.userAgent;
  if (agent === "Cloudflare-Workers" || (agent === undefined && typeof WebSocketPair === "function")) return undefined;
  return typeof agent === "string" && agent ? agent : "not a Cloudflare Worker";
}

/** The warning for a limiter that reads the address from CF-Connecting-IP on `runtime`, naming the option as the caller gives it (`how`). */
export const headerAddressWarning = (runtime: string, how: string) =>
  `slidegate: the client address is read from CF-Connecting-IP, which only Cloudflare's edge sets: on this runtime (${runtime}) a client writes that header itself and is a new caller with each value it writes, past the address rules too. ${how}`;

/** The tails left to write as the Node process exits, of every limiter: see `nodeExit`. */
const tailsAtExit = new Set<() => void>();
const writeTailsAtExit = () => {
  for (const write of [...tailsAtExit]) write();
};

/**
 * The Node process's exit, where there is one (`process.on("exit")`); undefined elsewhere. One
 * listener serves every limiter's tail: a listener each passed Node's ten with a program's
 * eleventh limiter failing in the same second (MaxListenersExceededWarning). None on Cloudflare,
 * where nodejs_compat gives a process emitter that never emits an exit: a listener there would
 * keep its limiter alive for the isolate's life (a timer past the response never fires to take it off).
 */
function nodeExit(): { on(listener: () => void): void; off(listener: () => void): void } | undefined {
  if (notOnCloudflare() === undefined) return undefined;
  const p = (globalThis as { process?: { versions?: { node?: string }; on?: unknown; off?: unknown } }).process;
  if (!p?.versions?.node || typeof p.on !== "function" || typeof p.off !== "function") return undefined;
  const on = p.on as (event: string, listener: () => void) => void;
  const off = p.off as (event: string, listener: () => void) => void;
  return {
    on(listener) {
      if (tailsAtExit.size === 0) on.call(p, "exit", writeTailsAtExit);
      tailsAtExit.add(listener);
    },
    off(listener) {
      if (tailsAtExit.delete(listener) && tailsAtExit.size === 0) off.call(p, "exit", writeTailsAtExit);
    },
  };
}

/**
 * The limiter over a configuration already validated, on one store. `warnHeaderAddress`: say
 * once, off Cloudflare, that a Request given without `clientIp` is counted by a header the
 * client writes (the Hono middleware says it when it is built, and passes false).
 */
export function limiterFor(config: GateConfig, url: string, token: string, warnHeaderAddress = true): RateLimiter {
  assertStore(url, token);
  let headerAddress = warnHeaderAddress ? notOnCloudflare() : undefined;
  const pipeline = createPipeline({ config, redisUrl: url, redisToken: token });
  // A store failure shows only in the result's reason; with fail "open" the request goes on as
  // if admitted, so a wrong token or URL would never limit and never say so. Logged as the
  // gateway logs it: the first failure of each second in full (without the token), the rest counted.
  const failures = createFailureLog({ event: "slidegate.store_failure", write: (line) => console.error(JSON.stringify(line)), secret: token, intervalMs: FAILURE_TAIL_MS });
  let tail: ReturnType<typeof setTimeout> | undefined;
  // A Node process that is done ends before the tail's timer (unref'd below) fires: its exit
  // writes the count instead (console.error writes at once to a file or pipe). Workers have no
  // such event, and no process ends there with a call still to come.
  const exiting = nodeExit();
  const writeTail = () => {
    if (tail !== undefined) clearTimeout(tail);
    tail = undefined;
    exiting?.off(writeTail);
    failures.flush();
  };
  return {
    async limit(input: Request | string, options: LimitOptions = {}) {
      if (typeof options !== "object" || options === null) {
        throw new TypeError(`slidegate: limit()'s options must be an object ({ cost, identity, clientIp }) or left out, not ${describe(options)}`);
      }
      // refused below, each as what it is; a rejection of one must not outlive the TypeError
      for (const value of [input, options.cost, options.identity, options.clientIp]) isPromise(value);
      // a misspelt one (clientIP) would leave the request counted by the header any client writes
      for (const name in options) {
        if (!LIMIT_OPTIONS.includes(name) && Object.hasOwn(options, name))
          throw new TypeError(`slidegate: limit()'s options: ${echo(name)}: unknown option (allowed: ${LIMIT_OPTIONS.join(", ")})${didYouMean(name, LIMIT_OPTIONS)}`);
      }
      const { cost, identity, clientIp } = options;
      let step: Step;
      if (clientIp !== undefined && clientIp !== null && typeof clientIp !== "string") {
        throw new TypeError(`slidegate: the clientIp option must be a string, null or undefined, not ${describe(clientIp)}`);
      }
      if (typeof input === "string") {
        // an identity of your own is counted over the default tier alone: an address would be read by nothing
        if (clientIp !== undefined) throw new TypeError("slidegate: the clientIp option goes with a Request, not with an identity of your own");
        // one of the two would go uncounted, and which one the caller meant cannot be told
        if (ownOrNone(identity) !== undefined)
          throw new TypeError(`slidegate: the identity option goes with a Request: limit(${echo(input)}) is counted as ${echo(input)} already`);
        step = await pipeline.decideFor(await identify("u", ownIdentity(input, "limit(identity)")), cost);
      } else if (isRequest(input)) {
        const own = ownOrNone(identity);
        const url = new URL(input.url);
        const canonical = canonicalPath(url.pathname);
        const client = clientIp === undefined ? undefined : givenAddress(clientIp, config.ipv6Prefix);
        if (client === undefined && headerAddress !== undefined) {
          console.warn(
            headerAddressWarning(
              headerAddress,
              'Give limit(request, { clientIp }) the address your runtime read (the socket\'s remote address, or what your own proxy wrote); behind Cloudflare alone, clientIp: request.headers.get("cf-connecting-ip") says so.',
            ),
          );
          headerAddress = undefined;
        }
        // a path the gateway would refuse counts against every rule of its method; a path its query
        // routes to (`?rest_route=`, a front script's `?q=`) as the gateway counts it
        // A fragment is path to a router that reads the URL up to its `?` alone (Hono before honojs/hono#4627, January 2026, to
        // which @hono/node-server hands the request-target as sent: `POST /v1/users/1#/avatar` runs
        // /v1/users/:id/avatar with id "1#"), and its `/..` stays unresolved there. No client sends
        // one, so a URL that carries one before any query counts as a path the gateway would refuse.
        const fragment = url.search === "" && url.href.includes("#");
        const paths = canonical.ok && !fragment ? matchPaths(url.search, canonical.matchOn) : undefined;
        step = await pipeline.run(input, { methods: methodsOf(input, url), paths }, { cost, identity: own, client });
      } else {
        throw new TypeError(`slidegate: limit() takes a Request or an identity of your own (a non-empty string), not ${describe(input)}`);
      }
      const failure = step.kind === "decided" ? storeFailureOf(step.verdict, step.rules) : undefined;
      if (step.kind === "decided" && failure)
        failures.record({ fail: failure.fail, tier: step.caller.tier, rules: failure.rules.map((r) => r.name), error: failure.error.message });
      // the address rules' call beside a key its own call refused: no outcome changed, logged as the gateway logs it
      if ((step.kind === "unknown-key" || step.kind === "disabled-key") && step.addressFailure)
        failures.record({ fail: "refused", tier: step.caller.tier, rules: step.addressFailure.rules.map((r) => r.name), error: step.addressFailure.error.message });
      if (failures.due()) failures.flush();
      // the last failures of a burst: no later call may come to write their count (in a Worker,
      // which gives no context here to wait in, only a later call writes it)
      if (failures.pending && !tail) {
        tail = setTimeout(writeTail, FAILURE_TAIL_MS);
        // a Node process that is done is not kept alive for a log line
        (tail as { unref?: () => void }).unref?.();
        exiting?.on(writeTail);
      }
      const a = answer(step, config.keyHeader);
      const result: LimitResult = {
        success: a.pass,
        reason: a.reason,
        headers: new Headers(a.fields),
        // a denial from the isolate's cache as of now, as its headers and retryAfter are
        decision: step.kind === "decided" && step.verdict.kind === "denied" ? aged(step.verdict.decision, step.verdict.elapsedMs) : a.decision,
        retryAfter: a.pass ? undefined : a.retryAfter,
        response: a.pass ? passed : a.response,
      };
      if (step.kind === "decided") {
        const { identity, client, tier } = step.caller;
        // an address rule's log is the address's, whoever the caller is
        logsOf.set(
          result,
          step.rules.map((r) => ({
            prefix: config.prefix,
            rule: r.log,
            key: `${config.prefix}|${r.scope === ADDRESS_SCOPE ? `@${client.bucket}` : identity.tag}|${r.scope ?? tier}|${r.log}`,
          })),
        );
      }
      return result;
    },
  };
}
