import type { GateConfig, Rule } from "../config/rate-limits.ts";

/**
 * The effective configuration as the operator's console shows it: every field of
 * RATE_LIMITS after defaults, rules with their fail mode and budget resolved, and the lists.
 * It is built from the parsed configuration only, which holds no secret: the Upstash URL and
 * token, the admin token and the origin are not part of it. API keys appear as the SHA-256
 * the configuration names them by.
 *
 * @example
 * describeConfiguration(config).tiers.default; // [{ name: "default", limit: 5, windowMs: 10000, … }]
 */
export function describeConfiguration(config: GateConfig) {
  const rule = (r: Rule) => ({
    name: r.name,
    limit: r.limit,
    windowMs: r.windowMs,
    cost: r.cost,
    path: r.glob ?? null,
    methods: r.methods ? [...r.methods] : null,
    fail: r.fail,
    timeoutMs: r.timeoutMs,
    shadow: r.shadow,
  });
  const tiers = Object.fromEntries([...config.tiers].map(([tier, rules]) => [tier, rules.map(rule)]));
  const list = (l: { keys?: readonly string[]; ips?: readonly string[] } | undefined) => ({ keys: [...(l?.keys ?? [])], ips: [...(l?.ips ?? [])] });
  return {
    prefix: config.prefix,
    identity: { header: config.keyHeader ?? null, required: config.keyRequired, unknownKeys: config.unknownKeys },
    defaultTier: config.defaultTier,
    tiers,
    addressRules: config.addressRules.map(rule),
    shadowRules: [
      ...[...config.tiers].flatMap(([tier, rules]) => rules.filter((r) => r.shadow).map((r) => `${tier}/${r.name}`)),
      ...config.addressRules.filter((r) => r.shadow).map((r) => `addressRules/${r.name}`),
    ],
    keys: Object.fromEntries(config.keyTiers),
    allow: list(config.lists?.allow),
    deny: list(config.lists?.deny),
    fail: config.fail,
    timeoutMs: config.timeoutMs,
    denialCacheSize: config.denialCacheSize,
    denialCacheMaxAgeMs: config.denialCacheMaxAgeMs,
    clock: config.clock,
    ipv6Prefix: config.ipv6Prefix,
    caseSensitivePaths: config.caseSensitivePaths ?? false,
    clientIpHeader: config.clientIpHeader,
    passForwardedHeaders: config.passForwardedHeaders,
    cors: config.cors ? { origins: config.cors.origins === "*" ? ["*"] : [...config.cors.origins], credentials: config.cors.credentials } : null,
    originTimeoutMs: config.originTimeoutMs ?? null,
  };
}
