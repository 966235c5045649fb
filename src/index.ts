import { originUrlErrors } from "./config/origin-url.ts";
import { parseRateLimits } from "./config/rate-limits.ts";
import { storeTokenErrors, storeUrlErrors } from "./config/store-secrets.ts";
import { createGate, type Gate } from "./gateway/gateway.ts";
import { configurationError } from "./http/answers.ts";

/**
 * What the gateway reads from its Worker's environment: `[vars]` in wrangler.toml and the
 * secrets (see the README's Configuration).
 */
export interface GatewayEnv {
  /** the limits: a TOML table or a JSON string */
  RATE_LIMITS: unknown;
  /** where admitted requests go; empty: on to the request's own URL */
  ORIGIN_URL?: string;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  /** turns on the admin API under /__slidegate/ */
  ADMIN_TOKEN?: string;
  /** a Workers Analytics Engine dataset for the gate's data points */
  SLIDEGATE_METRICS?: AnalyticsEngineDataset;
}

/** The shortest admin token the gate accepts. */
const MIN_ADMIN_TOKEN_LENGTH = 32;
/**
 * An admin token no request can carry: a header value loses spaces and tabs at its ends and
 * cannot hold a line break or another control character. Taken as it is, such a secret (pasted
 * with the newline a terminal printed after it, say) would answer the right token 401, each try
 * one of the address's failures.
 */
const unsendable = (token: string) => /^[ \t]|[ \t]$/.test(token) || [...token].some((c) => (c < " " && c !== "\t") || c === "\u007f");

/** A value set that is no string: a binding (a Secrets Store one gives its value only to get()), which string checks would throw on. */
const notString = (value: unknown) => value !== undefined && value !== null && typeof value !== "string";
const bindingError = (name: string) =>
  `${name}: must be a string (a variable or a secret), not a binding: a Secrets Store binding gives its value only to get(), which the gate does not call; set it with wrangler secret put`;

/**
 * Builds the gate from the environment, or the one error response a bad environment earns: a
 * generic 500 for every caller, with the details (which fields, and why) only in the log —
 * the configuration holds origin addresses, key hashes and deny entries no caller may read.
 */
function build(env: GatewayEnv): Gate {
  const errors: string[] = [];
  const parsed = parseRateLimits(env.RATE_LIMITS);
  if (!parsed.ok) errors.push(...parsed.errors);
  const unread = (["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "ORIGIN_URL"] as const).filter((name) => notString(env[name]));
  if (unread.length) {
    console.error(JSON.stringify({ event: "slidegate.config_error", errors: [...errors, ...unread.map(bindingError)] }));
    return async () => configurationError();
  }
  if (!env.UPSTASH_REDIS_REST_URL) errors.push("UPSTASH_REDIS_REST_URL: is not set");
  else errors.push(...storeUrlErrors(env.UPSTASH_REDIS_REST_URL));
  if (!env.UPSTASH_REDIS_REST_TOKEN) errors.push("UPSTASH_REDIS_REST_TOKEN: is not set");
  else errors.push(...storeTokenErrors(env.UPSTASH_REDIS_REST_TOKEN));
  const originErrors = env.ORIGIN_URL ? originUrlErrors(env.ORIGIN_URL) : [];
  errors.push(...originErrors);
  const origin = env.ORIGIN_URL && !originErrors.length ? new URL(env.ORIGIN_URL) : undefined;
  if (!parsed.ok || errors.length) {
    console.error(JSON.stringify({ event: "slidegate.config_error", errors }));
    return async () => configurationError();
  }
  // Sign-in failures are limited per address, and a caller with many addresses (a /48 holds
  // 65,536 /64s) guesses in parallel: only a token no one can guess keeps the admin API shut.
  // A shorter one, or one no header can carry, refuses the admin API alone: the requests the
  // gate protects go on as before.
  const adminTokenErrors = !env.ADMIN_TOKEN
    ? []
    : notString(env.ADMIN_TOKEN)
      ? [`${bindingError("ADMIN_TOKEN")}; the admin API answers its configuration error until it is`]
      : [
          ...(env.ADMIN_TOKEN.length < MIN_ADMIN_TOKEN_LENGTH
            ? [`ADMIN_TOKEN: must be at least ${MIN_ADMIN_TOKEN_LENGTH} characters (a random one: openssl rand -hex 32); the admin API answers its configuration error until it is`]
            : []),
          ...(unsendable(env.ADMIN_TOKEN)
            ? [
                "ADMIN_TOKEN: holds a space or line break at an end, or a control character, so no Authorization header can carry it as it is (a header value loses spaces at its ends and holds no control character): set it again without them; the admin API answers its configuration error until it is",
              ]
            : []),
          // The runtime reads a header's bytes as UTF-8 (a byte that is not UTF-8 as U+FFFD): curl
          // from a terminal sends such a token as UTF-8 and signs in, while a browser (the console)
          // and Node (`npm run keys`) send U+0080 to U+00FF as one byte each and refuse anything
          // past it, so half the tools would fail, each try a counted failure.
          ...(/[\u0080-\uffff]/.test(env.ADMIN_TOKEN)
            ? [
                "ADMIN_TOKEN: holds a character outside ASCII (a typographic dash or quote, an accented letter), which the console and npm run keys cannot send as the gate reads it: their sign-ins would be 401s, counted as failures; set a random ASCII one (openssl rand -hex 32); the admin API answers its configuration error until it is",
              ]
            : []),
        ];
  const refusedAdminToken = adminTokenErrors.length > 0;
  if (refusedAdminToken) console.error(JSON.stringify({ event: "slidegate.config_error", errors: adminTokenErrors }));
  return createGate({
    config: parsed.config,
    origin,
    redisUrl: env.UPSTASH_REDIS_REST_URL!,
    redisToken: env.UPSTASH_REDIS_REST_TOKEN!,
    adminToken: refusedAdminToken ? undefined : env.ADMIN_TOKEN || undefined,
    adminRefused: refusedAdminToken,
    metrics: env.SLIDEGATE_METRICS,
  });
}

// Validated once per isolate. `env` is normally the same object for every request;
// the fingerprint catches a new object carrying the same values.
const byEnv = new WeakMap<GatewayEnv, Gate>();
let last: { fingerprint: string; gate: Gate } | undefined;

function gateFor(env: GatewayEnv): Gate {
  let gate = byEnv.get(env);
  if (gate) return gate;
  const fingerprint = JSON.stringify([env.RATE_LIMITS, env.ORIGIN_URL, env.UPSTASH_REDIS_REST_URL, env.UPSTASH_REDIS_REST_TOKEN, env.ADMIN_TOKEN, Boolean(env.SLIDEGATE_METRICS)]);
  if (last?.fingerprint !== fingerprint) last = { fingerprint, gate: build(env) };
  gate = last.gate;
  byEnv.set(env, gate);
  return gate;
}

/**
 * The turnkey gateway: deploy it as it is (`main = "src/index.ts"`), or from the package
 * (`export { default } from "slidegate/worker"`).
 */
export default {
  fetch(request: Request, env: GatewayEnv, ctx?: ExecutionContext): Promise<Response> {
    return gateFor(env)(request, ctx);
  },
} satisfies ExportedHandler<GatewayEnv>;
