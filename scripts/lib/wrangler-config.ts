import { readFileSync } from "node:fs";
import { parse } from "smol-toml";

/** RATE_LIMITS as wrangler.toml's [vars] gives it to the Worker (a table, or a JSON string). */
export function rateLimitsFromWranglerToml(path = "wrangler.toml"): unknown {
  const config = parse(readFileSync(path, "utf8")) as { vars?: Record<string, unknown> };
  return config.vars?.RATE_LIMITS;
}
