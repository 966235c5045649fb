import { readFileSync } from "node:fs";
import { parse } from "smol-toml";

/** wrangler.toml's [vars], as wrangler gives them to the Worker (RATE_LIMITS a table, or a JSON string). */
export function varsFromWranglerToml(path = "wrangler.toml"): Record<string, unknown> {
  const config = parse(readFileSync(path, "utf8")) as { vars?: Record<string, unknown> };
  return config.vars ?? {};
}
