/** The Worker's bindings. Secrets: UPSTASH_REDIS_REST_TOKEN (and UPSTASH_REDIS_REST_URL). */
export interface Env {
  ORIGIN_URL?: string;
  UPSTASH_REDIS_REST_URL?: string;
  UPSTASH_REDIS_REST_TOKEN?: string;
  /** a JSON string, or a TOML table in wrangler.toml [vars] */
  RATE_LIMITS?: unknown;
}
