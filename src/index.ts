import { parseRateLimits } from "./config.ts";
import { createGate, type Gate } from "./gate.ts";
import { configurationError } from "./responses.ts";

/**
 * Builds the gate from the environment, or the one error response a bad environment earns: a
 * generic 500 for every caller, with the details (which fields, and why) only in the log —
 * the configuration holds origin addresses, key hashes and deny entries no caller may read.
 */
function build(env: Env): Gate {
  const errors: string[] = [];
  const parsed = parseRateLimits(env.RATE_LIMITS);
  if (!parsed.ok) errors.push(...parsed.errors);
  if (!env.UPSTASH_REDIS_REST_URL) errors.push("UPSTASH_REDIS_REST_URL: is not set");
  if (!env.UPSTASH_REDIS_REST_TOKEN) errors.push("UPSTASH_REDIS_REST_TOKEN: is not set");
  let origin: URL | undefined;
  if (env.ORIGIN_URL) {
    if (URL.canParse(env.ORIGIN_URL)) origin = new URL(env.ORIGIN_URL);
    // not echoed even to the log: it may carry credentials
    else errors.push("ORIGIN_URL: is not a URL");
  }
  if (!parsed.ok || errors.length) {
    console.error(JSON.stringify({ event: "slidegate.config_error", errors }));
    return async () => configurationError();
  }
  return createGate({
    config: parsed.config, origin,
    redisUrl: env.UPSTASH_REDIS_REST_URL!, redisToken: env.UPSTASH_REDIS_REST_TOKEN!,
    adminToken: env.ADMIN_TOKEN || undefined, metrics: env.SLIDEGATE_METRICS,
  });
}

// Env is generated from wrangler.toml by `npm run types` (src/worker-configuration.d.ts).
// Validated once per isolate. `env` is normally the same object for every request;
// the fingerprint catches a new object carrying the same values.
const byEnv = new WeakMap<Env, Gate>();
let last: { fingerprint: string; gate: Gate } | undefined;

function gateFor(env: Env): Gate {
  let gate = byEnv.get(env);
  if (gate) return gate;
  const fingerprint = JSON.stringify([env.RATE_LIMITS, env.ORIGIN_URL, env.UPSTASH_REDIS_REST_URL, env.UPSTASH_REDIS_REST_TOKEN, env.ADMIN_TOKEN, Boolean(env.SLIDEGATE_METRICS)]);
  if (last?.fingerprint !== fingerprint) last = { fingerprint, gate: build(env) };
  gate = last.gate;
  byEnv.set(env, gate);
  return gate;
}

export default {
  fetch(request: Request, env: Env): Promise<Response> {
    return gateFor(env)(request);
  },
} satisfies ExportedHandler<Env>;
