import { errors, Redis } from "@upstash/redis/cloudflare";
import { createDenialCache } from "../decision/denial-cache.ts";
import type { GateConfig } from "../config/rate-limits.ts";
import { retryAfterSeconds } from "../http/rate-limit-headers.ts";
import { clientAddress, identify, ipIdentity, sha256, type Identity } from "../decision/identity.ts";
import { createLimiter, LimiterError, redisKeys, type Limit } from "../script/limiter.ts";
import { problem } from "../http/problem.ts";
import { tierOf } from "../decision/rules.ts";

/** Every path under this prefix belongs to the gate: it is never forwarded to the origin. */
export const ADMIN_PREFIX = "/__slidegate/";
const MAX_BLOCK_SECONDS = 30 * 86_400;

/** Whether a canonical path is the gate's own, in any case: an origin that folds case would otherwise see it. */
export const isAdminPath = (path: string) => path.slice(0, ADMIN_PREFIX.length).toLowerCase() === ADMIN_PREFIX;

/**
 * Failed authentications allowed per client IP (IPv6 per prefix) in a sliding window. Past
 * them every admin request from that address answers 429 until the window frees, whatever
 * token it carries — the count is read before the token is checked, on every isolate — so an
 * answer never tells a right guess from a wrong one.
 */
export const ADMIN_AUTH_FAILURES: Limit = { name: "auth-failures", limit: 10, windowMs: 10 * 60_000, cost: 1 };
/**
 * Reads the failure count without recording: checked together with the failures, this
 * one-request-a-day limit is full on every call but the first of the day, and a request denied
 * by one limit is recorded in none. (The first call of the day counts as one failure.)
 */
const AUTH_PEEK: Limit = { name: "auth-peek", limit: 1, windowMs: 86_400_000, cost: 1 };
/** The scope of the counters: "@" is never part of a tier name, so no tier shares their keys. */
const AUTH_SCOPE = "@admin";
const AUTH_TIMEOUT_MS = 5000;

export interface AdminOptions {
  config: GateConfig;
  /** the ADMIN_TOKEN secret; undefined: the admin API is off and its paths answer 404 */
  adminToken?: string;
  redisUrl: string;
  redisToken: string;
  /** the isolate's clock, ms (default Date.now); with `clock: "edge"` also the limiter's */
  now?: () => number;
  /** where structured log lines go */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
  /** called with an identity's tag after a reset or unblock: the isolate forgets its cached denials */
  forget?: (tag: string) => void;
}

/**
 * Whether an admin route failed because of the store: the client's own errors (an error
 * answer, an unreadable one), workerd's network failures (a plain Error) and aborts (a
 * DOMException). Programming errors are TypeError, RangeError and the like: those are bugs.
 */
export function isStoreFailure(error: unknown): boolean {
  return error instanceof errors.UpstashError || error instanceof LimiterError || error instanceof DOMException ||
    (error instanceof Error && Object.getPrototypeOf(error) === Error.prototype);
}

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", "Cache-Control": "no-store" } });
const notFound = () => problem(404, "not-found", "Not Found", `Admin routes: POST ${ADMIN_PREFIX}usage, reset, block, unblock.`);
const unauthorized = (sent: boolean) =>
  problem(401, "unauthorized", "Unauthorized", "Send the admin token as a bearer token.", {
    "WWW-Authenticate": sent ? 'Bearer realm="slidegate-admin", error="invalid_token"' : 'Bearer realm="slidegate-admin"',
  });
const tooManyAttempts = (ms: number) =>
  problem(429, "too-many-attempts", "Too Many Attempts", "Too many failed admin authentications from this address; wait before trying again.", { "Retry-After": retryAfterSeconds(ms) });
const storeFailed = () => problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store failed.", { "Retry-After": "1" });
const badRequest = (detail: string) => problem(400, "bad-request", "Bad Request", detail);

/** A log member is "<total before>" or "<total before>:<cost>" (see sliding-window.lua). */
const memberCost = (member: string) => Number(/^\d+:(\d+)$/.exec(member)?.[1] ?? 1);

/**
 * ms an operator block has left, as the script reads it: the key holds when the block ends
 * (µs, the script's clock); a value it cannot read is a hand-made block that lasts its TTL.
 * null: a block without end.
 */
function blockLeft(value: string | null, ttlMs: number, nowUs: number): number | null {
  if (value === null) return 0;
  const ends = Number(value);
  if (value.trim() !== "" && Number.isFinite(ends)) return ends > nowUs ? Math.ceil((ends - nowUs) / 1000) : 0;
  return ttlMs === -1 ? null : Math.max(ttlMs, 0);
}

/**
 * The operator's API: read an identity's usage per rule, reset it, block and unblock it. The
 * identity comes as the raw API key or IP in the JSON body and is hashed here, as the gate
 * hashes it (an IP in its canonical form and IPv6 prefix); the admin token is compared in
 * constant time, and failed attempts are limited per client address with the gate's own
 * limiter. A reset or unblock also clears the serving isolate's cached denials at once.
 *
 * @example
 * POST /__slidegate/block  Authorization: Bearer $ADMIN_TOKEN  {"key":"sk-live-…","seconds":600}
 */
export function createAdmin(options: AdminOptions): (request: Request, path: string) => Promise<Response> {
  const { config, adminToken } = options;
  if (!adminToken) return async () => notFound();
  const log = options.log ?? ((level, line) => console[level](JSON.stringify(line)));
  const isolateNow = options.now ?? Date.now;
  const check = createLimiter({ url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now });
  // addresses known to be over the failure limit: refused here without a store call or a token check
  const throttled = createDenialCache<true>(10_000);
  const expected = sha256(`Bearer ${adminToken}`);
  const redis = new Redis({
    url: options.redisUrl, token: options.redisToken, enableTelemetry: false, enableAutoPipelining: false,
    automaticDeserialization: false, retry: { retries: 0 }, signal: () => AbortSignal.timeout(5000),
  });

  const authorised = async (request: Request) =>
    crypto.subtle.timingSafeEqual(await sha256(request.headers.get("authorization") ?? ""), await expected);

  /** Every log of one identity: every rule of every tier. */
  const logsOf = (tag: string) => [...config.tiers].flatMap(([tier, rules]) => rules.map((r) => redisKeys.log(config.prefix, tag, tier, r.name)));

  /** Now in µs on the clock the script decides by. */
  const clock = async () => {
    if (config.clock === "edge") return Math.round((options.now ?? Date.now)() * 1000);
    const [seconds, micros] = (await redis.time()).map(Number) as [number, number];
    return seconds * 1_000_000 + micros;
  };

  async function usage(identity: Identity) {
    const tier = tierOf(config, identity.keyHash);
    const rules = config.tiers.get(tier) ?? [];
    const now = await clock();
    const block = redisKeys.block(config.prefix, identity.tag);
    const p = redis.pipeline();
    p.get(block);
    p.pttl(block);
    for (const r of rules) p.zrange(redisKeys.log(config.prefix, identity.tag, tier, r.name), 0, -1, { withScores: true });
    const [blockValue, blockTtl, ...logs] = (await p.exec()) as [string | null, number, ...string[][]];
    return {
      identity: { kind: identity.kind === "k" ? "key" : "ip", tag: identity.tag },
      tier,
      blockedForMs: blockLeft(blockValue, blockTtl, now),
      rules: rules.map((r, i) => {
        const entries = logs[i] ?? [];
        let used = 0;
        let oldest = Number.POSITIVE_INFINITY;
        for (let j = 0; j < entries.length; j += 2) {
          const at = Number(entries[j + 1]);
          if (at <= now - r.windowMs * 1000) continue; // left the window, not yet evicted
          used += memberCost(entries[j]!);
          oldest = Math.min(oldest, at);
        }
        const inWindow = Number.isFinite(oldest);
        return {
          name: r.name, limit: r.limit, windowMs: r.windowMs, shadow: r.shadow,
          used, remaining: Math.max(0, r.limit - used),
          resetMs: inWindow ? Math.ceil((oldest + r.windowMs * 1000 - now) / 1000) : 0,
          oldestEntryAt: inWindow ? new Date(oldest / 1000).toISOString() : null,
        };
      }),
    };
  }

  const routes: Record<string, (identity: Identity, body: Record<string, unknown>) => Promise<Response>> = {
    usage: async (identity) => json(await usage(identity)),
    reset: async (identity) => json({ reset: true, keysDeleted: await redis.del(...logsOf(identity.tag)) }),
    block: async (identity, body) => {
      const seconds = body.seconds;
      if (typeof seconds !== "number" || !Number.isInteger(seconds) || seconds < 1 || seconds > MAX_BLOCK_SECONDS) {
        return badRequest(`"seconds" must be a whole number from 1 to ${MAX_BLOCK_SECONDS}`);
      }
      // The value (when it ends, on the script's clock) decides; the TTL, a second longer, only collects it.
      const ends = (await clock()) + seconds * 1_000_000;
      await redis.set(redisKeys.block(config.prefix, identity.tag), String(ends), { px: seconds * 1000 + 1000 });
      return json({ blocked: true, seconds });
    },
    unblock: async (identity) => json({ unblocked: (await redis.del(redisKeys.block(config.prefix, identity.tag))) === 1 }),
  };
  // looked up in a Map: a path like /__slidegate/constructor must not find Object.prototype
  const routeTable = new Map(Object.entries(routes));
  /** routes after which this isolate's cached denials of the identity are stale */
  const forgetting = new Set(["reset", "unblock"]);

  const refuse = (tag: string, now: number, ms: number) => {
    throttled.set(tag, now + ms, true);
    return tooManyAttempts(ms);
  };

  /**
   * The authentication gate: undefined when the token is right and the address is not over
   * its failure limit, else the answer (429 while over it, 401 for a wrong token, counted).
   * A request without any Authorization header guesses nothing: 401 at once, uncounted.
   */
  async function authenticate(request: Request, tag: string, now: number): Promise<Response | undefined> {
    if (!request.headers.has("authorization")) return unauthorized(false);
    const peek = await check(tag, AUTH_SCOPE, [ADMIN_AUTH_FAILURES, AUTH_PEEK], AUTH_TIMEOUT_MS);
    const failures = peek.limits.find((l) => l.name === ADMIN_AUTH_FAILURES.name);
    if (!failures) throw new LimiterError("the admin failure count came back without its limit");
    if (failures.retryMs > 0) return refuse(tag, now, failures.retryMs);
    if (await authorised(request)) return undefined;
    // the peek that was admitted already counted this attempt
    const counted = peek.admitted ? peek : await check(tag, AUTH_SCOPE, [ADMIN_AUTH_FAILURES], AUTH_TIMEOUT_MS);
    log("warn", { event: "slidegate.admin_unauthorized", tag, throttled: !counted.admitted });
    if (!counted.admitted) return refuse(tag, now, counted.retryAfterMs);
    return unauthorized(true);
  }

  return async (request, path) => {
    // a tag of its own, apart from the address's rate-limit identity (and any block of it)
    const caller = (await identify("i", `@admin ${clientAddress(request, config.ipv6Prefix).bucket}`)).tag;
    const now = isolateNow();
    const over = throttled.get(caller, now);
    if (over) return tooManyAttempts(over.until - now);
    try {
      const refused = await authenticate(request, caller, now);
      if (refused) return refused;
    } catch (e) {
      if (!isStoreFailure(e)) throw e;
      log("error", { event: "slidegate.admin_store_failure", error: e instanceof Error ? e.message : String(e) });
      return storeFailed(); // an unknown count of failures: closed, never an unlimited 401
    }
    const name = path.slice(ADMIN_PREFIX.length).toLowerCase();
    const route = routeTable.get(name);
    if (!route) return notFound();
    if (request.method !== "POST") return problem(405, "method-not-allowed", "Method Not Allowed", "Admin routes take POST with a JSON body.");
    let body: Record<string, unknown>;
    try {
      body = await request.json();
    } catch {
      return badRequest('The body must be JSON like {"key":"…"} or {"ip":"…"}.');
    }
    if (typeof body !== "object" || body === null) return badRequest('The body must be a JSON object like {"key":"…"} or {"ip":"…"}.');
    const { key, ip } = body;
    if ((typeof key === "string") === (typeof ip === "string") || key === "" || ip === "") {
      return badRequest('Give exactly one of "key" (the raw API key) or "ip" (the client IP), as a non-empty string.');
    }
    const identity = typeof key === "string" ? await identify("k", key.trim()) : await identify("i", ipIdentity(ip as string, config.ipv6Prefix));
    let response: Response;
    try {
      response = await route(identity, body);
    } catch (e) {
      // a bug is the gate's 500; only the store's own failures are a 503, without its words
      if (!isStoreFailure(e)) throw e;
      log("error", { event: "slidegate.admin_store_failure", route: name, error: e instanceof Error ? e.message.slice(0, 200) : String(e) });
      return storeFailed();
    }
    if (response.ok && forgetting.has(name)) options.forget?.(identity.tag);
    return response;
  };
}
