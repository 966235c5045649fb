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

/** One line per rule, for banners and `check-config`: "free/minute: 10 per 60s …". */
export function describeLimits(config: GateConfig): string[] {
  const who = config.keyHeader ? `per ${config.keyHeader}${config.keyRequired ? " (required)" : ", else per client IP"}` : "per client IP";
  const lines: string[] = [];
  for (const [tier, rules] of config.tiers) {
    for (const r of rules) {
      const scope = [r.methods && [...r.methods].join(","), r.path?.source].filter(Boolean).join(" ");
      const extras = [r.cost > 1 && `cost ${r.cost}`, `fail ${r.fail}`, `timeout ${r.timeoutMs}ms`].filter(Boolean).join(", ");
      lines.push(`${config.tiers.size > 1 ? `${tier}/` : ""}${r.name}: ${r.limit} per ${duration(r.windowMs)} ${who}${scope ? ` on ${scope}` : ""} (${extras})`);
    }
  }
  return lines;
}
