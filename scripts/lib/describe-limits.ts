import type { GateConfig } from "../../src/config/rate-limits.ts";

const duration = (ms: number) =>
  ms % 86_400_000 === 0
    ? `${ms / 86_400_000}d`
    : ms % 3_600_000 === 0
      ? `${ms / 3_600_000}h`
      : ms % 60_000 === 0
        ? `${ms / 60_000}m`
        : ms % 1000 === 0
          ? `${ms / 1000}s`
          : `${ms}ms`;

type Rule = GateConfig["addressRules"][number];

/** One rule: "minute: 10 per 1m per x-api-key on GET /v1/* (fail open, timeout 1000ms)". */
function describeRule(r: Rule, who: string, prefix = ""): string {
  // the path as configured (a glob), not the expression it compiles to
  const scope = [r.methods && [...r.methods].join(","), r.glob].filter(Boolean).join(" ");
  const extras = [r.shadow && "shadow: reported, never enforced", r.cost > 1 && `cost ${r.cost}`, `fail ${r.fail}`, `timeout ${r.timeoutMs}ms`].filter(Boolean).join(", ");
  return `${prefix}${r.name}: ${r.limit} per ${duration(r.windowMs)} ${who}${scope ? ` on ${scope}` : ""} (${extras})`;
}

/** One line per rule, for banners and `check-config`: "free/minute: 10 per 60s …", then the address rules and the lists. */
export function describeLimits(config: GateConfig): string[] {
  const who = config.keyHeader ? `per ${config.keyHeader}${config.keyRequired ? " (required)" : ", else per client IP"}` : "per client IP";
  const lines: string[] = [];
  for (const [tier, rules] of config.tiers) {
    for (const r of rules) lines.push(describeRule(r, who, config.tiers.size > 1 ? `${tier}/` : ""));
  }
  for (const r of config.addressRules) lines.push(describeRule(r, "per client address, whatever its key", "address/"));
  for (const [list, entries] of Object.entries(config.lists ?? {})) {
    if (!entries) continue;
    const counted = [
      entries.ips?.length && `${entries.ips.length} IP entr${entries.ips.length === 1 ? "y" : "ies"}`,
      entries.keys?.length && `${entries.keys.length} key${entries.keys.length === 1 ? "" : "s"}`,
    ];
    const what = counted.filter(Boolean).join(", ");
    if (what) lines.push(`${list} list: ${what}`);
  }
  const cors = config.cors;
  if (cors) {
    const origins = cors.origins === "*" ? "every site (*)" : [...cors.origins].join(", ");
    lines.push(`CORS on the gate's own answers (429, 401, 403, 503, …) for ${origins}${cors.credentials ? ", with credentials" : ""}`);
  }
  if (config.originTimeoutMs !== undefined) {
    lines.push(`origin time limit: ${duration(config.originTimeoutMs)} for the origin's response head (then 504 origin-timeout); none for its body`);
  }
  return lines;
}
