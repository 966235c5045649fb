import { errors } from "@upstash/redis/cloudflare";
import { didYouMean } from "../config/nearest.ts";
import { type GateConfig, pathPattern, type Rule, tooDense } from "../config/rate-limits.ts";
import { repeatedField } from "../config/repeated-field.ts";
import { consolePage, secureConsoleUrl } from "../console/page.ts";
import { consoleRoutes } from "../console/routes.ts";
import { readKey } from "../decision/api-key.ts";
import { ambiguousAddress, type Identity, identify, ipIdentity, keyIdentity, parseAddress } from "../decision/identity.ts";
import { ADDRESS_SCOPE } from "../decision/pipeline.ts";
import { tierOf, tierRules } from "../decision/rules.ts";
import { createFailureLog, type FailureLog } from "../gateway/failure-log.ts";
import { configurationError } from "../http/answers.ts";
import { problem } from "../http/problem.ts";
import { blockLeft, LimiterError, redisKeys } from "../script/limiter.ts";
import { storeClient } from "../script/store-client.ts";
import { createRegistry, type Entry, type Given, IMPORT_BATCH, LIST_PAGE } from "./registry.ts";
import { createSignIn } from "./sign-in.ts";
import { isStoreFailure, storeFailed } from "./store-failure.ts";
import { echo, unknownFields } from "./unknown-fields.ts";

/** Every path under this prefix belongs to the gate: it is never forwarded to the origin. */
const ADMIN_PREFIX = "/__slidegate/";
const MAX_BLOCK_SECONDS = 30 * 86_400;
/** A key's SHA-256 as sent: either case is taken, and lower-cased, as the registry and the gate write it. */
const KEY_HASH = /^[0-9a-f]{64}$/i;
/** The tag of an address ("i…") or of an application's own identity ("u…"), as the figures list them. */
const IDENTITY_TAG = /^[iu][A-Za-z0-9_-]{22}$/;

/**
 * The prefix, and the prefix without its slash, matched as a case-insensitive rule's path is:
 * lower-casing alone left `/__ſlidegate/` and `/__slİdegate/` to the origin, which a lenient
 * one (Java's caseless comparison) routes as `/__slidegate/`.
 */
const ADMIN_PATHS = [pathPattern(`${ADMIN_PREFIX}*`, false), pathPattern(ADMIN_PREFIX.slice(0, -1), false)];

/** Whether a canonical path is the gate's own, in any case: an origin that folds case would otherwise see it. */
export const isAdminPath = (path: string) => ADMIN_PATHS.some((p) => p.test(path));

/** How long the admin API waits on the store, for the authentication count and for a route's calls. */
const STORE_TIMEOUT_MS = 5000;

export interface AdminOptions {
  config: GateConfig;
  /** the ADMIN_TOKEN secret; undefined: the admin API is off and its paths answer 404 */
  adminToken?: string;
  /** an admin token was set but refused: every admin path answers the configuration error */
  refused?: boolean;
  redisUrl: string;
  redisToken: string;
  /** the isolate's clock, ms (default Date.now); with `clock: "edge"` also the limiter's */
  now?: () => number;
  /** where structured log lines go */
  log?: (level: "warn" | "error", line: Record<string, unknown>) => void;
  /** called with an identity's tag after a change to it (reset, block, unblock, its registry entry): the isolate forgets what it cached */
  forget?: (tag: string) => void;
  /**
   * where the admin API's store failures are counted (default: a log of its own): the gateway
   * passes one its quiet flush writes too, so the count of an outage's last failed calls is not
   * kept until a call that may never come
   */
  failures?: FailureLog;
}

const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", "Cache-Control": "no-store" } });
const notFound = () =>
  problem(
    404,
    "not-found",
    "Not Found",
    `Admin routes: POST ${ADMIN_PREFIX}usage, reset, block, unblock, keys/set, keys/update, keys/get, keys/delete, keys/override, keys/list, keys/import, figures, configuration; the console: GET ${ADMIN_PREFIX}.`,
  );
const noEntry = () => problem(404, "no-such-key", "No Such Key", "The registry holds no entry for this key.");
/** Redis's refusal of a command on a key of another type: the store answered, and a retry would get the same. */
const WRONG_TYPE = /\bWRONGTYPE\b/;
const wrongType = () =>
  problem(
    409,
    "wrong-type",
    "Conflict",
    "A key of this identity in the store holds a value of another type than slidegate writes (set by hand, or by another application using the same prefix). Remove it (keys/delete for a registry entry, unblock for a block, reset for its windows) or give slidegate a prefix of its own.",
  );
const badRequest = (detail: string) => problem(400, "bad-request", "Bad Request", detail);
/**
 * The deepest a body may nest objects and arrays. No route reads past five levels (an import's
 * {"entries":[{"overrides":{"<rule>":{…}}}]}); JSON.parse takes any depth, but the checks
 * after it walk a value recursively, and a body of some 100,000 brackets would overflow the
 * stack: a 500 for what is the caller's mistake.
 */
const MAX_BODY_DEPTH = 16;

/** Whether `value` nests objects and arrays deeper than `max`: walked with a stack of its own, as a recursive walk would overflow. */
function nestsDeeper(value: unknown, max: number): boolean {
  const pending: [unknown, number][] = [[value, 1]];
  while (pending.length) {
    const [v, depth] = pending.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) pending.push([child, depth + 1]);
  }
  return false;
}
/** The fields that name whom a route is about, per kind of route. */
const NAMED_BY = { any: ["key", "hash", "ip", "user", "tag"], key: ["key", "hash"], none: [] } as const;
/** What a route about any identity takes: every form, so a caller with the wrong one learns the right one. */
const NAME_ONE =
  'Give exactly one of "key" (the raw API key), "hash" (its SHA-256), "ip" (the client IP), "user" (an identity your application gave the library or the Hono middleware) or "tag" (an address\'s or a user\'s tag, as the figures list it), as a non-empty string.';

/**
 * A log member is "<total before>" or "<total before>:<cost>" (see sliding-window.lua): the
 * running totals before and after it, or undefined for a member the script did not write.
 */
const totals = (member: unknown): { before: number; after: number } | undefined => {
  const m = /^(\d+)(?::(\d+))?$/.exec(String(member));
  if (!m) return undefined;
  const before = Number(m[1]);
  return { before, after: before + Number(m[2] ?? 1) };
};

/**
 * The operator's API: read an identity's usage per rule, reset it, block and unblock it. The
 * identity comes as the raw API key or IP in the JSON body and is hashed here, as the gate
 * hashes it (an IP in its canonical form and IPv6 prefix). Every call but the console's page
 * passes the sign-in first (src/admin/sign-in.ts). A reset or unblock also clears the serving
 * isolate's cached denials at once.
 *
 * @example
 * POST /__slidegate/block  Authorization: Bearer $ADMIN_TOKEN  {"key":"sk-live-…","seconds":600}
 */
export function createAdmin(options: AdminOptions): (request: Request, path: string) => Promise<Response> {
  const { config, adminToken } = options;
  // a token the gate refused (see the log): the operator is told, not shown a 404 as if it were unset
  if (options.refused) return async () => configurationError();
  if (!adminToken) return async () => notFound();
  const log = options.log ?? ((level, line) => console[level](JSON.stringify(line)));
  // a store outage fails every admin call alike, unauthenticated ones included: a full line a
  // second, the rest counted, so a flood of them cannot flood the log
  const failures =
    options.failures ?? createFailureLog({ event: "slidegate.admin_store_failure", now: options.now, secret: options.redisToken, write: (line) => log("error", line) });
  const isolateNow = options.now ?? Date.now;
  const redis = storeClient({ url: options.redisUrl, token: options.redisToken, timeoutMs: STORE_TIMEOUT_MS });

  const registry = createRegistry({ config, redis });
  const signIn = createSignIn({
    config,
    adminToken,
    redis,
    redisUrl: options.redisUrl,
    redisToken: options.redisToken,
    storeTimeoutMs: STORE_TIMEOUT_MS,
    now: options.now,
    log,
    failures,
  });

  /**
   * Every log of one identity: every rule's of every tier, and (an address's) the address
   * rules'; by the rule's own name too, which a rule that now shares a log once wrote. A key
   * the registry puts in a tier this configuration lacks is counted by the default tier's
   * rules under that tier's name: `registryTier` names it.
   */
  const logsOf = (tag: string, registryTier?: string) => {
    const scopes: [string, readonly Rule[]][] = [...config.tiers, [ADDRESS_SCOPE, config.addressRules]];
    if (registryTier && !config.tiers.has(registryTier)) scopes.push([registryTier, tierRules(config, registryTier)]);
    return [
      ...new Set(scopes.flatMap(([scope, rules]) => rules.flatMap((r) => [redisKeys.log(config.prefix, tag, scope, r.log), redisKeys.log(config.prefix, tag, scope, r.name)]))),
    ];
  };

  /** Now in µs on the clock the script decides by. */
  const clock = async () => {
    if (config.clock === "edge") return Math.round(isolateNow() * 1000);
    const time: unknown = await redis.time();
    const [seconds, micros] = Array.isArray(time) && time.length === 2 ? time.map(Number) : [];
    // a store answering TIME with anything but two whole numbers is failing, not the gate
    if (!Number.isSafeInteger(seconds) || !Number.isSafeInteger(micros)) throw new LimiterError(`the store answered TIME with ${JSON.stringify(time)?.slice(0, 100)}`);
    return seconds! * 1_000_000 + micros!;
  };

  /**
   * The policy a key nobody knows meets ("reject" or "ip"), or false: a known key, one the lists
   * decide, or unknown keys with the default tier's rules. Under these policies such a key is not
   * limited by its tier's rules: an operator reading them as its quota (usage), or clearing them
   * (reset), would misread the answer. A key on the allow or deny list never meets the policy
   * (the lists are read first): told it is refused, an operator would look for a fault in a
   * monitoring key that goes through unlimited.
   */
  const unknownKeyPolicy = (identity: Identity, entry: Entry | undefined) =>
    identity.kind === "k" &&
    !entry &&
    !config.keyTiers.has(identity.keyHash!) &&
    config.unknownKeys !== "defaultTier" &&
    config.access(undefined, identity.keyHash) === undefined &&
    config.unknownKeys;

  async function usage(identity: Identity) {
    const entry = identity.kind === "k" ? await registry.get(identity) : undefined;
    const tier = entry?.tier || tierOf(config, identity.keyHash);
    const rules = tierRules(config, tier).map((r) => {
      const limit = entry?.overrides[r.name]?.limit ?? r.limit;
      const windowMs = entry?.overrides[r.name]?.windowMs ?? r.windowMs;
      // a key's own numbers past what a log can count (written by hand) are no override, as the script reads them
      return { ...r, scope: tier, ...(tooDense(limit, windowMs) === undefined && { limit, windowMs }) };
    });
    // an address answers to the address rules too, whatever key it sends
    const addressRules = identity.kind === "i" ? config.addressRules.map((r) => ({ ...r, scope: ADDRESS_SCOPE })) : [];
    const now = await clock();
    const block = redisKeys.block(config.prefix, identity.tag);
    const p = redis.pipeline();
    p.get(block);
    p.pttl(block);
    // Per rule, two entries of its log, as the script reads it: the oldest still in the window and
    // the newest; their running totals give the weight between them. Reading the whole log
    // instead cost memory and time in proportion to it (a day's log of a million requests is
    // tens of MB), on the caller an operator most wants to look at.
    for (const r of [...rules, ...addressRules]) {
      const log = redisKeys.log(config.prefix, identity.tag, r.scope, r.log);
      p.zrange(log, `(${now - r.windowMs * 1000}` as `(${number}`, "+inf", { byScore: true, offset: 0, count: 1, withScores: true });
      p.zrange(log, -1, -1, { withScores: true });
    }
    // each reply on its own: a key holding a value of another type (written by hand) is read as
    // the script reads it, a block by its TTL and a log as none, not a failure of the whole read
    const replies = await p.exec({ keepErrors: true });
    const [blockValue, blockTtl, ...logs] = replies.map(({ result, error }, i) => {
      if (error === undefined) return result;
      if (!/^WRONGTYPE/.test(error)) throw new LimiterError(error);
      return i === 0 ? "" : [];
    }) as [string | null, number, ...string[][]];
    const windowOf = (r: (typeof rules)[number], first: string[], last: string[]) => {
      const oldest = first.length ? Number(first[1]) : Number.POSITIVE_INFINITY;
      const [from, to] = [totals(first[0]), totals(last[0])];
      // a log the script cannot read, it reads as empty (and starts afresh)
      const inWindow = Number.isFinite(oldest) && from !== undefined && to !== undefined && to.after > from.before;
      const used = inWindow ? to.after - from.before : 0;
      return {
        name: r.name,
        limit: r.limit,
        windowMs: r.windowMs,
        shadow: r.shadow,
        used,
        remaining: Math.max(0, r.limit - used),
        resetMs: inWindow ? Math.ceil((oldest + r.windowMs * 1000 - now) / 1000) : 0,
        oldestEntryAt: inWindow ? new Date(oldest / 1000).toISOString() : null,
      };
    };
    const unknownKey = unknownKeyPolicy(identity, entry);
    return {
      identity: { kind: ({ k: "key", i: "ip", u: "user" } as const)[identity.kind], tag: identity.tag },
      tier,
      ...(entry && { registry: entry }),
      ...(unknownKey && { unknownKey: config.unknownKeys }),
      blockedForMs: blockLeft(blockValue, blockTtl, now),
      rules: rules.map((r, i) => windowOf(r, logs[2 * i] ?? [], logs[2 * i + 1] ?? [])),
      ...(addressRules.length && {
        addressRules: addressRules.map((r, i) => windowOf(r, logs[2 * (rules.length + i)] ?? [], logs[2 * (rules.length + i) + 1] ?? [])),
      }),
    };
  }

  /**
   * Each route: whom it is about ("any": a key, its hash, an IP, a user or a tag; "key": a key or its hash;
   * "none"), the other fields its body takes (unset: it checks them itself), what it does, and
   * whether this isolate forgets what it cached of that identity once it succeeded, or also
   * when the store failed (the change may have landed): not for a change that can only restrict
   * (a block, a key disabled), whose remembered denial restricts no less than whatever landed, and
   * which, while the store is down, is all that keeps the caller from a fail-open admission.
   */
  type Body = Record<string, unknown>;
  type Forgets = "on-success" | "also-on-failure";
  /** a registry write that disables the key refuses it whatever else it changes */
  const unlessDisabling = (body: Body): Forgets => (body.disabled === true ? "on-success" : "also-on-failure");
  type Route = { takes?: readonly string[] } & (
    | { who: "any" | "key"; forgets?: Forgets | ((body: Body) => Forgets); run: (identity: Identity, body: Body) => Promise<Response> }
    | { who: "none"; run: (body: Body) => Promise<Response> }
  );
  const routes: Record<string, Route> = {
    usage: { who: "any", takes: [], run: async (identity) => json(await usage(identity)) },
    reset: {
      who: "any",
      takes: [],
      forgets: "also-on-failure",
      run: async (identity) => {
        const entry = identity.kind === "k" ? await registry.get(identity) : undefined;
        const unknownKey = unknownKeyPolicy(identity, entry);
        // such a key's requests are refused, or counted as their address: what they spent is the
        // address's to reset, which an answer of 0 keys deleted alone would not tell
        return json({ reset: true, keysDeleted: await redis.del(...logsOf(identity.tag, entry?.tier)), ...(unknownKey && { unknownKey }) });
      },
    },
    block: {
      who: "any",
      takes: ["seconds"],
      // a cached 429 would otherwise answer for the block on this isolate until it lapses (only
      // once the block has landed: see Route)
      forgets: "on-success",
      run: async (identity, body) => {
        const seconds = body.seconds;
        if (typeof seconds !== "number" || !Number.isInteger(seconds) || seconds < 1 || seconds > MAX_BLOCK_SECONDS) {
          return badRequest(`"seconds" must be a whole number from 1 to ${MAX_BLOCK_SECONDS}`);
        }
        // The value (when it ends, on the script's clock) decides; the TTL, a second longer, only collects it.
        const ends = (await clock()) + seconds * 1_000_000;
        await redis.set(redisKeys.block(config.prefix, identity.tag), String(ends), { px: seconds * 1000 + 1000 });
        return json({ blocked: true, seconds });
      },
    },
    unblock: {
      who: "any",
      takes: [],
      forgets: "also-on-failure",
      run: async (identity) => json({ unblocked: (await redis.del(redisKeys.block(config.prefix, identity.tag))) === 1 }),
    },
    // its fields are an entry's, which the registry's check names when it does not know one
    "keys/set": {
      who: "key",
      forgets: unlessDisabling,
      run: async (identity, body) => {
        const { key: _key, hash: _hash, ...fields } = body;
        const checked = registry.check(fields);
        if (!checked.ok) return badRequest(checked.errors.join("; "));
        await registry.put(identity, checked.entry);
        return json({ hash: identity.keyHash, ...checked.entry });
      },
    },
    "keys/get": {
      who: "key",
      takes: [],
      run: async (identity) => {
        const entry = await registry.get(identity);
        return entry ? json({ hash: identity.keyHash, ...entry }) : noEntry();
      },
    },
    // a change of some fields of an entry that exists: one write that a delete cannot race (as a
    // read then a write, the write could bring a deleted key back); what the body leaves out stays
    "keys/update": {
      who: "key",
      takes: ["tier", "label", "disabled"],
      forgets: unlessDisabling,
      run: async (identity, body) => {
        const { key: _key, hash: _hash, ...fields } = body;
        const given = { tier: fields.tier !== undefined, label: fields.label !== undefined, disabled: fields.disabled !== undefined };
        if (!given.tier && !given.label && !given.disabled) return badRequest('Give at least one of "tier", "label" and "disabled" to change.');
        const checked = registry.check(fields);
        if (!checked.ok) return badRequest(checked.errors.join("; "));
        const entry = await registry.update(identity, checked.entry, given);
        return entry ? json({ hash: identity.keyHash, ...entry }) : noEntry();
      },
    },
    "keys/delete": { who: "key", takes: [], forgets: "also-on-failure", run: async (identity) => ((await registry.remove(identity)) ? json({ deleted: true }) : noEntry()) },
    "keys/override": {
      who: "key",
      takes: ["rule", "limit", "window", "windowMs", "clear"],
      forgets: "also-on-failure",
      run: async (identity, body) => {
        const { rule, limit, window, windowMs, clear } = body;
        if (typeof rule !== "string") return badRequest('"rule" must name a rule');
        // a clear asked for in the wrong type ("true") must not be taken for a change of the limit,
        // nor a clear beside a limit for either one: which the operator meant is a guess
        if (clear !== undefined && typeof clear !== "boolean") return badRequest('"clear" must be true or false (true: drop the rule\'s override)');
        if (clear && (limit !== undefined || window !== undefined || windowMs !== undefined)) {
          return badRequest('"clear": true drops the rule\'s override: give it alone, or "limit", "window" (or "windowMs") without it');
        }
        if (clear) {
          const cleared = await registry.override(identity, rule, "clear");
          if (!cleared) return noEntry();
          // a rule no tier has is taken only to drop what a key still holds of it (a rule since
          // dropped, which would come back live with its rule): a misspelt one ("minut") answered
          // "cleared" would leave the real override in place unnoticed. Nothing was dropped.
          if (!cleared.held && !registry.ruleNames.has(rule)) {
            return badRequest(
              `rule: ${JSON.stringify(rule.slice(0, 64))} is not a rule (rules: ${[...registry.ruleNames].join(", ")}), and the key holds no override of it${didYouMean(rule, [...registry.ruleNames])}`,
            );
          }
          return json({ cleared: rule });
        }
        // what the key holds of the other number: a limit given alone counts in the key's own window
        const held = (await registry.get(identity))?.overrides;
        const checked = registry.check({ overrides: { [rule]: { limit, window, windowMs } } }, "", held);
        // checked as an entry's overrides, but the caller sent "rule", "limit" and "window" (or "windowMs"): named as sent
        const at = `overrides.${rule}`;
        const asSent = (e: string) =>
          e.startsWith(`${at}.`)
            ? e.slice(at.length + 1)
            : e.startsWith(`${at}: give`)
              ? `${e.slice(at.length + 2)}, or "clear": true`
              : e.startsWith(`${at}:`)
                ? `rule${e.slice(at.length)}`
                : e;
        if (!checked.ok) return badRequest(checked.errors.map(asSent).join("; "));
        const o = checked.entry.overrides[rule]!;
        return (await registry.override(identity, rule, o)) ? json({ rule, ...o }) : noEntry();
      },
    },
    "keys/list": {
      who: "none",
      takes: ["cursor", "limit"],
      run: async (body) => {
        const { cursor, limit = LIST_PAGE.default } = body;
        if (cursor !== undefined && cursor !== null && (typeof cursor !== "string" || !KEY_HASH.test(cursor))) {
          return badRequest('"cursor" must be the cursor of the page before (a key hash)');
        }
        if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > LIST_PAGE.max) {
          return badRequest(`"limit" must be a whole number from 1 to ${LIST_PAGE.max}`);
        }
        return json(await registry.list(typeof cursor === "string" ? cursor.toLowerCase() : undefined, limit, keyIdentity));
      },
    },
    "keys/import": {
      who: "none",
      takes: ["entries", "check"],
      run: async (body) => {
        const { entries, check } = body;
        // a dry run asked for in the wrong type ("true", 1) must not be taken for an import
        if (check !== undefined && typeof check !== "boolean") return badRequest('"check" must be true or false (true: check the entries, write nothing)');
        if (!Array.isArray(entries) || entries.length === 0 || entries.length > IMPORT_BATCH) {
          return badRequest(`"entries" must be an array of 1 to ${IMPORT_BATCH} entries like {"hash":"…","tier":"…"} (send more in several calls)`);
        }
        const errors: string[] = [];
        const items: { identity: Identity; entry: Entry; given: Given }[] = [];
        // one key twice (as itself, trimmed or not, or as its hash): which wins would be an accident
        const seen = new Map<string, number>();
        for (const [i, raw] of entries.entries()) {
          if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
            errors.push(`entries[${i}]: must be an object`);
            continue;
          }
          const { key, hash, ...fields } = raw as Body;
          const identity = await keyOf(key, hash);
          if (typeof identity === "string") errors.push(`entries[${i}]: ${identity}`);
          else {
            const first = seen.get(identity.keyHash!);
            if (first !== undefined) errors.push(`entries[${i}]: names the same key as entries[${first}]`);
            else seen.set(identity.keyHash!, i);
          }
          const checked = registry.check(fields, `entries[${i}]`);
          if (!checked.ok) errors.push(...checked.errors);
          else if (typeof identity !== "string") {
            items.push({
              identity,
              entry: checked.entry,
              given: { tier: fields.tier !== undefined, label: fields.label !== undefined, disabled: fields.disabled !== undefined, overrides: fields.overrides !== undefined },
            });
          }
        }
        if (errors.length) {
          return badRequest(`Nothing was imported: ${errors.slice(0, 20).join("; ")}${errors.length > 20 ? `; and ${errors.length - 20} more` : ""}`);
        }
        // checked only, nothing written: a client checks a whole file, batch by batch, before it imports any of it
        if (check) return json({ checked: items.length });
        // forgotten even when the store fails, as a write whose answer was lost may have landed;
        // but a key the import disables keeps its cached denial then (see Route)
        try {
          await registry.mergeMany(items);
        } catch (e) {
          for (const { identity, entry } of items) if (!entry.disabled) options.forget?.(identity.tag);
          throw e;
        }
        for (const { identity } of items) options.forget?.(identity.tag);
        return json({ imported: items.length });
      },
    },
  };
  // the console's reads, figures and configuration, each checking its own fields
  for (const [name, run] of Object.entries(consoleRoutes({ config, redis, registry, now: isolateNow }))) routes[name] = { who: "none", run };
  // looked up in a Map: a path like /__slidegate/constructor must not find Object.prototype
  const routeTable = new Map(Object.entries(routes));

  /** The key named by a raw `key` or its SHA-256 `hash`, or what is wrong with them. */
  async function keyOf(key: unknown, hash: unknown): Promise<Identity | string> {
    if ((typeof key === "string") === (typeof hash === "string") || key === "" || hash === "") {
      return 'give exactly one of "key" (the raw API key) or "hash" (its SHA-256, 64 hex digits)';
    }
    if (typeof key === "string") {
      // read as the gate reads the key header (one reading, src/decision/api-key.ts): trimmed as
      // origins trim, never one with a comma (a header sent twice arrives so), and from
      // Authorization the token, given bare or with its scheme
      const read = readKey(config.keyHeader ?? "", key);
      if (read.kind === "absent") return '"key" is blank: give the raw API key';
      if (read.kind === "ambiguous") {
        return key.includes(",")
          ? '"key" holds a comma: the gate refuses such a key as two keys sent at once, so it could never be used'
          : key.includes(";")
            ? '"key" holds a ";": the gate refuses such an Authorization token (Rails reads the token before it), so it could never be used'
            : '"key" holds more than a scheme and a token: the gate refuses such an Authorization header, so it could never be used; give the token';
      }
      // a header holds no line break and no NUL (RFC 9110 §5.5), so no request carries such a key:
      // two keys pasted as one, or a key with a line of a log after it, registered or blocked
      // with a 200 would hold no request at all
      if (/[\r\n\0]/.test(read.key)) return '"key" holds a line break or a NUL inside, which no request\'s header can carry, so it could never be used: give one key';
      return identify("k", read.key);
    }
    if (!KEY_HASH.test(hash as string)) return '"hash" must be the SHA-256 of the key, as 64 hex digits';
    return keyIdentity((hash as string).toLowerCase());
  }

  // with a body, as every other answer of the gate's own: an answer without one waits for the
  // upload to be drained before it is sent (src/gateway/gateway.ts), and a client that uploads
  // piece by piece, waiting to be answered, would wait for ever
  const toConsole = (method: string, location: string = ADMIN_PREFIX) =>
    new Response(method === "HEAD" ? null : `${location}\n`, { status: 308, headers: { Location: location, "Content-Type": "text/plain; charset=utf-8" } });

  return async (request, path) => {
    if (failures.due()) failures.flush();
    // the prefix without its slash is the gate's too: sent on to the console, never to the origin
    if (path.length < ADMIN_PREFIX.length) return toConsole(request.method);
    // the console's page holds no data: every figure it shows is an authenticated call. Served
    // at its one spelling only: under another ("//evil.example/%252e%252e/__slidegate/" is one
    // to the gate), a page that built its calls from its own path would send them elsewhere
    if (path.length === ADMIN_PREFIX.length && (request.method === "GET" || request.method === "HEAD")) {
      const url = new URL(request.url);
      if (url.pathname !== ADMIN_PREFIX) return toConsole(request.method);
      const secure = secureConsoleUrl(url, request.headers.get("cf-connecting-ip"));
      if (secure) return toConsole(request.method, secure);
      return consolePage(request.method);
    }
    const refused = await signIn(request);
    if (refused) return refused;
    const name = path.slice(ADMIN_PREFIX.length).toLowerCase();
    const route = routeTable.get(name);
    if (!route) return notFound();
    if (request.method !== "POST") return problem(405, "method-not-allowed", "Method Not Allowed", "Admin routes take POST with a JSON body.", { Allow: "POST" });
    // no route reads the query: a field sent there (?cursor=…) would be ignored as if left out
    const [parameter] = new URL(request.url).searchParams.keys();
    if (parameter !== undefined) return badRequest(`query parameter ${echo(parameter)}: admin routes take their fields in the JSON body, not in the query.`);
    let body: Record<string, unknown>;
    let text: string;
    try {
      text = await request.text();
      body = JSON.parse(text);
    } catch {
      return badRequest('The body must be JSON like {"key":"…"} or {"ip":"…"}.');
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) return badRequest('The body must be a JSON object like {"key":"…"} or {"ip":"…"}.');
    if (nestsDeeper(body, MAX_BODY_DEPTH)) return badRequest(`The body nests deeper than ${MAX_BODY_DEPTH} levels of objects and arrays, which no admin route takes.`);
    // JSON.parse keeps the last of the two: {"tier":"paid",…,"tier":"free"} would set the one not read first
    const repeated = repeatedField(text, "body");
    if (repeated) return badRequest(`${repeated.at.slice(0, 128)}: names the field ${echo(repeated.field)} twice; send it once.`);
    const unknown = route.takes && unknownFields(body, [...NAMED_BY[route.who], ...route.takes]);
    if (unknown) return badRequest(unknown);
    // Without identity.header the gate reads no API key from any request: a key named here would
    // be blocked, reset or registered for no request at all, and its usage would show rules it never meets.
    if (!config.keyHeader) {
      const keyField = route.who === "any" ? (["key", "hash"] as const).find((f) => body[f] !== undefined) : undefined;
      if (keyField) {
        return badRequest(
          `"${keyField}": no identity.header is configured, so the gate reads no API key and this would concern no request; name the caller by "ip", "user" or "tag".`,
        );
      }
      if (route.who === "key" || name === "keys/import") {
        return badRequest(
          `${name}: no identity.header is configured, so the gate reads no API key and never consults the registry; set identity.header in RATE_LIMITS to manage keys.`,
        );
      }
    }
    let identity: Identity | undefined;
    if (route.who !== "none") {
      const { key, hash, ip, tag, user } = body;
      if (route.who === "any" && tag !== undefined) {
        // an address or a user known only by its tag (the console's figures hold neither)
        if (typeof tag !== "string" || !IDENTITY_TAG.test(tag) || key !== undefined || hash !== undefined || ip !== undefined || user !== undefined) {
          return badRequest(
            '"tag" names an address or an application\'s user by its tag ("i" or "u" and 22 characters, as the figures list it), alone; name an API key by "key" or "hash".',
          );
        }
        identity = { kind: tag[0] as "i" | "u", tag };
      } else if (route.who === "any" && user !== undefined) {
        // an identity the library or the Hono middleware was given by the application (a user id)
        if (typeof user !== "string" || user.trim() === "" || key !== undefined || hash !== undefined || ip !== undefined) {
          return badRequest('"user" names an identity of the application\'s own (as given to limit() or identify), alone, as a non-empty string.');
        }
        identity = await identify("u", user);
      } else if (route.who === "any" && typeof ip === "string" && ip !== "" && key === undefined && hash === undefined) {
        // an address some read as another (192.000.002.077 is 192.0.2.63 to inet_aton) names nobody for sure
        const ambiguous = ambiguousAddress(ip);
        if (ambiguous) return badRequest(`"ip": ${ambiguous}.`);
        // not an address: it would name the one bucket every unreadable address shares (its tag does, on purpose)
        if (!parseAddress(ip)) return badRequest(`"ip": ${JSON.stringify(ip.slice(0, 64))} is not an IP address.`);
        identity = await identify("i", ipIdentity(ip, config.ipv6Prefix));
      } else if (route.who === "any" && ip !== undefined) {
        return badRequest(NAME_ONE);
      } else {
        const found = await keyOf(key, hash);
        if (typeof found === "string") {
          const nothing = route.who === "any" && key === undefined && hash === undefined;
          return badRequest(nothing ? NAME_ONE : `${found[0]!.toUpperCase()}${found.slice(1)}.`);
        }
        identity = found;
      }
    }
    let response: Response;
    try {
      response = route.who === "none" ? await route.run(body) : await route.run(identity!, body);
    } catch (e) {
      // a change whose answer never came back (cut, late) may have landed all the same: this
      // isolate forgets as if it had, which costs at most one store read (not after a change
      // that only restricts: see Route)
      if (route.who !== "none" && (typeof route.forgets === "function" ? route.forgets(body) : route.forgets) === "also-on-failure") options.forget?.(identity!.tag);
      // a bug is the gate's 500; only the store's own failures are a 503, without its words
      if (!isStoreFailure(e)) throw e;
      if (e instanceof errors.UpstashError && WRONG_TYPE.test(e.message)) return wrongType();
      failures.record({ route: name, error: e instanceof Error ? e.message : String(e) });
      return storeFailed();
    }
    if (response.ok && route.who !== "none" && route.forgets) options.forget?.(identity!.tag);
    return response;
  };
}
