import type { GateConfig, Rule } from "./config.ts";
import { createBlockCache } from "./block-cache.ts";
import { rateLimitHeaders, retryAfterSeconds } from "./headers.ts";
import { apiKey, clientIp, identify } from "./identity.ts";
import { createLimiter, LimiterError, type CheckLimits, type Decision } from "./limiter.ts";
import { problem } from "./problem.ts";
import { forward } from "./proxy.ts";
import { matchRules, tierOf } from "./rules.ts";

export interface GateOptions {
  config: GateConfig;
  /** where admitted requests go; undefined: on to the request's own URL */
  origin?: URL;
  redisUrl: string;
  redisToken: string;
  /** the edge clock, used only with `clock: "edge"` */
  now?: () => number;
  /** where structured log lines go (default: console) */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
}

export type Gate = (request: Request) => Promise<Response>;

/** Marks a response admitted only because the store failed and the rules fail open. */
export const FAIL_OPEN_HEADER = "X-Slidegate-Fail-Open";

const defaultLog: NonNullable<GateOptions["log"]> = (level, line) => console[level](JSON.stringify(line));

/**
 * The request path: identity → tier → matching rules → block cache → one Redis decision →
 * 429, or the origin's answer with rate-limit headers. Everything that depends only on the
 * configuration is settled here, once, so each request runs straight through.
 *
 * @example
 * const gate = createGate({ config, origin: new URL("https://api.example.com"), redisUrl, redisToken });
 * const response = await gate(request);
 */
export function createGate(options: GateOptions): Gate {
  const { config, origin } = options;
  const log = options.log ?? defaultLog;
  const check: CheckLimits = createLimiter({
    url: options.redisUrl, token: options.redisToken, prefix: config.prefix, clock: config.clock, now: options.now,
  });
  const blocked = createBlockCache<{ decision: Decision; at: number }>(config.blockCacheSize);

  const denied = (decision: Decision, elapsedMs = 0): Response => {
    const limits = decision.limits.map((l) => ({ ...l, resetMs: Math.max(0, l.resetMs - elapsedMs) }));
    const headers = rateLimitHeaders({ ...decision, limits });
    if (decision.neverFits) {
      const over = decision.limits.filter((l) => l.retryMs < 0).map((l) => `"${l.name}" (${l.limit})`).join(", ");
      return problem(429, "cost-exceeds-limit", "Request Exceeds Limit", `This request costs more than limit ${over} allows in a whole window; waiting will not help.`, headers);
    }
    const waitMs = decision.retryAfterMs - elapsedMs;
    headers.set("Retry-After", retryAfterSeconds(waitMs));
    const names = decision.limits.filter((l) => l.retryMs > 0).map((l) => `"${l.name}"`).join(", ");
    return problem(429, "rate-limited", "Too Many Requests", `Rate limit ${names} exceeded; retry in ${retryAfterSeconds(waitMs)} s.`, headers);
  };

  const storeFailed = (rules: Rule[], error: unknown, request: Request): Promise<Response> | Response => {
    const closed = rules.some((r) => r.fail === "closed");
    log("error", {
      event: "slidegate.store_failure",
      fail: closed ? "closed" : "open",
      rules: rules.map((r) => r.name),
      method: request.method,
      path: new URL(request.url).pathname,
      error: error instanceof Error ? error.message : String(error),
    });
    if (closed) return problem(503, "store-unavailable", "Service Unavailable", "The rate-limit store did not answer in time.", { "Retry-After": "1" });
    return forward(request, origin, new Headers({ [FAIL_OPEN_HEADER]: "store-unavailable" }));
  };

  return async (request) => {
    try {
      const key = config.keyHeader ? apiKey(request, config.keyHeader) : undefined;
      if (!key && config.keyRequired) {
        return problem(401, "api-key-required", "API Key Required", `Send your API key in the ${config.keyHeader} header.`);
      }
      const identity = key ? await identify("k", key) : await identify("i", clientIp(request));
      const tier = tierOf(config, identity.keyHash);
      const rules = matchRules(config, tier, request.method, new URL(request.url).pathname);
      if (rules.length === 0) return await forward(request, origin, new Headers());

      const cacheKey = `${identity.tag}|${tier}|${rules.map((r) => r.name).join(",")}`;
      const now = Date.now();
      const hit = blocked.get(cacheKey, now);
      if (hit) return denied(hit.value.decision, now - hit.value.at);

      let decision: Decision;
      try {
        decision = await check(identity.tag, tier, rules, Math.min(...rules.map((r) => r.timeoutMs)));
      } catch (error) {
        if (error instanceof LimiterError) return await storeFailed(rules, error, request);
        throw error;
      }
      if (!decision.admitted) {
        if (!decision.neverFits) blocked.set(cacheKey, now + decision.retryAfterMs, { decision, at: now });
        log("warn", { event: "slidegate.denied", tier, rules: decision.limits.filter((l) => l.retryMs !== 0).map((l) => l.name), retryAfterMs: decision.retryAfterMs });
        return denied(decision);
      }
      return await forward(request, origin, rateLimitHeaders(decision));
    } catch (error) {
      // The origin unreachable, a body that broke mid-stream: the gate answers, it never throws.
      log("error", { event: "slidegate.upstream_error", error: error instanceof Error ? error.message : String(error) });
      return problem(502, "bad-gateway", "Bad Gateway", "The origin could not be reached.");
    }
  };
}
