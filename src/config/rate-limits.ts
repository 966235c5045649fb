import type ipaddr from "ipaddr.js";
import * as v from "valibot";
import { type AccessCheck, type AccessLists, compileAccess, parseRange } from "../decision/access-lists.ts";
import { ambiguousAddress, ipv6Network, transitionRange } from "../decision/identity.ts";
import { canonicalPath, SCRIPT_SUFFIX } from "../http/canonical.ts";
import { MAX_LIMIT, NAME_PATTERN } from "../script/limiter.ts";
import { didYouMean } from "./nearest.ts";
import { repeatedField } from "./repeated-field.ts";

// RATE_LIMITS: parsed and checked once per isolate, normalised into the plain values the
// per-request path needs. Every error names the field it is about.

export type FailMode = "open" | "closed";

/**
 * An API key nobody registered or configured: limited as the default tier (`"defaultTier"`),
 * refused with 401 (`"reject"`), or limited as its client address (`"ip"`).
 */
export type UnknownKeys = "defaultTier" | "reject" | "ip";

export interface Rule {
  name: string;
  limit: number;
  windowMs: number;
  cost: number;
  /** undefined: every path; matched against each form of the canonical path (see canonical.ts) */
  path?: PathPattern;
  /** the path as configured, in canonical form (for the operator's view of the configuration) */
  glob?: string;
  /** undefined: every method */
  methods?: ReadonlySet<string>;
  fail: FailMode;
  timeoutMs: number;
  /** decided and reported, never enforced */
  shadow: boolean;
  /** the scope of its log when it is not the caller's tier (the address rules') */
  scope?: string;
  /**
   * the rule whose log it counts in: its own name, or, for an enforced rule, that of the rule
   * with the longest window among the enforced rules of its list with the same methods, path
   * and cost (they see the same requests: one log serves them all, see `sharedLogs`)
   */
  log: string;
}

export interface GateConfig {
  prefix: string;
  /** header to read an API key from; undefined: identify by client IP only */
  keyHeader?: string;
  keyRequired: boolean;
  /** what an API key that neither the registry nor `keys` knows gets */
  unknownKeys: UnknownKeys;
  /** rules every request they match also answers to per client address (IPv6 per prefix), whatever its key */
  addressRules: readonly Rule[];
  /** the fail mode and budget of a store call with no rule of its own (an API key checked against the registry) */
  fail: FailMode;
  timeoutMs: number;
  tiers: ReadonlyMap<string, readonly Rule[]>;
  defaultTier: string;
  /** SHA-256 hex of an API key → tier name */
  keyTiers: ReadonlyMap<string, string>;
  denialCacheSize: number;
  /** the longest a cached denial is answered without asking Redis, ms */
  denialCacheMaxAgeMs: number;
  clock: "redis" | "edge";
  /** the allow and deny lists, for a client IP and an API key's SHA-256 hex */
  access: AccessCheck;
  /** the lists as configured (for the operator's view of the configuration) */
  lists?: { allow?: AccessLists; deny?: AccessLists };
  /** rule paths match case-sensitively */
  caseSensitivePaths?: boolean;
  /** IPv6 clients are counted by their network of this many bits */
  ipv6Prefix: number;
  /** the header (lower case) in which the origin receives the client address */
  clientIpHeader: string;
  /** true: client-sent X-Forwarded-Host, X-Forwarded-Proto, … reach the origin */
  passForwardedHeaders: boolean;
  /** CORS headers on the gate's own answers; undefined: none */
  cors?: CorsConfig;
  /**
   * the longest the gateway waits on the origin for its response head (and for it to take each
   * piece of an upload), ms; undefined: no time limit of the gate's own (src/gateway/proxy.ts)
   */
  originTimeoutMs?: number;
}

/** Which sites' browser code may read the gate's own answers (src/http/cors.ts). */
export interface CorsConfig {
  /** serialised origins, compared exactly with a request's Origin; "*": every site, answered `*` */
  origins: ReadonlySet<string> | "*";
  /** Access-Control-Allow-Credentials: true (never with "*") */
  credentials: boolean;
}

export type ConfigResult = { ok: true; config: GateConfig } | { ok: false; errors: string[] };

const UNITS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const WINDOW = /^(\d+)(ms|s|m|h|d)$/;
const MAX_WINDOW = 366 * UNITS.d!;
// the other ways people write a unit: each is one of the five, spelt as WINDOW takes it
const UNIT_WORDS: Record<string, string> = {
  ...Object.fromEntries(Object.keys(UNITS).map((u) => [u, u])),
  msec: "ms",
  msecs: "ms",
  millisecond: "ms",
  milliseconds: "ms",
  sec: "s",
  secs: "s",
  second: "s",
  seconds: "s",
  min: "m",
  mins: "m",
  minute: "m",
  minutes: "m",
  hr: "h",
  hrs: "h",
  hour: "h",
  hours: "h",
  day: "d",
  days: "d",
};

/**
 * How a duration written another way ("1min", "10 s", "1.5s", "2 Hours") is written, or
 * undefined when the text is no number and unit at all.
 *
 * @example
 * durationSpelling("1.5s"); // "1500ms"
 * durationSpelling("2 Hours"); // "2h"
 */
export function durationSpelling(text: string): string | undefined {
  // nobody writes a duration longer: a value of any length may be given, and none is read far
  if (text.length > 64) return undefined;
  // a number alone is milliseconds, as the same number unquoted would be. Trimmed first: blanks
  // on both sides of an optional unit would leave the pattern many ways to fail on a long run
  const m = /^(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)$/.exec(text.trim());
  // "M" is a month in ISO 8601 and in date libraries: "1m", a minute, is no guess to offer for it
  if (!m || m[2] === "M") return undefined;
  const word = m[2]!.toLowerCase() || "ms";
  // its own words alone: "constructor" is a name every object answers to
  const unit = Object.hasOwn(UNIT_WORDS, word) ? UNIT_WORDS[word] : undefined;
  if (!unit) return undefined;
  const n = Number(m[1]);
  // past 2^53 a number is no longer written as its digits ("1e+23"), which no duration takes
  if (Number.isSafeInteger(n)) return `${n}${unit}`;
  const ms = n * UNITS[unit]!;
  return Number.isSafeInteger(ms) ? `${ms}ms` : undefined;
}

/**
 * Names every JavaScript object already has (`toString`, `constructor`, `__proto__`, …). As a
 * tier or rule name they would be looked up as inherited properties, or silently dropped by
 * the parser, and a tier could end up with no rules at all.
 */
const RESERVED = new Set([...Object.getOwnPropertyNames(Object.prototype), "prototype"]);
/** Headers the gate cannot give over to the client address without breaking the request. */
const UNSETTABLE_HEADERS = new Set([
  "host",
  "content-length",
  "content-type",
  "transfer-encoding",
  "connection",
  "upgrade",
  "te",
  "trailer",
  "keep-alive",
  "authorization",
  "cookie",
  "cf-connecting-ip",
]);
/**
 * Headers that belong to the connection, not the request (RFC 9110 §7.6.1): proxies on the way
 * act on their values and remove them or write their own, and the gate never forwards them. workerd itself refuses a request whose Transfer-Encoding is no coding it knows, and
 * joins its own options to a client's Connection (`sk-1, close`). No key can be counted on
 * to arrive in one as sent, nor to reach the origin, so they are refused as the key header.
 */
const CONNECTION_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade"]);
/** The headers Cloudflare writes the client's address in (Enterprise's True-Client-IP, the IPv6 and pseudo-IPv4 copies). */
const ADDRESS_HEADERS = new Set(["cf-connecting-ip", "cf-connecting-ipv6", "true-client-ip", "cf-pseudo-ipv4"]);
const reservedName = (name: string) => `"${name}" is a name every JavaScript object already has; choose another`;

const int = (min: number, max: number) =>
  v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(min, `must be at least ${min}`), v.maxValue(max, `must be at most ${max}`));
// An entry holds a decision, about 0.6 KB for one rule: the largest cache stays within a
// quarter of an isolate's 128 MB, so a flood of distinct callers cannot run the Worker out of
// memory. With more rules an entry grows (denialCacheFit).
const DENIAL_CACHE_SIZE = v.pipe(
  v.number(),
  v.integer("must be a whole number"),
  v.minValue(0, "must be at least 0 (0 turns the cache off)"),
  v.maxValue(50_000, "must be at most 50000: each entry takes about 0.6 KB of the isolate's 128 MB"),
);
/**
 * How many denial-cache entries fit in a quarter of an isolate's 128 MB when a decision covers
 * up to `rules` rules: measured, an entry takes about 0.45 KB and 0.12 KB per rule (names of 32
 * characters); counted here as 0.5 KB and 0.125 KB.
 */
export function denialCacheFit(rules: number): number {
  return Math.floor(32_000_000 / (512 + 128 * rules));
}

/** Whether `name` can name a rule or a tier: the names the configuration takes. */
export const isName = (name: string) => NAME_PATTERN.test(name) && !RESERVED.has(name);

// Names become part of Redis keys: keep them short and free of the key separator.
const NAME = v.pipe(
  v.string(),
  v.regex(NAME_PATTERN, "must be 1-32 characters of A-Z a-z 0-9 _ -"),
  v.check(
    (name) => !RESERVED.has(name),
    (issue) => reservedName(issue.input as string),
  ),
);
const HEADER = v.pipe(v.string(), v.regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, "must be an HTTP header name"));
const FAIL = v.picklist(["open", "closed"], 'must be "open" or "closed"');
const MAX_TIMEOUT = 30_000;
const TIMEOUT = int(1, MAX_TIMEOUT);
// The object's own issues: a field it does not take (expected "never"), a field it needs that is
// absent (expected its quoted name), or a value that is no object at all.
const fields = <T extends v.ObjectEntries>(entries: T) => {
  const object = v.strictObject(entries, (issue) =>
    issue.expected === "never"
      ? `unknown field (allowed: ${Object.keys(entries).join(", ")})${didYouMean(String(issue.input), Object.keys(entries))}`
      : issue.expected?.startsWith('"')
        ? "is required"
        : `must be an object, not ${issue.received}`,
  );
  // an array passes for an object, and its items would each be refused as an unknown field
  // "0", "1", … ([[tiers.pro]] in TOML, where [[tiers.pro.rules]] was meant)
  return v.pipe(
    v.custom<v.InferInput<typeof object>>(
      (value) => !Array.isArray(value),
      `must be an object (a table), not an array: the fields it takes are ${Object.keys(entries).join(", ")}`,
    ),
    object,
  );
};

/** A duration as a number of ms or text with a unit ("10s"), at most `max` ms (`maxText` says it in words). */
const duration = (max: number, maxText: string) =>
  v.union(
    [
      v.pipe(v.number(), v.integer("must be a whole number of milliseconds"), v.minValue(1, "must be at least 1 ms"), v.maxValue(max, `must be at most ${max} ms (${maxText})`)),
      v.pipe(
        v.string(),
        v.regex(WINDOW, 'must be a whole number with a unit ms, s, m, h or d, like "10s"'),
        v.transform((w) => {
          const [, n, unit] = WINDOW.exec(w)!;
          return Number(n) * UNITS[unit!]!;
        }),
        v.minValue(1, "must be at least 1 ms"),
        v.maxValue(max, `must be at most ${maxText}`),
      ),
    ],
    'must be a duration like "10s", "1m", "500ms" or a number of milliseconds',
  );
const window = duration(MAX_WINDOW, "366d");
/**
 * The longest `originTimeout`: an origin that takes longer to start its answer is no origin a
 * time limit is set for.
 */
const MAX_ORIGIN_TIMEOUT = 3_600_000;

const rule = fields({
  name: NAME,
  limit: int(1, MAX_LIMIT),
  window,
  cost: v.optional(int(1, MAX_LIMIT)),
  path: v.optional(v.pipe(v.string(), v.startsWith("/", 'must start with "/"'))),
  methods: v.optional(v.pipe(v.array(v.pipe(v.string(), v.regex(/^[A-Za-z]+$/, "must be an HTTP method name"))), v.minLength(1, "needs at least one method"))),
  fail: v.optional(FAIL),
  timeout: v.optional(TIMEOUT),
  shadow: v.optional(v.boolean()),
});

/**
 * The most rules in one list: a request's rules go to the script in one call, which reads a key's
 * own numbers for each of them in one command (of two fields per rule), and Lua hands a command
 * at most about 8,000 arguments (a key's call over 3,999 rules failed there).
 */
const MAX_RULES = 3000;
const rules = v.pipe(
  v.array(rule),
  v.minLength(1, "needs at least one rule"),
  v.maxLength(MAX_RULES, (issue) => `has ${(issue.input as unknown[]).length} rules: at most ${MAX_RULES} (a request's rules are decided in one store call)`),
);

/**
 * An origin as browsers serialise it (`https://app.example.com`; scheme and host in any case),
 * or undefined. A `*` in a host is taken literally by the URL parser: as no wildcard, refused.
 */
const serialisedOrigin = (entry: string) => {
  const url = URL.canParse(entry) ? new URL(entry) : undefined;
  return url && /^https?:$/.test(url.protocol) && url.origin === entry.toLowerCase() && !entry.includes("*") ? url.origin : undefined;
};
// the entry is not repeated: a URL may hold credentials
const ORIGIN = v.pipe(
  v.string(),
  v.check(
    (entry) => entry === "*" || serialisedOrigin(entry) !== undefined,
    ({ input }) => {
      if (input === "null") return '"null" is sent by sandboxed frames and local files of every site: never allowed';
      const url = URL.canParse(input as string) ? new URL(input as string) : undefined;
      const write = url && /^https?:$/.test(url.protocol) && !url.host.includes("*") ? `: write "${url.origin}"` : "";
      return `must be an origin as browsers send it, scheme://host[:port] (no path, no wildcard), or "*"${write}`;
    },
  ),
);

const KEY_HASH = v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/, "must be the SHA-256 of an API key, as 64 lowercase hex digits"));
const accessList = v.optional(
  fields({
    keys: v.optional(v.array(KEY_HASH)),
    ips: v.optional(v.array(v.string())),
  }),
);

const schema = fields({
  prefix: v.optional(NAME),
  identity: v.optional(
    fields({
      header: v.optional(HEADER),
      required: v.optional(v.boolean()),
      unknownKeys: v.optional(v.picklist(["defaultTier", "reject", "ip"], 'must be "defaultTier", "reject" or "ip"')),
    }),
  ),
  rules: v.optional(rules),
  addressRules: v.optional(rules),
  tiers: v.optional(v.record(NAME, fields({ rules }))),
  defaultTier: v.optional(NAME),
  keys: v.optional(v.record(KEY_HASH, NAME)),
  allow: accessList,
  deny: accessList,
  shadow: v.optional(v.boolean()),
  fail: v.optional(FAIL),
  timeout: v.optional(TIMEOUT),
  denialCacheSize: v.optional(DENIAL_CACHE_SIZE),
  denialCacheMaxAge: v.optional(duration(3_600_000, "1h")),
  // a duration as denialCacheMaxAge takes one: "30s" is how a gateway's origin time limit is
  // written (Envoy, nginx), and a number alone is milliseconds here as in every other field
  originTimeout: v.optional(duration(MAX_ORIGIN_TIMEOUT, "1h")),
  clock: v.optional(v.picklist(["redis", "edge"], 'must be "redis" or "edge"')),
  ipv6Prefix: v.optional(int(48, 128)),
  caseSensitivePaths: v.optional(v.boolean()),
  clientIpHeader: v.optional(HEADER),
  passForwardedHeaders: v.optional(v.boolean()),
  cors: v.optional(
    fields({
      origins: v.pipe(v.array(ORIGIN), v.minLength(1, "needs at least one origin")),
      credentials: v.optional(v.boolean()),
    }),
  ),
});

type Raw = v.InferOutput<typeof schema>;

/** A window as a number of milliseconds only, as every answer spells it (`windowMs`). */
const windowMs = v.pipe(
  v.number("must be a whole number of milliseconds"),
  v.integer("must be a whole number of milliseconds"),
  v.minValue(1, "must be at least 1 ms"),
  v.maxValue(MAX_WINDOW, "must be at most 366d"),
);

/** The most requests a rule can count per millisecond of its window. */
export const MAX_PER_MS = 1000;

/**
 * Why a limit can be at most `MAX_PER_MS` per millisecond of its window, in a user's words. A log
 * records its entries at least a microsecond apart, so a burst at one clock reading runs ahead of
 * the clock, a microsecond an entry: with more entries than microseconds in the window, its newest
 * stands more than a window ahead, where the decision script takes the log for one it did not
 * write and starts it afresh, admitting without bound (see sliding-window.lua).
 */
export const DENSE_WHY = "requests are recorded at least a microsecond apart, so a window holds no more";

/**
 * The most a rule of `windowMs` can count when `limit` is more than that, else undefined.
 *
 * @example
 * tooDense(2000, 1); // 1000
 * tooDense(1000, 1); // undefined
 */
export function tooDense(limit: number, windowMs: number): number | undefined {
  return limit > windowMs * MAX_PER_MS ? windowMs * MAX_PER_MS : undefined;
}

/** The shapes of single values, for what validates them elsewhere (a registry entry's overrides). */
export const valueSchemas = { name: NAME, limit: int(1, MAX_LIMIT), window, windowMs } as const;

/** RATE_LIMITS as written: the shape `parseRateLimits` validates (also the library's options). */
export type RateLimits = v.InferInput<typeof schema>;

/** What the shapes alone cannot say: fields that depend on each other. */
function crossCheck(c: Raw, root: string): string[] {
  const errors: string[] = [];
  const issue = (path: string, message: string) => errors.push(`${root}${path}: ${message}`);
  if (c.rules && c.tiers) issue(".rules", 'give either "rules" or "tiers", not both');
  if (!c.rules && !c.tiers) issue("", 'needs "rules" or "tiers"');
  if (c.identity?.required && !c.identity.header) issue(".identity.required", 'needs "identity.header" to name the API-key header');
  if (c.identity?.unknownKeys && !c.identity.header) issue(".identity.unknownKeys", 'needs "identity.header" to name the API-key header');
  // compared as CGI-style origins read them: `X_API_Key` is `X-API-Key` there, and `X.API.Key` to PHP
  const spelling = (h: string | undefined) => h?.toLowerCase().replace(/[_.]/g, "-");
  // the whole value is the key: in Cookie, any other cookie sent beside it would make a new
  // identity (fresh quota per cookie), where the origin reads the same one
  if (spelling(c.identity?.header) === "cookie") {
    issue(
      ".identity.header",
      `"${c.identity!.header}" holds every cookie of a request, and the gate reads a header's whole value as the key: name a header that carries the key alone`,
    );
  }
  // Cloudflare's copies of the client address: as a key, every address (each of the 2^64 of one
  // IPv6 customer's /64) would be an identity of its own, walking around ipv6Prefix
  if (ADDRESS_HEADERS.has(spelling(c.identity?.header) ?? "")) {
    issue(
      ".identity.header",
      `"${c.identity!.header}" is the client's address, and as a key every address would be a caller of its own (every address of one IPv6 network, past ipv6Prefix): leave identity.header unset to limit per address`,
    );
  }
  const keyHeader = c.identity?.header;
  if (keyHeader && CONNECTION_HEADERS.has(keyHeader.toLowerCase())) {
    issue(
      ".identity.header",
      `"${keyHeader}" belongs to the connection, not the request (a hop-by-hop header): HTTP acts on its value, proxies on the way remove or rewrite it, and the gate never forwards it to the origin; name a header that carries the key alone, like "x-api-key"`,
    );
  }
  const ipHeader = spelling(c.clientIpHeader);
  if (ipHeader && (UNSETTABLE_HEADERS.has(ipHeader) || ipHeader === spelling(keyHeader))) {
    issue(".clientIpHeader", `"${c.clientIpHeader}" carries something else to the origin; name a header of its own, like "x-forwarded-for"`);
  }
  // the same clash with the default: the gate replaces the client's value with the address
  if (!ipHeader && keyHeader && spelling(keyHeader) === DEFAULTS.clientIpHeader) {
    issue(
      ".identity.header",
      `"${keyHeader}" is where the gate writes the client address for the origin (clientIpHeader, by default): the origin would never see the key. Name a header that carries the key alone, like "x-api-key"`,
    );
  }
  if (c.tiers) {
    if (!c.defaultTier) issue(".defaultTier", "is required with tiers");
    else if (!Object.hasOwn(c.tiers, c.defaultTier))
      issue(".defaultTier", `"${c.defaultTier}" is not a tier (tiers: ${Object.keys(c.tiers).join(", ")})${didYouMean(c.defaultTier, Object.keys(c.tiers))}`);
    if (!c.identity?.header) issue(".identity.header", "is required with tiers: tiers are chosen by API key");
  } else if (c.defaultTier) issue(".defaultTier", "only applies with tiers");
  for (const [hash, tier] of Object.entries(c.keys ?? {})) {
    if (!c.tiers || !Object.hasOwn(c.tiers, tier))
      issue(`.keys.${hash}`, `"${tier}" is not a tier${c.tiers ? ` (tiers: ${Object.keys(c.tiers).join(", ")})${didYouMean(tier, Object.keys(c.tiers))}` : ""}`);
  }
  for (const side of ["allow", "deny"] as const) {
    c[side]?.ips?.forEach((entry, i) => {
      const ambiguous = ambiguousAddress(entry.split("/")[0]!);
      if (ambiguous) issue(`.${side}.ips[${i}]`, `"${entry}" has ${ambiguous}`);
      else if (!parseRange(entry)) issue(`.${side}.ips[${i}]`, `"${entry}" is not an IP address or CIDR range`);
    });
  }
  const origins = c.cors?.origins ?? [];
  if (origins.includes("*") && origins.length > 1) issue(".cors.origins", '"*" stands alone');
  else if (origins.includes("*") && c.cors?.credentials) {
    issue(".cors.credentials", "cannot be true with \"*\": every site could read the gate's answers with its visitors' credentials; list the origins");
  }
  const lists: [string, RawRule[]][] = c.tiers ? Object.entries(c.tiers).map(([t, { rules }]) => [`.tiers.${t}.rules`, rules]) : [[".rules", c.rules ?? []]];
  if (c.addressRules) lists.push([".addressRules", c.addressRules]);
  // a cached denial holds the decision over every rule of its list: its size grows with them
  const most = Math.max(1, ...lists.map(([, rules]) => rules.length));
  const fit = denialCacheFit(most);
  const size = c.denialCacheSize ?? DEFAULTS.denialCacheSize;
  if (size > fit) {
    const given = c.denialCacheSize === undefined ? `the default, ${size}` : `${size}`;
    issue(".denialCacheSize", `${given}, is more than fit in an isolate with ${most} rules in one list: each entry holds a decision over them, so at most ${fit}`);
  }
  for (const [path, list] of lists) {
    const seen = new Set<string>();
    list.forEach((r, i) => {
      if (seen.has(r.name)) issue(`${path}[${i}].name`, `"${r.name}" is used twice`);
      seen.add(r.name);
      if ((r.cost ?? 1) > r.limit) issue(`${path}[${i}].cost`, `is larger than limit (${r.limit}): every request would be denied`);
      const most = tooDense(r.limit, r.window);
      if (most !== undefined) issue(`${path}[${i}].limit`, `must be at most ${MAX_PER_MS} per millisecond of the window, ${most} in ${r.window} ms, not ${r.limit}: ${DENSE_WHY}`);
      const canonical = r.path === undefined ? undefined : canonicalPath(r.path);
      if (canonical && !canonical.ok) issue(`${path}[${i}].path`, `contains ${canonical.refused}, which the gate refuses in every request`);
    });
  }
  return errors;
}

type RawRule = v.InferOutput<typeof rule>;

/** A compiled rule path: whether a form of a request's path matches it. */
export interface PathPattern {
  test(path: string): boolean;
  /** the glob as a regular expression, for people: "/v1/*" is ^\/v1\/.*$ */
  source: string;
}

const escapeRegExp = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, "\\$&");

/**
 * "/v1/*": `*` matches any run of characters, everything else literally; case-insensitive by
 * Unicode case folding (`ſ` is `s`, `K` is `k`) and with `İ` and `ı` as `i` (see
 * `foldDottedI`), as lenient origins compare. Matched part by
 * part — the first at the start, each middle one where it first occurs after the one before,
 * the last at the end — in time linear in the path's length for a given glob: one regular
 * expression of the whole glob (`^\/a\/.*\/b\/.*\/c$`) backtracks through every split of
 * a long path, seconds of CPU for one request of 16 KB.
 *
 * @example
 * pathPattern("/v1/*", false).test("/V1/users"); // true
 */
export function pathPattern(glob: string, caseSensitive: boolean): PathPattern {
  return caseSensitive ? foldedPattern(glob, "su") : foldedPattern(glob, "isu");
}

/**
 * The two letters Unicode case folding leaves apart from `i` that Java's caseless comparisons
 * do not (`Character.toLowerCase('İ')` is `i`, `Character.toUpperCase('ı')` is `I`): Spring's
 * case-insensitive patterns route `/admİn` and `/admın` to `/admin`, so they are read as `i`.
 * In the glob's expression, not the path: folding the path at each test cost a copy of it per
 * rule, pattern and match form (seconds for one long path of `İ`).
 */
const foldDottedI = (part: string) => part.replace(/[iI\u0130\u0131]/g, "[i\u0130\u0131]");

/** The glob matched part by part (see `pathPattern`), with these regular-expression flags. */
function foldedPattern(glob: string, flags: string): PathPattern {
  const parts = glob
    .split("*")
    .map(escapeRegExp)
    .map((part) => (flags.includes("i") ? foldDottedI(part) : part));
  const source = `^${parts.join(".*")}$`;
  if (parts.length === 1) {
    const whole = new RegExp(source, flags);
    return { test: (path) => whole.test(path), source };
  }
  const head = new RegExp(`^${parts[0]}`, flags);
  const middles = parts
    .slice(1, -1)
    .filter((part) => part !== "")
    .map((part) => new RegExp(part, `g${flags}`));
  const tail = new RegExp(`${parts.at(-1)}$`, `g${flags}`);
  return {
    source,
    test(path) {
      const start = head.exec(path);
      if (!start) return false;
      let at = start[0].length;
      for (const middle of middles) {
        middle.lastIndex = at;
        const found = middle.exec(path);
        if (!found) return false;
        at = found.index + found[0].length;
      }
      tail.lastIndex = at;
      return tail.test(path);
    },
  };
}

/**
 * A rule's glob matched in the forms a request is matched in: a lenient origin that routes
 * `/v1/users.xml` and `/v1/users` to the handler of `/v1/users.json` routes them whatever the
 * rule spells, so a rule on `/v1/users.json` covers them too. Its forms are the glob's own
 * match forms, less the trailing-slash variants that every request's forms hold already (but
 * `/`, which has no other); for
 * a glob without a suffix, `;` parameter or escape that is the glob alone, one pattern.
 * A suffix after a wildcard (`/*.css`) names a kind of file, not a handler: cut, it would be
 * `/*`, every path, so such a glob keeps its suffix in every form.
 * A glob that names a script (`/xmlrpc.php`, `/*.php`; see `SCRIPT_SUFFIX`) covers the paths
 * beneath it as well: servers that pass PATH_INFO (Apache and IIS with PHP, CGI, ASP.NET) run
 * `/xmlrpc.php/x` as `/xmlrpc.php`.
 */
function globPattern(glob: string, caseSensitive: boolean): PathPattern {
  const own = canonicalPath(glob) as { matchOn: readonly string[] };
  const last = glob.slice(glob.lastIndexOf("/") + 1);
  const dot = last.indexOf(".");
  const suffix = dot > 0 && last.slice(0, dot).includes("*") ? last.slice(dot) : undefined;
  // "/" has one spelling (a request's forms hold no other): a glob that is "/" in a form (`/index.php`) keeps it
  const forms = own.matchOn.filter((form) => (form === "/" || form.endsWith("/") === glob.endsWith("/")) && (suffix === undefined || form.replace(/\/$/, "").endsWith(suffix)));
  // the forms that still name the script, with its suffix: the paths beneath them
  const script = dot > 0 && SCRIPT_SUFFIX.test(last) ? last.slice(last.lastIndexOf(".")) : undefined;
  const beneath = script === undefined ? [] : forms.filter((form) => form.endsWith(script)).map((form) => `${form}/*`);
  const patterns = [...forms, ...beneath].map((form) => pathPattern(form, caseSensitive));
  if (patterns.length === 1) return patterns[0]!;
  return { source: patterns.map((p) => p.source).join("|"), test: (path) => patterns.some((p) => p.test(path)) };
}

function normaliseRule(r: RawRule, fail: FailMode, timeoutMs: number, shadow: boolean, caseSensitive: boolean): Rule {
  // the glob in the same canonical form as the requests it is matched against ("//v1/%75sers" is "/v1/users")
  const glob = r.path === undefined ? undefined : (canonicalPath(r.path) as { path: string }).path;
  return {
    name: r.name,
    limit: r.limit,
    windowMs: r.window,
    cost: r.cost ?? 1,
    path: glob === undefined ? undefined : globPattern(glob, caseSensitive),
    glob,
    methods: r.methods && new Set(r.methods.map((m) => m.toUpperCase())),
    fail: r.fail ?? fail,
    timeoutMs: r.timeout ?? timeoutMs,
    shadow: r.shadow ?? shadow,
    log: r.name,
  };
}

/**
 * Rules that see the same requests at the same cost count them in one log, kept for the
 * longest of their windows: each extra rule then costs Redis one read instead of a log of its
 * own. A shadow rule keeps its own log (it records what it alone would admit). The log is
 * the one the longest rule writes on its own (named after it), so a shorter rule that joins or
 * leaves its group leaves the group's count as it was.
 *
 * @example
 * sharedLogs([perSecond, perHour]).map((r) => r.log); // ["perHour", "perHour"]
 */
export function sharedLogs(rules: readonly Rule[]): Rule[] {
  const sees = (r: Rule) => (r.shadow ? undefined : `${[...(r.methods ?? [])].sort().join(",")} ${r.glob ?? ""} ${r.cost}`);
  const longest = new Map<string, Rule>();
  for (const r of rules) {
    const group = sees(r);
    if (group === undefined) continue;
    const held = longest.get(group);
    // of equally long rules, the first by name: reordering the rules never moves the log
    if (!held || r.windowMs > held.windowMs || (r.windowMs === held.windowMs && r.name < held.name)) longest.set(group, r);
  }
  return rules.map((r) => {
    const group = sees(r);
    return group === undefined ? r : { ...r, log: longest.get(group)!.name };
  });
}

/**
 * Defaults, stated once: fail open after 1000 ms; 10,000 denied identities cached per isolate,
 * none for longer than 10 s; IPv6 counted per /64; the origin told the client address in
 * X-Forwarded-For.
 */
const DEFAULTS = {
  prefix: "sg",
  fail: "open",
  timeoutMs: 1000,
  unknownKeys: "defaultTier",
  denialCacheSize: 10_000,
  denialCacheMaxAgeMs: 10_000,
  clock: "redis",
  ipv6Prefix: 64,
  clientIpHeader: "x-forwarded-for",
} as const;

/**
 * Object keys anywhere in the raw value that every JavaScript object already has, with where
 * they are: a schema's record drops such keys without a word (`__proto__` would set the
 * prototype), so they are refused before it runs.
 */
export function reservedKeys(value: unknown, path: string, depth = 0): string[] {
  if (typeof value !== "object" || value === null) return [];
  // a walk without end would overflow the stack (a RangeError, no field named): no field of
  // the configuration or of an admin body nests this deep
  if (depth >= MAX_DEPTH) return [`${path}: nests deeper than ${MAX_DEPTH} levels of tables and arrays, which no field takes`];
  const found: string[] = [];
  for (const key of Object.keys(value)) {
    const at = Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`;
    if (!Array.isArray(value) && RESERVED.has(key)) found.push(`${at}: ${reservedName(key)}`);
    found.push(...reservedKeys((value as Record<string, unknown>)[key], at, depth + 1));
  }
  return found;
}

/** Levels of tables and arrays a value may nest (the deepest field, a tier's rule's methods, is at 5). */
const MAX_DEPTH = 32;

/** "root.path.to.field: message", as every configuration error reads. */
export function describe(issue: v.BaseIssue<unknown>, root: string): string {
  const items = issue.path ?? [];
  const last = items.at(-1);
  // a name in "keys" that is no SHA-256 is most likely the raw API key: the error goes to the
  // log and to check-config's output, so the entry is named by its place, never repeated
  if (last && last.type === "object" && last.origin === "key" && items.length === 2 && items[0]!.key === "keys") {
    const place = Object.keys(last.input as object).indexOf(last.key as string) + 1;
    return `${root}.keys: entry ${place} is named by no SHA-256 of an API key, as 64 lowercase hex digits (not repeated here: it may be the key itself; name each key by its SHA-256)`;
  }
  // the same entry, named so, may be wrong in its value too: that error names it by its place as well
  const entry = items[0]?.key === "keys" && items[1]?.type === "object" ? items[1] : undefined;
  const rawName = entry !== undefined && !/^[0-9a-f]{64}$/.test(String(entry.key));
  const path = items
    .map((p, i) =>
      rawName && i === 1 ? `: entry ${Object.keys(entry!.input as object).indexOf(String(entry!.key)) + 1}` : typeof p.key === "number" ? `[${p.key}]` : `.${String(p.key)}`,
    )
    .join("");
  // a string where key hashes go (a table of them, a list, or the allow or deny table that holds
  // one: deny = "sk-…") is most likely one raw key: not echoed
  const inKeys = items[0]?.key === "keys" || ((items[0]?.key === "allow" || items[0]?.key === "deny") && (items.length === 1 || items[1]?.key === "keys"));
  if (inKeys && issue.kind === "schema" && typeof issue.input === "string" && issue.received) {
    return `${root}${path}: ${issue.message.replace(issue.received, "a string")} (not repeated here: it may be an API key; name each key by its SHA-256)`;
  }
  // limit = "100" in TOML, or "100" in JSON: valibot's "Expected number" does not say that the
  // quotes are the whole mistake
  const quoted = typeof issue.input === "string" ? issue.input : undefined;
  if (issue.kind === "schema" && quoted !== undefined) {
    if (issue.type === "number" && quoted.trim() !== "" && Number.isFinite(Number(quoted)))
      return `${root}${path}: must be a number, not the string ${JSON.stringify(quoted)}: write it without quotes`;
    // a window and denialCacheMaxAge take "10s", so "2s" is the natural slip here; a timeout is milliseconds alone
    const duration = WINDOW.exec(quoted);
    if (issue.type === "number" && last?.key === "timeout" && duration) {
      const ms = Number(duration[1]) * UNITS[duration[2]!]!;
      // the gateway's top-level timeout sits beside originTimeout, which does take "30s": the
      // store's budget is not the origin's (the library has no origin, and no originTimeout)
      const which =
        root === "RATE_LIMITS" && path === ".timeout"
          ? `; timeout is the rate-limit store's budget: a time limit on the origin is originTimeout, which takes ${JSON.stringify(quoted)}`
          : "";
      // a number the timeout would refuse next is no number to write
      return ms >= 1 && ms <= MAX_TIMEOUT
        ? `${root}${path}: must be a number of milliseconds, not the string ${JSON.stringify(quoted)}: write ${ms}${which}`
        : `${root}${path}: must be a number of milliseconds from 1 to ${MAX_TIMEOUT}, not the string ${JSON.stringify(quoted)} (${ms} ms)${which}`;
    }
    if (issue.type === "boolean" && (quoted === "true" || quoted === "false"))
      return `${root}${path}: must be true or false, not the string ${JSON.stringify(quoted)}: write it without quotes`;
  }
  // "1min", "10 s", "1.5s": what each means is known, and is named in the spelling taken
  if (issue.type === "union" && quoted !== undefined && issue.message.startsWith("must be a duration")) {
    const spelt = durationSpelling(quoted);
    if (spelt !== undefined && spelt !== quoted) return `${root}${path}: ${issue.message}; did you mean ${JSON.stringify(spelt)}?`;
  }
  // "Edge" for "edge", "rejected" for "reject": the one value meant is named beside the list
  if (issue.type === "picklist" && quoted !== undefined) {
    const options = [...(issue.expected ?? "").matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`) as string);
    return `${root}${path}: ${issue.message}${didYouMean(quoted, options)}`;
  }
  return `${root}${path}: ${issue.message}`;
}

/** Fields that changed name: the old name is refused with the new one, never silently dropped. */
const RENAMED: Record<string, string> = { blockCacheSize: "denialCacheSize", blockCacheMaxAge: "denialCacheMaxAge" };

/**
 * Validates RATE_LIMITS given as an object (a TOML table) or a JSON string. Errors name each
 * field from `root` ("RATE_LIMITS", or "options" for the library's options).
 *
 * @example
 * const result = parseRateLimits('{"rules":[{"name":"default","limit":5,"window":"10s"}]}');
 * if (result.ok) result.config.tiers.get("default"); // [{ name: "default", limit: 5, windowMs: 10000, ... }]
 */
export function parseRateLimits(raw: unknown, root = "RATE_LIMITS"): ConfigResult {
  if (raw === undefined || raw === null || raw === "") return { ok: false, errors: [`${root}: is not set`] };
  let value = raw;
  if (typeof raw === "string") {
    try {
      value = JSON.parse(raw);
    } catch (e) {
      return { ok: false, errors: [`${root}: is not valid JSON (${(e as Error).message})`] };
    }
    const repeated = repeatedField(raw, root);
    if (repeated) return { ok: false, errors: [`${repeated.at}: names the field ${JSON.stringify(repeated.field)} twice, and only the last would count: write it once`] };
  }
  if (Array.isArray(value)) return { ok: false, errors: [`${root}: must be an object, not an array`] };
  // before the schema: it would drop such keys silently, and "in" would find them anyway
  const reserved = reservedKeys(value, root);
  if (reserved.length) return { ok: false, errors: reserved };
  const renamed = Object.keys(Object(value))
    .filter((k) => Object.hasOwn(RENAMED, k))
    .map((k) => `${root}.${k}: is now called "${RENAMED[k]}"`);
  if (renamed.length) return { ok: false, errors: renamed };
  const parsed = v.safeParse(schema, value);
  if (!parsed.success) return { ok: false, errors: parsed.issues.map((issue) => describe(issue, root)) };
  const c = parsed.output;
  const errors = crossCheck(c, root);
  if (errors.length) return { ok: false, errors };
  const fail = c.fail ?? DEFAULTS.fail;
  const timeoutMs = c.timeout ?? DEFAULTS.timeoutMs;
  const tierRules = c.tiers ? Object.entries(c.tiers).map(([name, t]) => [name, t.rules] as const) : [["default", c.rules!] as const];
  const caseSensitive = c.caseSensitivePaths ?? false;
  return {
    ok: true,
    config: {
      prefix: c.prefix ?? DEFAULTS.prefix,
      keyHeader: c.identity?.header?.toLowerCase(),
      keyRequired: c.identity?.required ?? false,
      unknownKeys: c.identity?.unknownKeys ?? DEFAULTS.unknownKeys,
      addressRules: sharedLogs((c.addressRules ?? []).map((r) => normaliseRule(r, fail, timeoutMs, c.shadow ?? false, caseSensitive))),
      fail,
      timeoutMs,
      tiers: new Map(tierRules.map(([name, list]) => [name, sharedLogs(list.map((r) => normaliseRule(r, fail, timeoutMs, c.shadow ?? false, caseSensitive)))])),
      defaultTier: c.defaultTier ?? "default",
      keyTiers: new Map(Object.entries(c.keys ?? {})),
      denialCacheSize: c.denialCacheSize ?? DEFAULTS.denialCacheSize,
      denialCacheMaxAgeMs: c.denialCacheMaxAge ?? DEFAULTS.denialCacheMaxAgeMs,
      clock: c.clock ?? DEFAULTS.clock,
      access: compileAccess({ allow: c.allow, deny: c.deny }),
      lists: { allow: c.allow, deny: c.deny },
      caseSensitivePaths: caseSensitive,
      ipv6Prefix: c.ipv6Prefix ?? DEFAULTS.ipv6Prefix,
      clientIpHeader: (c.clientIpHeader ?? DEFAULTS.clientIpHeader).toLowerCase(),
      passForwardedHeaders: c.passForwardedHeaders ?? false,
      cors: c.cors && { origins: c.cors.origins[0] === "*" ? "*" : new Set(c.cors.origins.map((o) => serialisedOrigin(o)!)), credentials: c.cors.credentials ?? false },
      originTimeoutMs: c.originTimeout,
    },
  };
}

/**
 * What a valid configuration leaves open to the threat model's caller, in words an operator
 * can act on; `check-config` prints these. Empty when nothing is.
 *
 * @example
 * configurationWarnings(parsed.config); // ['identity.unknownKeys is "defaultTier" and no addressRules rule covers every request …']
 */
export function configurationWarnings(config: GateConfig): string[] {
  const warnings: string[] = [];
  // a floor: an enforced address rule that every request answers to (no methods, and no path
  // or one every path matches: every form of a path starts with "/")
  const everyPath = (glob: string | undefined) => glob === undefined || /^\/?\*+$/.test(glob);
  const floor = config.addressRules.some((r) => !r.shadow && everyPath(r.glob) && !r.methods);
  if (config.keyHeader && config.unknownKeys === "defaultTier" && !floor) {
    warnings.push(
      `identity.unknownKeys is "defaultTier" and no addressRules rule covers every request (enforced, for every method, with no path or "/*"): a client that sends a new made-up API key with every request gets the default tier's quota afresh each time, without bound, and reaches the origin. Add such an address rule (a per-address floor), or register your keys and set identity.unknownKeys to "reject" or "ip".`,
    );
  }
  // one customer holds a whole /64 at least: every network of the prefix inside it is a caller of its own
  if (config.ipv6Prefix > 64) {
    warnings.push(
      `ipv6Prefix (${config.ipv6Prefix}) counts IPv6 callers per /${config.ipv6Prefix}, but one IPv6 customer holds a whole /64 at least: a caller that moves to another address of its /64 gets every rule's quota afresh, 2^${config.ipv6Prefix - 64} times over. Write "ipv6Prefix": 64 (the default), or fewer for customers who hold a /56 or a /48, unless every IPv6 client of this gate is known to use one address alone.`,
    );
  }
  warnings.push(...narrowDenyEntries(config));
  // "originTimeout": 30 is 30 ms, as every number alone in the configuration is, where nginx's
  // proxy_read_timeout 30 is seconds: every request whose origin takes longer would get a 504
  const originMs = config.originTimeoutMs;
  if (originMs !== undefined && originMs < 1000) {
    warnings.push(
      `originTimeout is ${originMs} ms: a request whose origin takes longer than that to start its answer gets a 504 origin-timeout. A number alone is milliseconds; if you meant seconds, write "${originMs}s". Keep it if your origin answers within ${originMs} ms.`,
    );
  }
  // a list's keys are compared with the key a request carries in identity.header: with none
  // configured the gate reads no key, and the entries match no request, in silence
  if (!config.keyHeader) {
    for (const side of ["allow", "deny"] as const) {
      const count = config.lists?.[side]?.keys?.length ?? 0;
      if (count === 0) continue;
      const entries = count === 1 ? "1 API key" : `${count} API keys`;
      warnings.push(
        `${side}.keys lists ${entries}, but no identity.header is configured: the gate reads no API key, so ${count === 1 ? "it matches" : "they match"} no request${side === "deny" ? " and no one is denied by key" : " and no one is let through by key"}. Set identity.header to the header your clients send their key in (like "x-api-key"), or list their addresses in ${side}.ips.`,
      );
    }
  }
  // "GTE" is a valid token, and a method of its own: the rule would count nothing, in silence
  const rulesByList: [string, readonly Rule[]][] = [
    ...[...config.tiers].map(([tier, rules]) => [`tier ${tier}`, rules] as [string, readonly Rule[]]),
    ["addressRules", config.addressRules],
  ];
  for (const [list, rules] of rulesByList) {
    for (const rule of rules) {
      // said, not refused: a deployed gateway would answer every request 500 until it is fixed
      const route = rule.glob === undefined ? undefined : routeParameterIn(rule.glob);
      if (route) {
        warnings.push(
          `rule "${rule.name}" (${list}) has the path ${JSON.stringify(rule.glob)}: ${JSON.stringify(route.parameter)} is a route parameter, which a rule's path does not take: it is a glob matched on the request's path (* for any text, slashes included), where ${JSON.stringify(route.parameter)} matches only itself, so the rule counts none of the route's requests; write ${JSON.stringify(route.glob)}`,
        );
      }
      for (const method of rule.methods ?? []) {
        if (STANDARD_METHODS.includes(method)) continue;
        warnings.push(
          `rule "${rule.name}" (${list}) names the method ${JSON.stringify(method)}, which is no standard HTTP method${didYouMean(method, STANDARD_METHODS)}: the rule counts only requests sent with that exact method. Leave it if your API takes it (a custom method such as PURGE).`,
        );
      }
    }
  }
  return warnings;
}

/**
 * A segment of a router's pattern that names a parameter, whole: a colon then a name starts it
 * (`:id`), and whatever the router lets follow is part of it — a Hono regex, braces inside it
 * too (`:id{[0-9]{4}}`), an Express one (`:id([0-9]+)`), `?`, `*` or `+`, a Hono name with a
 * hyphen (`:org-id`), a suffix (`:id.json`). Matched up to a name alone, the rest of such a
 * segment left it taken as the text it matched.
 */
const ROUTE_PARAMETER = /(?<=\/):[A-Za-z_$](?:\{(?:[^{}]|\{[^{}]*\})*\}|\((?:[^()]|\([^()]*\))*\)|[^/{}()])*/g;

/**
 * A rule path written as an app's router writes a route (`/v1/users/:id`): its first route
 * parameter, and the glob that means what the route does. A rule's path is a glob, where `:id`
 * is the text ":id" alone, so such a rule counts no request the route serves. (`%3A` writes a
 * segment that starts with a colon, should one be meant.)
 *
 * @example
 * routeParameterIn("/v1/users/:id"); // { parameter: ":id", glob: "/v1/users/*" }
 */
export function routeParameterIn(path: string): { parameter: string; glob: string } | undefined {
  const parameter = path.match(ROUTE_PARAMETER)?.[0];
  return parameter === undefined ? undefined : { parameter, glob: path.replace(ROUTE_PARAMETER, "*") };
}

/** The methods of RFC 9110 and PATCH: a rule's method outside them is warned of, not refused. */
const STANDARD_METHODS: readonly string[] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/**
 * IPv6 deny entries narrower than the network a caller holds: the network the gate counts as
 * one caller (`ipv6Prefix`), and never one narrower than a /64, which one customer holds at least
 * (the admin API counts wrong tokens per /64 for the same reason). In a transition range the
 * caller is the IPv4 address the gate counts there (`transitionRange`): a 6to4 site's /48, a
 * Teredo client (no range narrower than 2001::/32 holds one, so none is named), one NAT64
 * address. Said, not widened: an operator may mean an entry exactly as written.
 */
function narrowDenyEntries(config: GateConfig): string[] {
  const held = Math.min(config.ipv6Prefix, 64);
  const network = held === config.ipv6Prefix ? `the /${held} the gate counts as one caller (ipv6Prefix ${config.ipv6Prefix})` : `a /${held}, the least one IPv6 customer holds`;
  const counted = held === config.ipv6Prefix ? `, while its quota and an admin block of the address are the whole /${held}'s` : "";
  const warnings: string[] = [];
  config.lists?.deny?.ips?.forEach((entry, i) => {
    // validated when the configuration was parsed: every entry is an address or a range
    const [net, bits] = parseRange(entry)!;
    if (net.kind() !== "ipv6") return;
    // an address of a transition range is counted as the IPv4 caller it is made from, not by its network
    const transition = transitionRange(net as ipaddr.IPv6, bits);
    // The IPv4 entry is the one to write: it covers the caller's 6to4 site, Teredo and NAT64
    // addresses too (compileAccess), and the caller holds that IPv4 address itself, so denied by
    // its site or tunnel alone it comes by IPv4 and is not.
    const byIPv4 = (ipv4: string, part = "that part") =>
      `Write "${ipv4}" to deny it (an IPv4 entry covers its 6to4 site, its Teredo and NAT64 addresses too), or keep the entry if you mean ${part} alone.`;
    if (transition?.kind === "6to4") {
      // a range of one site or less is one caller: wider ones hold many, each its own IPv4 host
      if (bits > 48) {
        warnings.push(
          `deny.ips[${i}] ("${entry}") covers part of ${transition.site}, the 6to4 site of ${transition.ipv4}, which the gate counts as one caller (${transition.ipv4}: its quota and an admin block of the address are that IPv4 address's): the caller moves to another address of its site, or comes by IPv4 from ${transition.ipv4} itself (6to4 needs it), and is no longer denied. ${byIPv4(transition.ipv4)}`,
        );
      } else if (bits === 48) {
        warnings.push(
          `deny.ips[${i}] ("${entry}") covers the 6to4 site of ${transition.ipv4}, which the gate counts as one caller (${transition.ipv4}: its quota and an admin block of the address are that IPv4 address's): the caller comes by IPv4 from ${transition.ipv4} itself (6to4 needs it), or by Teredo, and is no longer denied. ${byIPv4(transition.ipv4, "its 6to4 addresses")}`,
        );
      }
      return;
    }
    if (transition?.kind === "teredo") {
      if (bits > 32) {
        const client = transition.ipv4 ? ` (${transition.ipv4})` : "";
        const advice = transition.ipv4
          ? `, or comes by IPv4 from behind that address, and is no longer denied. ${byIPv4(transition.ipv4)}`
          : ` and is no longer denied. No range narrower than "2001::/32", every Teredo client, holds one client whole; keep the entry if you mean that part alone.`;
        warnings.push(
          `deny.ips[${i}] ("${entry}") covers part of a Teredo client, which the gate counts as the IPv4 address it carries${client} whatever its Teredo server and port: the caller moves to another server or port${advice}`,
        );
      }
      return;
    }
    // each address of NAT64's prefix is an IPv4 client of its own: the entry holds whole callers
    if (transition?.kind === "nat64" || bits <= held) return;
    warnings.push(
      `deny.ips[${i}] ("${entry}") covers part of ${network}: the caller moves to another address of its network and is no longer denied${counted}. Write "${ipv6Network(net as ipaddr.IPv6, held)}" to deny the whole network, or keep the entry if you mean that part alone.`,
    );
  });
  return warnings;
}
