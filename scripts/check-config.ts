#!/usr/bin/env node
/**
 * `npm run check-config [-- FILE | -]`: validates RATE_LIMITS offline with the validator the
 * Worker itself uses. No argument: wrangler.toml's [vars]. FILE: a JSON file, or a wrangler
 * configuration (`*.toml`: its [vars] RATE_LIMITS and ORIGIN_URL, as for no argument). "-": JSON
 * on stdin.
 * Exits 0 and lists the limits when valid (with a warning for what a valid configuration still
 * leaves open, such as made-up API keys without an address floor or an IPv6 deny entry narrower
 * than a caller's network); exits 1 and names each bad field otherwise.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { originUrlErrors } from "../src/config/origin-url.ts";
import { configurationWarnings, parseRateLimits } from "../src/config/rate-limits.ts";
import { keyHeaderWarnings } from "../src/gateway/proxy.ts";
import { describeLimits } from "./lib/describe-limits.ts";
import { varsFromWranglerToml } from "./lib/wrangler-config.ts";

const source = process.argv[2];
// npm runs this in the package's root; a file the user names is relative to where npm was typed (INIT_CWD)
const fromUser = (name: string) => resolve(process.env.INIT_CWD ?? ".", name);
let raw: unknown;
let from: string;
// a wrangler configuration's ORIGIN_URL, which the gate refuses as it refuses RATE_LIMITS
let originErrors: string[] = [];
try {
  // a wrangler configuration named as a file (another environment's, say) is read as wrangler.toml is
  if (source === undefined || /\.toml$/i.test(source)) {
    const vars = varsFromWranglerToml(source === undefined ? undefined : fromUser(source));
    raw = vars.RATE_LIMITS;
    from = `${source ?? "wrangler.toml"} [vars] RATE_LIMITS`;
    if (typeof vars.ORIGIN_URL === "string" && vars.ORIGIN_URL) originErrors = originUrlErrors(vars.ORIGIN_URL);
    else if (vars.ORIGIN_URL !== undefined && typeof vars.ORIGIN_URL !== "string") originErrors = ["ORIGIN_URL: must be a string"];
  } else {
    raw = readFileSync(source === "-" ? 0 : fromUser(source), "utf8");
    from = source === "-" ? "standard input" : source;
  }
} catch (e) {
  console.error(`check-config: cannot read ${source ?? "wrangler.toml"}: ${(e as Error).message}`);
  process.exit(1);
}

const result = parseRateLimits(raw);
if (originErrors.length) {
  console.error(`✗ ${source ?? "wrangler.toml"} [vars] ORIGIN_URL is invalid:`);
  for (const error of originErrors) console.error(`  - ${error}`);
}
if (!result.ok) {
  console.error(`✗ ${from} is invalid:`);
  for (const error of result.errors) console.error(`  - ${error}`);
  process.exit(1);
}
if (originErrors.length) process.exit(1);
console.log(`✓ ${from} is valid:`);
for (const line of describeLimits(result.config)) console.log(`  ${line}`);
// the key header's only with the Worker, which forwards requests: the library's callers read headers themselves
for (const warning of [...configurationWarnings(result.config), ...keyHeaderWarnings(result.config)]) console.log(`⚠ ${warning}`);
