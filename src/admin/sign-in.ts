import type { Redis } from "@upstash/redis/cloudflare";
import type { GateConfig } from "../config/rate-limits.ts";
import { createExpiringCache } from "../decision/expiring-cache.ts";
import { clientAddress, identify, sha256 } from "../decision/identity.ts";
import type { FailureLog } from "../gateway/failure-log.ts";
import { problem } from "../http/problem.ts";
import { retryAfterSeconds } from "../http/rate-limit-headers.ts";
import { createLimiter, decisionOf, type Limit, redisKeys, refusesWrites } from "../script/limiter.ts";
import { createLocalAttempts } from "./local-attempts.ts";
import { isStoreFailure, storeFailed } from "./store-failure.ts";

/** An Authorization value of the Bearer scheme, and all that follows its spaces as the token: a token sent twice, or a word after it, is a wrong one. */
const BEARER = /^bearer +(.*)$/i;
/**
 * Failed authentications allowed per client IP (IPv6 per `ipv6Prefix`, a /64 at most) in a sliding window. Past
 * them every admin request from that address answers 429 until the window frees, whatever
 * token it carries. Every attempt is recorded before its token is compared, in the same
 * atomic call that checks the count, on whichever isolate: however many arrive at once, at
 * most this many tokens are compared, and an answer never tells a right guess from a wrong
 * one. A right token's attempt is taken back once it is known to be right.
 */
const ADMIN_AUTH_FAILURES: Limit = { name: "auth-failures", limit: 10, windowMs: 10 * 60_000, cost: 1 };
/**
 * The longest IPv6 prefix failures are counted by: a customer holds a /64 at least, so an
 * `ipv6Prefix` longer than this, chosen for the limits, would give each of its 2^64 addresses
 * failures of its own.
 */
const AUTH_IPV6_PREFIX = 64;
/** How long an isolate answers an address over the failure limit without asking the store. */
const THROTTLE_HELD_MS = 1000;
/** The scope of the counters: "@" is never part of a tier name, so no tier shares their keys. */
const AUTH_SCOPE = "@admin";

const unauthorized = (sent: boolean) =>
  problem(401, "unauthorized", "Unauthorized", "Send the admin token as a bearer token.", {
    "WWW-Authenticate": sent ? 'Bearer realm="slidegate-admin", error="invalid_token"' : 'Bearer realm="slidegate-admin"',
  });
const tooManyAttempts = (ms: number) =>
  problem(429, "too-many-attempts", "Too Many Attempts", "Too many failed admin authentications from this address; wait before trying again.", {
    "Retry-After": retryAfterSeconds(ms),
  });

export interface SignInOptions {
  config: GateConfig;
  adminToken: string;
  /** the admin API's store client: a right token's attempt is taken back through it */
  redis: Redis;
  redisUrl: string;
  redisToken: string;
  /** how long the count may wait on the store */
  storeTimeoutMs: number;
  /** the isolate's clock, ms (default Date.now) */
  now?: () => number;
  log: (level: "warn" | "error", line: Record<string, unknown>) => void;
  /** where the store's failures are counted and logged */
  failures: FailureLog;
}

/**
 * The admin API's sign-in: the bearer token compared in constant time, and failed attempts
 * limited per client address by the gate's own limiter (in the isolate's memory while the store
 * is full). Returns undefined for a request that may go on, else the answer it gets: 401, 429,
 * or 503 when the store failed (an unknown count of failures: closed, never an unlimited 401).
 *
 * @example
 * const signIn = createSignIn({ config, adminToken, redis, redisUrl, redisToken, storeTimeoutMs: 5000, log, failures });
 * const refused = await signIn(request);
 * if (refused) return refused;
 */
export function createSignIn(options: SignInOptions): (request: Request) => Promise<Response | undefined> {
  const { config, adminToken, redis, log, failures } = options;
  const isolateNow = options.now ?? Date.now;
  const check = createLimiter({ url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now });
  // addresses known to be over the failure limit: refused here without a store call or a token
  // check, each with when its wait ends (the isolate's clock), which every 429 it gets tells
  const throttled = createExpiringCache<number>(10_000);
  // the count while the store is full and refuses the script's write
  const attemptsHere = createLocalAttempts({ limit: ADMIN_AUTH_FAILURES.limit, windowMs: ADMIN_AUTH_FAILURES.windowMs, addresses: 10_000 });
  const expected = sha256(adminToken);
  // The scheme is read in any case and after any run of spaces, as RFC 9110 §11.1 and §11.4 have
  // it (and the gate's own key reading, src/decision/api-key.ts): compared whole, "bearer <token>"
  // would refuse the right token as a wrong one, one of the address's failures spent on each try.
  const authorised = async (request: Request) => crypto.subtle.timingSafeEqual(await sha256(BEARER.exec(request.headers.get("authorization") ?? "")?.[1] ?? ""), await expected);

  // Held here for a second at most: a refusal may come from attempts still in flight (a right
  // token's is taken back a moment later), not from failures, and must not shut an operator
  // out of this isolate for the rest of the window.
  const refuse = (tag: string, now: number, ms: number) => {
    throttled.set(tag, now + Math.min(ms, THROTTLE_HELD_MS), now + ms, now);
    return tooManyAttempts(ms);
  };

  /**
   * The authentication gate: undefined when the token is right and the address is not over
   * its failure limit, else the answer (429 while over it, 401 for a wrong token, counted).
   * A request without Bearer credentials guesses nothing: 401 at once, uncounted. That holds for
   * another scheme too: a browser sends the Basic credentials it holds for the API behind the gate
   * by itself, to any URL of that host another site's page names (an image of /__slidegate/x),
   * and counted, ten of those would shut the operator's own address out of the admin API.
   */
  async function authenticate(request: Request, tag: string, now: number): Promise<Response | undefined> {
    if (!BEARER.test(request.headers.get("authorization") ?? "")) return unauthorized(false);
    // recorded first: a token is compared only once its attempt is counted (a check, then a
    // record, would let a burst of guesses all pass the check before any was recorded)
    let attempt: ReturnType<typeof decisionOf>;
    try {
      attempt = decisionOf(await check(tag, AUTH_SCOPE, [ADMIN_AUTH_FAILURES], options.storeTimeoutMs));
    } catch (e) {
      if (!refusesWrites(e)) throw e;
      failures.record({ error: e instanceof Error ? e.message : String(e) });
      return authenticateHere(request, tag, now);
    }
    if (!attempt.admitted) return refuse(tag, now, attempt.retryAfterMs);
    if (await authorised(request)) {
      await takeBack(tag);
      return undefined;
    }
    log("warn", { event: "slidegate.admin_unauthorized", tag });
    return unauthorized(true);
  }

  /**
   * `authenticate` with the attempts counted in this isolate (the store takes no writes: full,
   * where the routes that only read or delete still work, and they are what frees it, or a
   * replica, or a failed snapshot, where the reads still tell the operator what holds). Counted before the comparison,
   * as in the store, so a burst of guesses cannot all pass the check first.
   */
  async function authenticateHere(request: Request, tag: string, now: number): Promise<Response | undefined> {
    const wait = attemptsHere.record(tag, now);
    if (wait > 0) return refuse(tag, now, wait);
    if (await authorised(request)) {
      attemptsHere.takeBack(tag);
      return undefined;
    }
    log("warn", { event: "slidegate.admin_unauthorized", tag });
    return unauthorized(true);
  }

  /**
   * Takes a right token's attempt back off the failure count: the newest entry of the log,
   * whoever's it is, lowers the count by one (the script counts by running totals from the
   * newest entry back; see sliding-window.lua). Best effort: a store that fails here leaves
   * one attempt counted, never one fewer.
   */
  async function takeBack(tag: string): Promise<void> {
    try {
      await redis.zremrangebyrank(redisKeys.log(config.prefix, tag, AUTH_SCOPE, ADMIN_AUTH_FAILURES.name), -1, -1);
    } catch (e) {
      if (!isStoreFailure(e)) throw e;
      failures.record({ error: e instanceof Error ? e.message : String(e) });
    }
  }

  return async (request) => {
    try {
      // a tag of its own, apart from the address's rate-limit identity (and any block of it)
      const caller = (await identify("i", `@admin ${clientAddress(request, Math.min(config.ipv6Prefix, AUTH_IPV6_PREFIX)).bucket}`)).tag;
      const now = isolateNow();
      const over = throttled.get(caller, now);
      // the wait the store gave, less the time since: not the second the answer is held here,
      // which told a client (the console's "wait 1 s") to come back long before it could
      if (over) return tooManyAttempts(over.value - now);
      return await authenticate(request, caller, now);
    } catch (e) {
      if (!isStoreFailure(e)) throw e;
      failures.record({ error: e instanceof Error ? e.message : String(e) });
      return storeFailed(); // an unknown count of failures: closed, never an unlimited 401
    }
  };
}
