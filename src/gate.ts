import { ADMIN_PREFIX, createAdmin } from "./admin.ts";
import { createBlockCache } from "./block-cache.ts";
import type { GateConfig, Rule } from "./config.ts";
import { rateLimitHeaders } from "./headers.ts";
import { apiKey, clientIp, identify } from "./identity.ts";
import { createLimiter, LimiterError, type Decision } from "./limiter.ts";
import { createMetrics } from "./metrics.ts";
import { forward } from "./proxy.ts";
import { badGateway, blocked, forbidden, keyRequired, rateLimited, storeUnavailable } from "./responses.ts";
import { matchRules, tierOf } from "./rules.ts";

export interface GateOptions {
  config: GateConfig;
  /** where admitted requests go; undefined: on to the request's own URL */
  origin?: URL;
  redisUrl: string;
  redisToken: string;
  /** enables the admin API under /__slidegate/ */
  adminToken?: string;
  /** a Workers Analytics Engine dataset: one data point per decision */
  metrics?: AnalyticsEngineDataset;
  /** the edge clock, used only with `clock: "redis"` off */
  now?: () => number;
  /** where structured log lines go (default: console) */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
}

export type Gate = (request: Request) => Promise<Response>;

/** Marks a response admitted only because the store failed and the rules fail open. */
export const FAIL_OPEN_HEADER = "X-Slidegate-Fail-Open";

const defaultLog: NonNullable<GateOptions["log"]> = (level, line) => console[level](JSON.stringify(line));
const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);

/**
 * The request path: admin routes → identity → allow/deny lists → tier and matching rules →
 * block cache → one Redis decision → 403/429, or the origin's answer with rate-limit
 * headers. Everything that depends only on the configuration is settled here, once, so each
 * request runs straight through.
 *
 * @example
 * const gate = createGate({ config, origin: new URL("https://api.example.com"), redisUrl, redisToken });
 * const response = await gate(request);
 */
export function createGate(options: GateOptions): Gate {
  const { config, origin } = options;
  const log = options.log ?? defaultLog;
  const record = createMetrics(options.metrics);
  const admin = createAdmin({ config, adminToken: options.adminToken, redisUrl: options.redisUrl, redisToken: options.redisToken });
  const check = createLimiter({ url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now });
  const blockedUntil = createBlockCache<{ decision: Decision; at: number }>(config.blockCacheSize);

  const storeFailed = (rules: Rule[], error: unknown, request: Request, tier: string, tag: string) => {
    const closed = rules.some((r) => r.fail === "closed");
    log("error", {
      event: "slidegate.store_failure", fail: closed ? "closed" : "open", tier, rules: names(rules),
      method: request.method, path: new URL(request.url).pathname, error: error instanceof Error ? error.message : String(error),
    });
    record({ outcome: closed ? "failed-closed" : "failed-open", tier, rules: names(rules), tag });
    if (closed) return storeUnavailable();
    return forward(request, origin, new Headers({ [FAIL_OPEN_HEADER]: "store-unavailable" }));
  };

  return async (request) => {
    try {
      const path = new URL(request.url).pathname;
      if (path.startsWith(ADMIN_PREFIX)) return await admin(request);

      const key = config.keyHeader ? apiKey(request, config.keyHeader) : undefined;
      if (!key && config.keyRequired) return keyRequired(config.keyHeader!);
      const ip = clientIp(request);
      const identity = key ? await identify("k", key) : await identify("i", ip);
      const tier = tierOf(config, identity.keyHash);

      const listed = config.access(ip, identity.keyHash);
      if (listed) {
        record({ outcome: listed === "deny" ? "denylisted" : "allowlisted", tier, rules: [], tag: identity.tag });
        return listed === "deny" ? forbidden() : await forward(request, origin, new Headers());
      }

      const rules = matchRules(config, tier, request.method, path);
      if (rules.length === 0) return await forward(request, origin, new Headers());

      const cacheKey = `${identity.tag}|${tier}|${names(rules).join(",")}`;
      const now = Date.now();
      const hit = blockedUntil.get(cacheKey, now);
      if (hit) {
        record({ outcome: "denied", tier, rules: names(rules), tag: identity.tag, retryAfterMs: hit.until - now });
        return rateLimited(hit.value.decision, now - hit.value.at);
      }

      let decision: Decision;
      const asked = performance.now();
      try {
        decision = await check(identity.tag, tier, rules, Math.min(...rules.map((r) => r.timeoutMs)));
      } catch (error) {
        if (error instanceof LimiterError) return await storeFailed(rules, error, request, tier, identity.tag);
        throw error;
      }
      const point = { tier, tag: identity.tag, redisMs: performance.now() - asked, retryAfterMs: decision.retryAfterMs };

      if (decision.blockedMs > 0) {
        record({ ...point, outcome: "blocked", rules: [] });
        log("warn", { event: "slidegate.blocked", tier, tag: identity.tag, blockedForMs: decision.blockedMs });
        return blocked(decision.blockedMs);
      }
      if (!decision.admitted) {
        const deniedBy = decision.limits.filter((l) => !l.shadow && l.retryMs !== 0).map((l) => l.name);
        if (!decision.neverFits) blockedUntil.set(cacheKey, now + decision.retryAfterMs, { decision, at: now });
        record({ ...point, outcome: "denied", rules: deniedBy });
        log("warn", { event: "slidegate.denied", tier, tag: identity.tag, rules: deniedBy, retryAfterMs: decision.retryAfterMs });
        return rateLimited(decision);
      }
      if (decision.wouldDeny.length) {
        record({ ...point, outcome: "shadow-denied", rules: decision.wouldDeny });
        log("warn", { event: "slidegate.shadow_denied", tier, tag: identity.tag, rules: decision.wouldDeny });
      } else {
        record({ ...point, outcome: "admitted", rules: names(rules) });
      }
      return await forward(request, origin, rateLimitHeaders(decision));
    } catch (error) {
      // The origin unreachable, a body that broke mid-stream: the gate answers, it never throws.
      log("error", { event: "slidegate.upstream_error", error: error instanceof Error ? error.message : String(error) });
      return badGateway();
    }
  };
}
