import { Redis } from "@upstash/redis/cloudflare";
import type { GateConfig } from "./config.ts";
import { identify, sha256, type Identity } from "./identity.ts";
import { redisKeys } from "./limiter.ts";
import { problem } from "./problem.ts";
import { tierOf } from "./rules.ts";

/** Every path under this prefix belongs to the gate: it is never forwarded to the origin. */
export const ADMIN_PREFIX = "/__slidegate/";
const MAX_BLOCK_SECONDS = 30 * 86_400;

export interface AdminOptions {
  config: GateConfig;
  /** the ADMIN_TOKEN secret; undefined: the admin API is off and its paths answer 404 */
  adminToken?: string;
  redisUrl: string;
  redisToken: string;
  /** the edge clock (ms), used only with `clock: "edge"` */
  now?: () => number;
}

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", "Cache-Control": "no-store" } });
const notFound = () => problem(404, "not-found", "Not Found", `Admin routes: POST ${ADMIN_PREFIX}usage, reset, block, unblock.`);
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
 * hashes it; the admin token is compared in constant time.
 *
 * @example
 * POST /__slidegate/block  Authorization: Bearer $ADMIN_TOKEN  {"key":"sk-live-…","seconds":600}
 */
export function createAdmin(options: AdminOptions): (request: Request) => Promise<Response> {
  const { config, adminToken } = options;
  if (!adminToken) return async () => notFound();
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

  return async (request) => {
    if (!(await authorised(request))) return problem(401, "unauthorized", "Unauthorized", "Send the admin token as a bearer token.");
    const route = routes[new URL(request.url).pathname.slice(ADMIN_PREFIX.length)];
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
    try {
      return await route(typeof key === "string" ? await identify("k", key.trim()) : await identify("i", (ip as string).trim()), body);
    } catch (e) {
      return problem(503, "store-unavailable", "Service Unavailable", `The rate-limit store failed: ${e instanceof Error ? e.message.slice(0, 200) : "unknown error"}`);
    }
  };
}
