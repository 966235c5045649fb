import { ADMIN_PREFIX, createAdmin } from "./admin.ts";
import type { GateConfig } from "./config.ts";
import { createDecider } from "./decide.ts";
import { rateLimitHeaders } from "./headers.ts";
import { apiKey, clientIp, identify } from "./identity.ts";
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
  /** the edge clock, used only with `clock: "edge"` */
  now?: () => number;
  /** where structured log lines go (default: console) */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
}

export type Gate = (request: Request) => Promise<Response>;

/** Marks a response admitted only because the store failed and the rules fail open. */
export const FAIL_OPEN_HEADER = "X-Slidegate-Fail-Open";

/** The most of an unread upload the gate reads (and drops) before answering on its own. */
const DRAIN_LIMIT = 1 << 20;

/**
 * An answer of the gate's own (401, 403, 429, 503) leaves the upload unread. Reading what is
 * still arriving, up to a limit, lets the client finish sending and read that answer, where an
 * unread upload can end in a connection reset; past the limit the rest is refused.
 */
async function discard(body: ReadableStream<Uint8Array>): Promise<void> {
  const reader = body.getReader();
  try {
    for (let read = 0; read <= DRAIN_LIMIT; ) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // a client that went away: nothing left to answer
  }
}

const defaultLog: NonNullable<GateOptions["log"]> = (level, line) => console[level](JSON.stringify(line));
const names = (rules: readonly { name: string }[]) => rules.map((r) => r.name);

/**
 * The request path: admin routes → identity → allow/deny lists → tier and matching rules →
 * one decision (block cache, else one Redis call) → 403/429/503, or the origin's answer with
 * rate-limit headers. Everything that depends only on the configuration is settled here,
 * once, so each request runs straight through.
 *
 * @example
 * const gate = createGate({ config, origin: new URL("https://api.example.com"), redisUrl, redisToken });
 * const response = await gate(request);
 */
export function createGate(options: GateOptions): Gate {
  const { config, origin } = options;
  const log = options.log ?? defaultLog;
  const record = createMetrics(options.metrics);
  const admin = createAdmin({ config, adminToken: options.adminToken, redisUrl: options.redisUrl, redisToken: options.redisToken, now: options.now });
  const decide = createDecider({ config, redisUrl: options.redisUrl, redisToken: options.redisToken, now: options.now });

  return async (request) => {
    const response = await handle(request);
    if (request.body && !request.bodyUsed) await discard(request.body);
    return response;
  };

  async function handle(request: Request): Promise<Response> {
    try {
      const path = new URL(request.url).pathname;
      if (path.startsWith(ADMIN_PREFIX)) return await admin(request);

      const key = config.keyHeader ? apiKey(request, config.keyHeader) : undefined;
      if (!key && config.keyRequired) return keyRequired(config.keyHeader!);
      const ip = clientIp(request);
      const identity = key ? await identify("k", key) : await identify("i", ip);
      const tier = tierOf(config, identity.keyHash);
      const tag = identity.tag;

      const listed = config.access(ip, identity.keyHash);
      if (listed) {
        record({ outcome: listed === "deny" ? "denylisted" : "allowlisted", tier, rules: [], tag });
        return listed === "deny" ? forbidden() : await forward(request, origin, new Headers());
      }

      const rules = matchRules(config, tier, request.method, path);
      if (rules.length === 0) return await forward(request, origin, new Headers());

      const verdict = await decide(identity, tier, rules);
      switch (verdict.kind) {
        case "failed": {
          const fail = verdict.closed ? "closed" : "open";
          log("error", { event: "slidegate.store_failure", fail, tier, rules: names(rules), method: request.method, path, error: verdict.error.message });
          record({ outcome: `failed-${fail}`, tier, rules: names(rules), tag });
          return verdict.closed ? storeUnavailable() : await forward(request, origin, new Headers({ [FAIL_OPEN_HEADER]: "store-unavailable" }));
        }
        case "blocked":
          record({ outcome: "blocked", tier, rules: [], tag, redisMs: verdict.redisMs, retryAfterMs: verdict.ms });
          log("warn", { event: "slidegate.blocked", tier, tag, blockedForMs: verdict.ms });
          return blocked(verdict.ms);
        case "denied": {
          const { decision, redisMs, elapsedMs } = verdict;
          const deniedBy = decision.limits.filter((l) => !l.shadow && l.retryMs !== 0).map((l) => l.name);
          record({ outcome: "denied", tier, rules: deniedBy, tag, redisMs, retryAfterMs: decision.retryAfterMs - elapsedMs });
          log("warn", { event: "slidegate.denied", tier, tag, rules: deniedBy, retryAfterMs: decision.retryAfterMs - elapsedMs, fromBlockCache: elapsedMs > 0 });
          return rateLimited(decision, elapsedMs);
        }
        case "admitted": {
          const { decision, redisMs } = verdict;
          const shadowDenied = decision.wouldDeny.length > 0;
          record({ outcome: shadowDenied ? "shadow-denied" : "admitted", tier, rules: shadowDenied ? decision.wouldDeny : names(rules), tag, redisMs });
          if (shadowDenied) log("warn", { event: "slidegate.shadow_denied", tier, tag, rules: decision.wouldDeny });
          return await forward(request, origin, rateLimitHeaders(decision));
        }
      }
    } catch (error) {
      // The origin unreachable, a body that broke mid-stream: the gate answers, it never throws.
      log("error", { event: "slidegate.upstream_error", error: error instanceof Error ? error.message : String(error) });
      return badGateway();
    }
  }
}
