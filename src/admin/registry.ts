import { errors, type Redis } from "@upstash/redis/cloudflare";
import * as v from "valibot";
import { didYouMean } from "../config/nearest.ts";
import { DENSE_WHY, describe, type GateConfig, isName, MAX_PER_MS, reservedKeys, tooDense, valueSchemas } from "../config/rate-limits.ts";
import type { Identity } from "../decision/identity.ts";
import { NAME_PATTERN, redisKeys } from "../script/limiter.ts";
import { unknownField } from "./unknown-fields.ts";

/**
 * The key registry: an API key's tier, its own limits and windows per rule, a disabled flag
 * and a label, kept in Redis and managed at runtime. An entry is a hash under the key's own
 * hash tag (`<prefix>:{<tag>}:key`), so the decision script reads it in the same call that
 * decides; keys appear only as their SHA-256. The index `<prefix>:keys` (a sorted set of the
 * hashes) lists entries in pages without scanning the keyspace, which a cluster cannot do in
 * one call.
 *
 * @example
 * const registry = createRegistry({ config, redis });
 * const checked = registry.check({ tier: "paid", overrides: { minute: { limit: 500 } } });
 * if (checked.ok) await registry.put(identity, checked.entry);
 */

export interface Override {
  limit?: number;
  windowMs?: number;
}

export interface Entry {
  /** the key's tier (the configuration's default tier when the entry was written without one) */
  tier: string;
  label?: string;
  disabled: boolean;
  /** rule name → the key's own limit and window (ms) */
  overrides: Record<string, Override>;
}

export type Checked = { ok: true; entry: Entry } | { ok: false; errors: string[] };

/** Which fields of an entry a request gave (the rest took their defaults). */
export interface Given {
  tier: boolean;
  label: boolean;
  disabled: boolean;
  overrides: boolean;
}

/** The most entries one import carries: each is a hash write and an index write. */
export const IMPORT_BATCH = 1000;
export const LIST_PAGE = { max: 1000, default: 100 } as const;

const LABEL = v.pipe(v.string("must be text"), v.maxLength(200, "must be at most 200 characters"));
// "windowMs" beside "window": every answer (keys/get, keys/list) spells an override's window so,
// and what keys/list answers must import as it stands, or a backup restored would be refused
const overrideSchema = v.strictObject({ limit: v.optional(valueSchemas.limit), window: v.optional(valueSchemas.window), windowMs: v.optional(valueSchemas.windowMs) }, (issue) =>
  issue.expected === "never" ? unknownField(issue.input, ["limit", "window", "windowMs"]) : `must be an object, not ${issue.received}`,
);
// strict, as RATE_LIMITS is: a misspelt field ("disable") dropped in silence would write an
// entry without it, and keys/set replaces the whole entry (a disabled key enabled again)
const entrySchema = v.strictObject(
  {
    tier: v.optional(valueSchemas.name),
    label: v.optional(LABEL),
    disabled: v.optional(v.boolean("must be true or false")),
    overrides: v.optional(v.record(valueSchemas.name, overrideSchema, "must be an object of rule names")),
  },
  (issue) => (issue.expected === "never" ? unknownField(issue.input, ["tier", "label", "disabled", "overrides"]) : `must be an object, not ${issue.received}`),
);

/**
 * An issue of the entry's schema as `describe` words it, each name in its path cut to 64
 * characters, as every admin route names a field it does not take: a name sent by mistake may be
 * a raw key (`{"key":"…","sk-live-…":"paid"}`), or a megabyte of text echoed back.
 */
const described = (issue: v.BaseIssue<unknown>, root: string) =>
  describe({ ...issue, path: issue.path?.map((item) => (typeof item.key === "string" ? { ...item, key: item.key.slice(0, 64) } : item)) as typeof issue.path }, root);

const FIELD = { tier: "tier", label: "label", disabled: "disabled", limit: (rule: string) => `limit:${rule}`, window: (rule: string) => `window:${rule}` };

/**
 * The replies of a pipeline of entry reads, each on its own: an entry key holding a value of
 * another type (written by hand, or by another application on the prefix) is no entry, as the
 * script reads it. Refused whole, one such key failed every list page it falls in (and every
 * list --all backup) and the console's figures whenever it was among the top refused keys,
 * with a 409 whose advice names no key to delete.
 */
async function entriesRead(p: ReturnType<Redis["pipeline"]>): Promise<unknown[]> {
  return (await p.exec({ keepErrors: true })).map(({ result, error }) => {
    if (error === undefined) return result;
    if (!/^WRONGTYPE/.test(error)) throw new errors.UpstashError(error);
    return undefined;
  });
}

/** HSET of ARGV's field-value pairs into an entry that exists: 1, or 0 when there is none. */
const SET_IF_HELD = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end redis.call('HSET', KEYS[1], unpack(ARGV)) return 1";
/**
 * An import's write of one entry that names no tier: ARGV[1] (the default tier) set only where
 * the entry has none, then the field-value pairs after it, in one script: as two commands, a
 * store that filled up between them would keep the first alone, a new entry of the default
 * tier, enabled, for a key the import meant to disable. A script that has not yet written is refused
 * whole by a full store, and one that has runs to its end. An entry that names nothing but its
 * key has no pairs: HSET would refuse to be called without one. The pairs go in HSETs of at most
 * 1,000 pairs each: Lua unpacks at most about 8,000 values, and an entry overriding both numbers
 * of every rule of a full list (3,000) has 12,000.
 */
const MERGE_KEEPING_TIER =
  "redis.call('HSETNX', KEYS[1], 'tier', ARGV[1]) for i = 2, #ARGV, 2000 do redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 1999, #ARGV))) end return 1";
/**
 * Changes some fields of an entry that exists, in one script: ARGV[1] is the count n of the
 * field-value pairs' arguments to HSET that follow, then fields to HDEL. Answers the entry as
 * it is after the change, or 0 when there is none. As a read, then a write, a delete between
 * them would be undone: the write would make the deleted (revoked) key an entry again, enabled.
 */
const UPDATE_IF_HELD =
  "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end local n = tonumber(ARGV[1]) if n > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, 2, n + 1)) end if #ARGV > n + 1 then redis.call('HDEL', KEYS[1], unpack(ARGV, n + 2)) end return redis.call('HGETALL', KEYS[1])";
/**
 * An import's entry made whole, once every write of the import has landed: ARGV[1] is "1" when
 * the import replaces the key's overrides, ARGV[2] the count n of the field-value pairs'
 * arguments that follow (the entry's writes, set again), then the fields it drops. With
 * ARGV[1] "1", every override field the entry holds now and the import does not set goes too,
 * those written meanwhile included. In one script, the entry is the import applied after any
 * change another operator made since its writes, never part of each; an entry deleted since
 * stays deleted (0). A full store refuses it whole: its first write is the HSET.
 */
const COMPLETE_MERGE = `if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = tonumber(ARGV[2])
for i = 3, n + 2, 1000 do redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, n + 2))) end
local drop = {}
for i = n + 3, #ARGV do drop[#drop + 1] = ARGV[i] end
if ARGV[1] == '1' then
  local set = {}
  for i = 3, n + 2, 2 do set[ARGV[i]] = true end
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    if not set[f] and (string.sub(f, 1, 6) == 'limit:' or string.sub(f, 1, 7) == 'window:') then drop[#drop + 1] = f end
  end
end
for i = 1, #drop, 1000 do redis.call('HDEL', KEYS[1], unpack(drop, i, math.min(i + 999, #drop))) end
return 1`;
/** HDEL of ARGV's fields from an entry that exists: 1 and the count of fields it dropped, or 0 when there is none. */
const CLEAR_IF_HELD = "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end return 1 + redis.call('HDEL', KEYS[1], unpack(ARGV))";

/** HGETALL's answer as fields, whether the client hands it over as pairs or as an object. */
function fieldsFrom(raw: unknown): Record<string, string> {
  if (Array.isArray(raw)) {
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < raw.length; i += 2) fields[String(raw[i])] = String(raw[i + 1]);
    return fields;
  }
  return raw && typeof raw === "object" ? (raw as Record<string, string>) : {};
}

/** An entry from its Redis fields (the reverse of `fieldsOf`). */
function entryOf(fields: Record<string, string>): Entry {
  // in the order keys/set answers with, so an entry reads the same from every route
  // an empty or blank label (written by hand, or before "" meant none) is none, as the admin API writes it;
  // a tier that is no name (written by hand) is none, as the script reads it: the key's
  // configured tier decides
  const tier = fields.tier !== undefined && NAME_PATTERN.test(fields.tier) ? fields.tier : "";
  const entry: Entry = { tier, ...(fields.label?.trim() && { label: fields.label }), disabled: fields.disabled === "1", overrides: {} };
  for (const [field, value] of Object.entries(fields)) {
    const m = /^(limit|window):(.+)$/.exec(field);
    // a name no rule can have (written by hand: the admin API refuses it) is no override, as the
    // script reads it; and "__proto__" read into the overrides would set every object's limit
    if (!m || !isName(m[2]!)) continue;
    // likewise a value the admin API never writes (a whole limit up to 1,000,000, a whole window
    // up to 366 days): the script decides by the configured rule, and so must the entry read
    const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
    if (!v.is(m[1] === "limit" ? valueSchemas.limit : valueSchemas.windowMs, n)) continue;
    entry.overrides[m[2]!] ??= {};
    const o = entry.overrides[m[2]!]!;
    if (m[1] === "limit") o.limit = n;
    else o.windowMs = n;
  }
  return entry;
}

export function fieldsOf(entry: Entry): Record<string, string> {
  // What the decision script reads (tier, disabled, a rule's limit and window), and the label:
  // the key's hash is in the index already, and here it would double the entry's memory.
  // Never empty (Redis keeps no empty hash): every entry has its tier.
  const fields: Record<string, string> = { [FIELD.tier]: entry.tier };
  if (entry.label !== undefined) fields[FIELD.label] = entry.label;
  if (entry.disabled) fields[FIELD.disabled] = "1";
  for (const [rule, o] of Object.entries(entry.overrides)) {
    if (o.limit !== undefined) fields[FIELD.limit(rule)] = String(o.limit);
    if (o.windowMs !== undefined) fields[FIELD.window(rule)] = String(o.windowMs);
  }
  return fields;
}

/**
 * Most bytes of commands one store request carries: a quarter of the shim's default body limit
 * and of Upstash's smallest request size limit (1 MB). A batch of the largest entries an import
 * takes (labels of 200 characters of 3 bytes, overrides of many rules) is several times that:
 * in one pipeline the store would refuse it whole, a valid import answered as a store failure.
 */
const REQUEST_BYTES = 256 * 1024;

/** Hashes listed again by one ZADD after an import's writes: about 70 KB of arguments. */
const RELIST_MEMBERS = 1000;
const utf8 = new TextEncoder();

type Pipeline = ReturnType<Redis["pipeline"]>;

/** Commands in pipelines of at most REQUEST_BYTES each (about: their arguments' JSON), sent in order, one after another. */
function inRequests(redis: Redis) {
  const pipelines: Pipeline[] = [];
  let bytes = Number.POSITIVE_INFINITY;
  return {
    /** `commands` adds an item's commands to the pipeline with room for `args` (what they carry). */
    add(args: unknown, commands: (p: Pipeline) => void) {
      const size = utf8.encode(JSON.stringify(args)).length + 128;
      if (bytes + size > REQUEST_BYTES) {
        pipelines.push(redis.pipeline());
        bytes = 0;
      }
      bytes += size;
      commands(pipelines.at(-1)!);
    },
    async exec() {
      for (const p of pipelines) await p.exec();
    },
  };
}

export function createRegistry({ config, redis }: { config: GateConfig; redis: Redis }) {
  const index = `${config.prefix}:keys`;
  const entryKey = (identity: Identity) => redisKeys.entry(config.prefix, identity.tag);
  // every rule name of every tier: an override must name one (a rule added later can take one then)
  const ruleNames = new Set([...config.tiers.values()].flatMap((rules) => rules.map((r) => r.name)));
  // per rule name, the largest cost it has in any tier: a limit below it would admit nothing
  const costs = new Map<string, number>();
  for (const rules of config.tiers.values()) for (const r of rules) costs.set(r.name, Math.max(costs.get(r.name) ?? 1, r.cost));
  // per rule name, its limit and window in each tier that has it
  const configured = new Map<string, { tier: string; limit: number; windowMs: number }[]>();
  for (const [tier, rules] of config.tiers) for (const r of rules) configured.set(r.name, [...(configured.get(r.name) ?? []), { tier, limit: r.limit, windowMs: r.windowMs }]);

  /**
   * A key's own limit and window of `rule` (`o`; where it gives one alone, `held`: what the key
   * holds of the other) that would count more than a log can (see `tooDense`) with the rule's
   * numbers in any tier, named by the field given (`field`). Overrides belong to rule names, not
   * tiers: a key moved to another tier takes them to its rule of that name.
   */
  const denseErrors = (rule: string, o: Override, field: { limit: string; window: string }, held: Override = {}): string[] => {
    if (o.limit === undefined && o.windowMs === undefined) return [];
    const named = o.limit !== undefined ? field.limit : field.window;
    const limit = o.limit ?? held.limit;
    const windowMs = o.windowMs ?? held.windowMs;
    const pairs =
      limit !== undefined && windowMs !== undefined
        ? [{ limit, windowMs, whose: o.limit === undefined ? " (the key's own limit)" : o.windowMs === undefined ? " (the key's own window)" : "" }]
        : (configured.get(rule) ?? []).map((r) => ({
            limit: limit ?? r.limit,
            windowMs: windowMs ?? r.windowMs,
            whose: ` (the ${limit === undefined ? "limit" : "window"} of "${rule}" in tier "${r.tier}")`,
          }));
    for (const p of pairs) {
      const most = tooDense(p.limit, p.windowMs);
      if (most !== undefined) return [`${named}: ${p.limit} in ${p.windowMs} ms${p.whose} is more than ${MAX_PER_MS} per millisecond of the window: ${DENSE_WHY} than ${most}`];
    }
    return [];
  };

  return {
    /**
     * Validates an entry as the admin API receives it; every error names its field from `root`
     * (none: the field alone). `held`: the overrides the key holds, which those given change
     * rather than replace (`keys/override`: a limit given alone counts in the key's own window).
     */
    check(raw: unknown, root = "", held: Record<string, Override> = {}): Checked {
      // "root.field", or "field" at the top of a body: never ".field", which names nothing the caller sent
      const named = (errors: string[]) => (root ? errors : errors.map((e) => e.replace(/^\./, "")));
      const reserved = reservedKeys(raw, root);
      if (reserved.length) return { ok: false, errors: named(reserved) };
      const parsed = v.safeParse(entrySchema, raw);
      if (!parsed.success) return { ok: false, errors: named(parsed.issues.map((issue) => described(issue, root))) };
      const { tier, label, disabled, overrides = {} } = parsed.output;
      const errors: string[] = [];
      if (tier !== undefined && !config.tiers.has(tier))
        errors.push(`${root}.tier: "${tier}" is not a tier (tiers: ${[...config.tiers.keys()].join(", ")})${didYouMean(tier, [...config.tiers.keys()])}`);
      // an empty (or blank) label is none: given so, it clears the one the entry had (`label <key> ""`)
      const entry: Entry = { tier: tier ?? config.defaultTier, label: label?.trim() ? label : undefined, disabled: disabled ?? false, overrides: {} };
      for (const [rule, o] of Object.entries(overrides)) {
        if (!ruleNames.has(rule)) errors.push(`${root}.overrides.${rule}: "${rule}" is not a rule (rules: ${[...ruleNames].join(", ")})${didYouMean(rule, [...ruleNames])}`);
        if (o.window !== undefined && o.windowMs !== undefined) {
          errors.push(`${root}.overrides.${rule}.windowMs: is "window" in milliseconds: give one of them, not both`);
        }
        const window = o.window ?? o.windowMs;
        if (o.limit === undefined && window === undefined) errors.push(`${root}.overrides.${rule}: give "limit", "window" or both`);
        const cost = costs.get(rule) ?? 1;
        if (o.limit !== undefined && o.limit < cost) errors.push(`${root}.overrides.${rule}.limit: ${o.limit} is below the rule's cost (${cost}): no request would ever fit`);
        const at = `${root}.overrides.${rule}`;
        errors.push(
          ...denseErrors(rule, { limit: o.limit, windowMs: window }, { limit: `${at}.limit`, window: `${at}.${o.window !== undefined ? "window" : "windowMs"}` }, held[rule]),
        );
        entry.overrides[rule] = { limit: o.limit, windowMs: window };
      }
      return errors.length ? { ok: false, errors: named(errors) } : { ok: true, entry };
    },

    /**
     * Creates or replaces the entry of a key. The entry is replaced in one transaction: in a
     * pipeline, a decision could read it between the DEL and the HSET (a disabled key let
     * through), and a store that fills up between them refuses the HSET after the DEL has run
     * (the entry lost). A full store refuses the whole transaction instead. The index comes
     * first (another slot of a cluster, so not in the transaction): an entry is never
     * written that the list cannot find. And again after it: a delete that runs between the
     * two (its DEL, then its ZREM) would otherwise leave the entry written last unlisted.
     */
    async put(identity: Identity, entry: Entry): Promise<void> {
      const listed = () => redis.zadd(index, { score: 0, member: identity.keyHash! });
      await listed();
      const t = redis.multi();
      t.del(entryKey(identity));
      t.hset(entryKey(identity), fieldsOf(entry));
      await t.exec();
      await listed();
    },

    async get(identity: Identity): Promise<Entry | undefined> {
      const fields = fieldsFrom(await redis.hgetall(entryKey(identity)));
      return Object.keys(fields).length ? entryOf(fields) : undefined;
    },

    /** The entries of many keys in one pipeline, in their order (undefined where a key has none). */
    async getMany(identities: readonly Identity[]): Promise<(Entry | undefined)[]> {
      if (identities.length === 0) return [];
      const p = redis.pipeline();
      for (const identity of identities) p.hgetall(entryKey(identity));
      return (await entriesRead(p)).map((raw) => {
        const fields = fieldsFrom(raw);
        return Object.keys(fields).length ? entryOf(fields) : undefined;
      });
    },

    /**
     * true when there was an entry to delete. The index first: a store runs a pipeline's commands
     * one by one, and a put() or an import landing between a DEL and a ZREM would have its entry
     * written, then unlisted. After the ZREM, whatever writes the entry lists it again after
     * writing it (put's second ZADD, the import's `relist`); what this leaves at worst is a hash
     * listed with no entry, which list() skips.
     */
    async remove(identity: Identity): Promise<boolean> {
      const p = redis.pipeline();
      p.zrem(index, identity.keyHash!);
      p.del(entryKey(identity));
      const [, deleted] = (await p.exec()) as [number, number];
      return deleted === 1;
    },

    /**
     * Changes what `given` names of an existing entry (its tier, label, disabled flag) and keeps
     * the rest; the entry as it is then, or undefined when there is none (nothing is written).
     */
    async update(identity: Identity, entry: Entry, given: Omit<Given, "overrides">): Promise<Entry | undefined> {
      const set: string[] = [];
      const drop: string[] = [];
      if (given.tier) set.push(FIELD.tier, entry.tier);
      if (given.label && entry.label !== undefined) set.push(FIELD.label, entry.label);
      else if (given.label) drop.push(FIELD.label);
      if (given.disabled && entry.disabled) set.push(FIELD.disabled, "1");
      else if (given.disabled) drop.push(FIELD.disabled);
      const after = await redis.eval(UPDATE_IF_HELD, [entryKey(identity)], [String(set.length), ...set, ...drop]);
      if (after === 0) return undefined;
      if (!Array.isArray(after)) throw new errors.UpstashError("the store answered the entry's update with no entry");
      return entryOf(fieldsFrom(after));
    },

    /** Every rule name of every tier: an override must name one. */
    ruleNames: ruleNames as ReadonlySet<string>,

    /**
     * Sets (or, with `clear`, drops) one rule's override of an existing entry; false when there
     * is no entry. A clear answers whether the entry held an override of the rule.
     */
    async override(identity: Identity, rule: string, o: Override | "clear"): Promise<false | { held: boolean }> {
      // the check and the change in one script: an EXISTS, then an HSET, would let a delete
      // between them leave an entry of overrides alone — unlisted, and holding its limits for the
      // deleted key (an unknown key in the default tier gets them)
      const fields: string[] = [];
      if (o === "clear") fields.push(FIELD.limit(rule), FIELD.window(rule));
      else {
        if (o.limit !== undefined) fields.push(FIELD.limit(rule), String(o.limit));
        if (o.windowMs !== undefined) fields.push(FIELD.window(rule), String(o.windowMs));
      }
      const answer = Number(await redis.eval(o === "clear" ? CLEAR_IF_HELD : SET_IF_HELD, [entryKey(identity)], fields));
      return answer >= 1 && { held: answer > 1 };
    },

    /** A page of entries in the order of their hashes, after `cursor` (the last hash of the page before). */
    async list(cursor: string | undefined, limit: number, tagOf: (hash: string) => Identity) {
      const hashes: unknown = await redis.zrange(index, cursor ? `(${cursor}` : "-", "+", { byLex: true, offset: 0, count: limit });
      // a reply no ZRANGE gives (nil, a number) is the store's failure, not a bug of the gate's
      if (!Array.isArray(hashes) || !hashes.every((h) => typeof h === "string")) throw new errors.UpstashError("the store answered the index's ZRANGE with no list of hashes");
      if (hashes.length === 0) return { entries: [], cursor: null };
      const p = redis.pipeline();
      for (const hash of hashes) p.hgetall(entryKey(tagOf(hash)));
      const found = await entriesRead(p);
      return {
        // a hash whose entry is gone (deleted between the two reads, or an index write that
        // outlived its entry's) is no entry: listed, it would read as a key with no tier. The
        // cursor still follows the index, so the next page starts after it all the same.
        entries: hashes.flatMap((hash, i) => {
          const fields = fieldsFrom(found[i]);
          return Object.keys(fields).length ? [{ hash, ...entryOf(fields) }] : [];
        }),
        cursor: hashes.length === limit ? hashes.at(-1)! : null,
      };
    },

    /**
     * Merges many entries into the registry in one pipeline (each validated by the caller):
     * what `given` names is set — `overrides` as a whole, replacing the key's (`{}` drops them
     * all) — the rest of an existing entry is kept, and a new entry without a tier gets the
     * default one. So an import sent again never re-enables a key disabled meanwhile, nor
     * drops its overrides, unless it says so.
     */
    async mergeMany(items: readonly { identity: Identity; entry: Entry; given: Given }[]): Promise<void> {
      // Writes first, removals only once every write has landed: a store that fills up during
      // the import refuses the writes (HSET needs memory) but not the removals (HDEL frees it),
      // so in one pipeline a refused import would still drop overrides and re-enable keys.
      // Stopped before the removals, it leaves new values beside old ones, never an entry
      // with less than it had; sent again, it completes. An entry's removals come with its
      // writes again, in one script (`COMPLETE_MERGE`): as removals alone, an entry another
      // operator replaced meanwhile (keys/set, disabled) would keep that write's tier and lose
      // its disabled flag, a mix of the two no order of them gives.
      const writes = inRequests(redis);
      const completions = inRequests(redis);
      for (const { identity, entry, given } of items) {
        const key = entryKey(identity);
        const fields: Record<string, string> = {};
        if (given.tier) fields[FIELD.tier] = entry.tier;
        if (given.label && entry.label !== undefined) fields[FIELD.label] = entry.label;
        for (const [rule, o] of Object.entries(entry.overrides)) {
          if (o.limit !== undefined) fields[FIELD.limit(rule)] = String(o.limit);
          if (o.windowMs !== undefined) fields[FIELD.window(rule)] = String(o.windowMs);
        }
        if (given.disabled && entry.disabled) fields[FIELD.disabled] = "1";
        writes.add([key, fields, given.tier ? "" : MERGE_KEEPING_TIER], (p) => {
          // the index first, as put() writes it: an entry is never written that the list cannot find
          p.zadd(index, { score: 0, member: identity.keyHash! });
          // the entry in one write, refused whole or made whole; a new one gets its tier with the
          // rest (the default tier where none is given), so none is ever read without one
          if (given.tier) p.hset(key, fields);
          else p.eval(MERGE_KEEPING_TIER, [key], [entry.tier, ...Object.entries(fields).flat()]);
        });
        // what the entry must lose: the flags the import clears, and (the overrides given replace
        // the key's) every override the script finds that the import does not set
        const drop: string[] = [];
        if (given.disabled && !entry.disabled) drop.push(FIELD.disabled);
        if (given.label && entry.label === undefined) drop.push(FIELD.label);
        if (!drop.length && !given.overrides) continue;
        const pairs = Object.entries(fields).flat();
        const args = [given.overrides ? "1" : "0", String(pairs.length), ...pairs, ...drop];
        completions.add([key, args], (p) => p.eval(COMPLETE_MERGE, [key], args));
      }
      await writes.exec();
      // listed again once written, as put() does: a delete landing between an entry's ZADD and
      // its write (a pipeline's commands run one by one) would otherwise leave it unlisted
      // (in ZADDs of many members: a hosted store bills by the command)
      const relist = inRequests(redis);
      for (let at = 0; at < items.length; at += RELIST_MEMBERS) {
        const [first, ...rest] = items.slice(at, at + RELIST_MEMBERS).map(({ identity }) => ({ score: 0, member: identity.keyHash! }));
        relist.add(
          rest.map((m) => m.member),
          (p) => p.zadd(index, first!, ...rest),
        );
      }
      await relist.exec();
      await completions.exec();
    },
  };
}

export type Registry = ReturnType<typeof createRegistry>;
