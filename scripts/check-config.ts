#!/usr/bin/env node
/**
 * `npm run check-config [-- FILE | -]`: validates RATE_LIMITS offline with the validator the
 * Worker itself uses. No argument: wrangler.toml's [vars]. FILE: a JSON file, or a wrangler
 * configuration (`*.toml`: its [vars] RATE_LIMITS, as for no argument). "-": JSON on stdin.
 * Exits 0 and lists the limits when valid (with a warning for what a valid configuration still
 * leaves open, such as made-up API keys without an address floor or an IPv6 deny entry narrower
 * than a caller's network); exits 1 and names each bad field otherwise.
 */
import { readFileSync } from "node:fs";
import { configurationWarnings, parseRateLimits } from "../src/config/rate-limits.ts";
import { keyHeaderWarnings } from "../src/gateway/proxy.ts";
import { describeLimits } from "./lib/describe-limits.ts";
import { rateLimitsFromWranglerToml } from "./lib/wrangler-config.ts";

const source = process.argv[2];
let raw: unknown;
let from: string;
try {
  // a wrangler configuration named as a file (another environment's, say) is read as wrangler.toml is
  if (source === undefined || /\.toml$/i.test(source)) {
    raw = rateLimitsFromWranglerToml(source);
    from = `${source ?? "wrangler.toml"} [vars] RATE_LIMITS`;
  } else {
    raw = readFileSync(source === "-" ? 0 : source, "utf8");
    from = source === "-" ? "standard input" : source;
  }
} catch (e) {
  console.error(`check-config: cannot read ${source ?? "wrangler.toml"}: ${(e as Error).message}`);
  process.exit(1);
}

const result = parseRateLimits(raw);
if (!result.ok) {
  console.error(`✗ ${from} is invalid:`);
  for (const error of result.errors) console.error(`  - ${error}`);
  process.exit(1);
}
console.log(`✓ ${from} is valid:`);
for (const line of describeLimits(result.config)) console.log(`  ${line}`);
// the key header's only with the Worker, which forwards requests: the library's callers read headers themselves
for (const warning of [...configurationWarnings(result.config), ...keyHeaderWarnings(result.config)]) console.log(`⚠ ${warning}`);
