import * as v from "valibot";
import { compileAccess, parseRange, type AccessCheck } from "./access.ts";

/**
 * RATE_LIMITS: parsed and checked once per isolate, normalised into the plain values the
 * per-request path needs. Every error names the field it is about.
 *
 * @example
 * const result = parseRateLimits('{"rules":[{"name":"default","limit":5,"window":"10s"}]}');
 * if (result.ok) result.config.tiers.get("default"); // [{ name: "default", limit: 5, windowMs: 10000, ... }]
 */

export type FailMode = "open" | "closed";

export interface Rule {
  name: string;
  limit: number;
  windowMs: number;
  cost: number;
  /** undefined: every path */
  path?: RegExp;
  /** undefined: every method */
  methods?: ReadonlySet<string>;
  fail: FailMode;
  timeoutMs: number;
  /** decided and reported, never enforced */
  shadow: boolean;
}

export interface GateConfig {
  prefix: string;
  /** header to read an API key from; undefined: identify by client IP only */
  keyHeader?: string;
  keyRequired: boolean;
  tiers: ReadonlyMap<string, readonly Rule[]>;
  defaultTier: string;
  /** SHA-256 hex of an API key → tier name */
  keyTiers: ReadonlyMap<string, string>;
  blockCacheSize: number;
  clock: "redis" | "edge";
  /** the allow and deny lists, for a client IP and an API key's SHA-256 hex */
  access: AccessCheck;
}

export type ConfigResult = { ok: true; config: GateConfig } | { ok: false; errors: string[] };

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const WINDOW = /^(\d+)(ms|s|m|h|d)$/;
const MAX_WINDOW = 366 * UNITS.d!;

const int = (min: number, max: number) =>
  v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(min, `must be at least ${min}`), v.maxValue(max, `must be at most ${max}`));
// Names become part of Redis keys: keep them short and free of the key separator.
const NAME = v.pipe(v.string(), v.regex(/^[A-Za-z0-9_-]{1,32}$/, "must be 1-32 characters of A-Z a-z 0-9 _ -"));
const FAIL = v.picklist(["open", "closed"], 'must be "open" or "closed"');
const TIMEOUT = int(1, 30_000);
const fields = <T extends v.ObjectEntries>(entries: T) => v.strictObject(entries, (issue) =>
  issue.expected === "never" ? `unknown field (allowed: ${Object.keys(entries).join(", ")})` : `must be an object, not ${issue.received}`);

const window = v.union([
  int(1, MAX_WINDOW),
  v.pipe(
    v.string(),
    v.regex(WINDOW, 'must be a whole number with a unit ms, s, m, h or d, like "10s"'),
    v.transform((w) => {
      const [, n, unit] = WINDOW.exec(w)!;
      return Number(n) * UNITS[unit!]!;
    }),
    v.minValue(1, "must be at least 1 ms"),
    v.maxValue(MAX_WINDOW, "must be at most 366d"),
  ),
], 'must be a duration like "10s", "1m", "500ms" or a number of milliseconds');

const rule = fields({
  name: NAME,
  limit: int(1, 1_000_000),
  window,
  cost: v.optional(int(1, 1_000_000)),
  path: v.optional(v.pipe(v.string(), v.startsWith("/", 'must start with "/"'))),
  methods: v.optional(v.pipe(v.array(v.pipe(v.string(), v.regex(/^[A-Za-z]+$/, "must be an HTTP method name"))), v.minLength(1, "needs at least one method"))),
  fail: v.optional(FAIL),
  timeout: v.optional(TIMEOUT),
  shadow: v.optional(v.boolean()),
});

const rules = v.pipe(v.array(rule), v.minLength(1, "needs at least one rule"));

const KEY_HASH = v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/, "must be the SHA-256 of an API key, as 64 lowercase hex digits"));
const accessList = v.optional(fields({
  keys: v.optional(v.array(KEY_HASH)),
  ips: v.optional(v.array(v.string())),
}));

const schema = fields({
  prefix: v.optional(NAME),
  identity: v.optional(fields({
    header: v.optional(v.pipe(v.string(), v.regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, "must be an HTTP header name"))),
    required: v.optional(v.boolean()),
  })),
  rules: v.optional(rules),
  tiers: v.optional(v.record(NAME, fields({ rules }))),
  defaultTier: v.optional(NAME),
  keys: v.optional(v.record(KEY_HASH, NAME)),
  allow: accessList,
  deny: accessList,
  shadow: v.optional(v.boolean()),
  fail: v.optional(FAIL),
  timeout: v.optional(TIMEOUT),
  blockCacheSize: v.optional(int(0, 1_000_000)),
  clock: v.optional(v.picklist(["redis", "edge"], 'must be "redis" or "edge"')),
});

type Raw = v.InferOutput<typeof schema>;

/** What the shapes alone cannot say: fields that depend on each other. */
function crossCheck(c: Raw): string[] {
  const errors: string[] = [];
  const issue = (path: string, message: string) => errors.push(`RATE_LIMITS${path}: ${message}`);
  if (c.rules && c.tiers) issue(".rules", 'give either "rules" or "tiers", not both');
  if (!c.rules && !c.tiers) issue("", 'needs "rules" or "tiers"');
  if (c.identity?.required && !c.identity.header) issue(".identity.required", 'needs "identity.header" to name the API-key header');
  if (c.tiers) {
    if (!c.defaultTier) issue(".defaultTier", "is required with tiers");
    else if (!(c.defaultTier in c.tiers)) issue(".defaultTier", `"${c.defaultTier}" is not a tier`);
    if (!c.identity?.header) issue(".identity.header", "is required with tiers: tiers are chosen by API key");
  } else if (c.defaultTier) issue(".defaultTier", "only applies with tiers");
  for (const [hash, tier] of Object.entries(c.keys ?? {})) {
    if (!c.tiers || !(tier in c.tiers)) issue(`.keys.${hash}`, `"${tier}" is not a tier`);
  }
  for (const side of ["allow", "deny"] as const) {
    c[side]?.ips?.forEach((entry, i) => {
      if (!parseRange(entry)) issue(`.${side}.ips[${i}]`, `"${entry}" is not an IP address or CIDR range`);
    });
  }
  const lists: [string, RawRule[]][] = c.tiers ? Object.entries(c.tiers).map(([t, { rules }]) => [`.tiers.${t}.rules`, rules]) : [[".rules", c.rules ?? []]];
  for (const [path, list] of lists) {
    const seen = new Set<string>();
    list.forEach((r, i) => {
      if (seen.has(r.name)) issue(`${path}[${i}].name`, `"${r.name}" is used twice`);
      seen.add(r.name);
      if ((r.cost ?? 1) > r.limit) issue(`${path}[${i}].cost`, `is larger than limit (${r.limit}): every request would be denied`);
    });
  }
  return errors;
}

type RawRule = v.InferOutput<typeof rule>;

/** "/v1/*" → /^\/v1\/.*$/ : `*` matches any run of characters, everything else literally. */
function pathPattern(glob: string): RegExp {
  const body = glob.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*");
  return new RegExp(`^${body}$`);
}

function normaliseRule(r: RawRule, fail: FailMode, timeoutMs: number, shadow: boolean): Rule {
  return {
    name: r.name,
    limit: r.limit,
    windowMs: r.window,
    cost: r.cost ?? 1,
    path: r.path === undefined ? undefined : pathPattern(r.path),
    methods: r.methods && new Set(r.methods.map((m) => m.toUpperCase())),
    fail: r.fail ?? fail,
    timeoutMs: r.timeout ?? timeoutMs,
    shadow: r.shadow ?? shadow,
  };
}

/** Defaults, stated once: fail open after 1000 ms, 10,000 blocked identities cached per isolate. */
export const DEFAULTS = { prefix: "sg", fail: "open", timeoutMs: 1000, blockCacheSize: 10_000, clock: "redis" } as const;

function describe(issue: v.BaseIssue<unknown>): string {
  const path = (issue.path ?? []).map((p) => (typeof p.key === "number" ? `[${p.key}]` : `.${String(p.key)}`)).join("");
  return `RATE_LIMITS${path}: ${issue.message}`;
}

/** Validates RATE_LIMITS given as an object (a TOML table) or a JSON string. */
export function parseRateLimits(raw: unknown): ConfigResult {
  if (raw === undefined || raw === null || raw === "") return { ok: false, errors: ["RATE_LIMITS: is not set"] };
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (e) {
      return { ok: false, errors: [`RATE_LIMITS: is not valid JSON (${(e as Error).message})`] };
    }
  }
  if (Array.isArray(value)) return { ok: false, errors: ["RATE_LIMITS: must be an object, not an array"] };
  const parsed = v.safeParse(schema, value);
  if (!parsed.success) return { ok: false, errors: parsed.issues.map(describe) };
  const c = parsed.output;
  const errors = crossCheck(c);
  if (errors.length) return { ok: false, errors };
  const fail = c.fail ?? DEFAULTS.fail;
  const timeoutMs = c.timeout ?? DEFAULTS.timeoutMs;
  const tierRules = c.tiers ? Object.entries(c.tiers).map(([name, t]) => [name, t.rules] as const) : [["default", c.rules!] as const];
  return {
    ok: true,
    config: {
      prefix: c.prefix ?? DEFAULTS.prefix,
      keyHeader: c.identity?.header?.toLowerCase(),
      keyRequired: c.identity?.required ?? false,
      tiers: new Map(tierRules.map(([name, list]) => [name, list.map((r) => normaliseRule(r, fail, timeoutMs, c.shadow ?? false))])),
      defaultTier: c.defaultTier ?? "default",
      keyTiers: new Map(Object.entries(c.keys ?? {})),
      blockCacheSize: c.blockCacheSize ?? DEFAULTS.blockCacheSize,
      clock: c.clock ?? DEFAULTS.clock,
      access: compileAccess({ allow: c.allow, deny: c.deny }),
    },
  };
}
