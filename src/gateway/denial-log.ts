/**
 * Refusals logged per identity, not per request: under a flood of callers who are over their
 * limit (denied), blocked by the operator, or turned away before any rule (the deny list, an
 * API key missing, repeated, unknown or disabled), the log grows with the number of
 * identities, not with the number of requests. So do shadow denials (requests admitted that a
 * shadow rule would have denied): rolling a limit out in shadow on a busy API would otherwise
 * log every request it would refuse.
 *
 * - The first denial (or shadow denial) of an identity by a rule is written in full; further
 *   ones of that identity by that rule are only counted until the rule's window has passed
 *   since that line.
 *   A blocked identity is written in full once per interval. A request turned away before any
 *   rule is only counted: its answer (400, 401 or 403) says all there is to say.
 * - Every `intervalMs` (when the caller asks: `due()`, then `flush()`), one summary line per
 *   identity carries the exact number of its requests refused since the last summary, the ones
 *   written in full included, and for a denial how many of them each rule denied (a request
 *   two rules denied counts once, and under both rules). Summing `denied` (or `blocked`) over
 *   the summary lines gives every refused request, once. An identity's count runs from when
 *   it was last named: what it had before the half refused least made room is in `other`.
 * - The identities refused most are the ones named: at most `maxSummaries` summary lines per
 *   flush, the rest counted together in one `other` line per outcome. Memory is bounded: at
 *   most `maxTracked` identities are counted by name; when a new one comes past that, the half
 *   refused least so far goes to `other`, so a flood of decoys cannot keep the identity that
 *   floods most from being named. At most `maxTracked` identity-rule pairs are remembered as
 *   written in full; pairs past that are counted, not written in full (a flood of new
 *   identities cannot turn back into a line per request).
 *
 * Lines:
 *   { event: "slidegate.denied", tag, tier, rules: [names], ...detail }
 *   { event: "slidegate.blocked", tag, tier, ...detail }
 *   { event: "slidegate.shadow_denied", tag, tier, rules: [names] }
 *   { event: "slidegate.denied_summary", tag, tier, denied, rules: { name: count }, from, to }
 *   { event: "slidegate.blocked_summary", tag, tier, blocked, blockedForMs, from, to }
 *   { event: "slidegate.shadow_denied_summary", tag, tier, shadowDenied, rules: { name: count }, from, to }
 *   { event: "slidegate.refused_summary", reason, tag, tier, refused, from, to }
 *   { event: "slidegate.denied_summary" | "slidegate.blocked_summary" | "slidegate.shadow_denied_summary", other: true, denied | blocked | shadowDenied, from, to }
 *   { event: "slidegate.refused_summary", other: true, reason, refused, from, to }
 * `from` and `to` (ISO 8601) span the refusals a flush counts.
 *
 * @example
 * const denials = createDenialLog({ write: (line) => console.warn(JSON.stringify(line)) });
 * // each denial:
 * denials.record({ tag: identity.tag, tier, rules: [{ name: "minute", windowMs: 60_000 }], detail: { retryAfterMs } });
 * // after each request, so the summary is written once the response is on its way:
 * if (denials.due()) ctx.waitUntil(denials.flush());
 */

export interface DeniedRule {
  name: string;
  /** the rule's window: its first denial of an identity is written in full once per window */
  windowMs: number;
}

/** Turned away before any rule: the deny list, or the API key (none where one is required, sent twice, unknown, disabled). */
export type TurnedAway = "denylisted" | "ambiguous-key" | "key-required" | "unknown-key" | "disabled-key";

/** What the log counts: refusals, and shadow denials (admitted, but a shadow rule would have denied them). */
export type Refusal = "denied" | "blocked" | "shadow-denied" | TurnedAway;

export interface Denial {
  /** "denied" (by rules: the default), "blocked" (by the operator), or turned away before any rule */
  outcome?: Refusal;
  /** the identity's hashed tag (never a raw key or IP) */
  tag: string;
  tier: string;
  /** the enforced rules that denied the request (none for a block) */
  rules: readonly DeniedRule[];
  /** more fields for the full line (retry-after, whether the denial cache answered, …) */
  detail?: Record<string, unknown>;
}

export interface DenialLogOptions {
  /** where lines go, one object per line */
  write: (line: Record<string, unknown>) => void;
  /** the clock, in ms (default Date.now) */
  now?: () => number;
  /** how often summaries are due, in ms (default 60 s) */
  intervalMs?: number;
  /** identities counted by name, and identity-rule pairs remembered as written in full (default 1,000 each) */
  maxTracked?: number;
  /** summary lines naming an identity per flush, the most refused first (default 200) */
  maxSummaries?: number;
}

export interface DenialLog {
  /** counts one refused request, and writes it in full when it is its identity's first by a rule in that rule's window */
  record(denial: Denial): void;
  /** true once a summary has waited `intervalMs` since the first refusal it counts */
  due(): boolean;
  /** writes the summaries now and starts counting afresh; resolves once they are written */
  flush(): Promise<void>;
  /** whether refusals are counted that no summary has written yet */
  readonly pending: boolean;
  /** identities and identity-rule pairs held in memory (at most twice `maxTracked`) */
  readonly tracked: number;
}

const DENIAL_LOG_DEFAULTS = { intervalMs: 60_000, maxTracked: 1000, maxSummaries: 200 } as const;

interface Count {
  outcome: Refusal;
  tag: string;
  tier: string;
  /** refused requests */
  requests: number;
  /** rule → the requests it denied */
  rules: Map<string, number>;
  /** a block: what was left of it at its latest request (ms; null: without end) */
  blockedForMs?: number | null;
}

/** A summary line: the count under the outcome's own name. */
function summary(outcome: Refusal, requests: number, fields: Record<string, unknown>): Record<string, unknown> {
  if (outcome === "denied") return { event: "slidegate.denied_summary", ...fields, denied: requests };
  if (outcome === "blocked") return { event: "slidegate.blocked_summary", ...fields, blocked: requests };
  if (outcome === "shadow-denied") return { event: "slidegate.shadow_denied_summary", ...fields, shadowDenied: requests };
  return { event: "slidegate.refused_summary", reason: outcome, ...fields, refused: requests };
}

export function createDenialLog(options: DenialLogOptions): DenialLog {
  const { write } = options;
  const now = options.now ?? Date.now;
  const intervalMs = options.intervalMs ?? DENIAL_LOG_DEFAULTS.intervalMs;
  const cap = Math.max(2, options.maxTracked ?? DENIAL_LOG_DEFAULTS.maxTracked);
  const maxSummaries = options.maxSummaries ?? DENIAL_LOG_DEFAULTS.maxSummaries;
  /** pair → until when its refusals are only counted (its full line was written in this window) */
  const quiet = new Map<string, number>();
  /** identity → refusals since the last summary */
  let counts = new Map<string, Count>();
  /** per outcome: refusals counted without a name */
  const other = new Map<Refusal, number>();
  const countOther = (outcome: Refusal, requests: number) => other.set(outcome, (other.get(outcome) ?? 0) + requests);
  let from = 0;
  let to = 0;

  // The keys of the identity recorded last, and of its pairs with rules: a flood from one
  // caller records the same ones request after request, and the same strings again are looked
  // up without being built and hashed again.
  let last: { outcome: Refusal; tag: string; tier: string; key: string; pairs: Map<string, string> } | undefined;
  const keysOf = (outcome: Refusal, tag: string, tier: string) => {
    if (last?.outcome !== outcome || last.tag !== tag || last.tier !== tier) last = { outcome, tag, tier, key: `${outcome}|${tag}|${tier}`, pairs: new Map() };
    return last;
  };
  const pairOf = (keys: NonNullable<typeof last>, name: string) => {
    let pair = keys.pairs.get(name);
    if (pair === undefined) {
      pair = `${keys.key}|${name}`;
      keys.pairs.set(name, pair);
    }
    return pair;
  };

  const iso = (ms: number) => new Date(ms).toISOString();
  const empty = () => counts.size === 0 && other.size === 0;

  /** Room for a new identity: the half refused least so far (the older first among equals) is counted as other. */
  function makeRoom() {
    const ranked = [...counts.entries()].sort((a, b) => a[1].requests - b[1].requests);
    const dropped = ranked.slice(0, Math.floor(cap / 2));
    for (const [, c] of dropped) countOther(c.outcome, c.requests);
    const kept = new Set(ranked.slice(dropped.length).map(([key]) => key));
    counts = new Map([...counts].filter(([key]) => kept.has(key)));
  }

  /** Whether the pair's full line is due now; remembers it as written when it is. */
  function writeInFull(pair: string, windowMs: number, at: number): boolean {
    const until = quiet.get(pair);
    if (until !== undefined && until > at) return false;
    if (until === undefined && quiet.size >= cap) return false; // no room to remember it: counted, not written
    quiet.set(pair, at + windowMs);
    return true;
  }

  return {
    record({ outcome = "denied", tag, tier, rules, detail }) {
      const at = now();
      if (empty()) from = at;
      to = at;
      const keys = keysOf(outcome, tag, tier);
      const { key } = keys;
      let count = counts.get(key);
      if (!count) {
        if (counts.size >= cap) makeRoom();
        count = { outcome, tag, tier, requests: 0, rules: new Map() };
        counts.set(key, count);
      }
      count.requests++;
      for (const { name } of rules) count.rules.set(name, (count.rules.get(name) ?? 0) + 1);

      if (outcome === "blocked") {
        if (detail && "blockedForMs" in detail) count.blockedForMs = detail.blockedForMs as number | null;
        if (writeInFull(key, intervalMs, at)) write({ ...detail, event: "slidegate.blocked", tag, tier });
        return;
      }
      if (outcome !== "denied" && outcome !== "shadow-denied") return;
      let full = false;
      // a denial that names no rule is still written, under the rule ""
      for (const { name, windowMs } of rules.length ? rules : [{ name: "", windowMs: 0 }]) {
        if (writeInFull(pairOf(keys, name), windowMs, at)) full = true;
      }
      if (full) write({ ...detail, event: outcome === "denied" ? "slidegate.denied" : "slidegate.shadow_denied", tag, tier, rules: rules.map((r) => r.name) });
    },

    due() {
      return !empty() && now() - from >= intervalMs;
    },

    async flush() {
      const span = { from: iso(from), to: iso(to) };
      // the most refused first; past maxSummaries, counted without a name
      const ranked = [...counts.values()].sort((a, b) => b.requests - a.requests);
      for (const [i, c] of ranked.entries()) {
        if (i >= maxSummaries) countOther(c.outcome, c.requests);
        else if (c.outcome === "denied" || c.outcome === "shadow-denied")
          write(summary(c.outcome, c.requests, { tag: c.tag, tier: c.tier, rules: Object.fromEntries(c.rules), ...span }));
        else if (c.outcome === "blocked") write(summary(c.outcome, c.requests, { tag: c.tag, tier: c.tier, blockedForMs: c.blockedForMs ?? null, ...span }));
        else write(summary(c.outcome, c.requests, { tag: c.tag, tier: c.tier, ...span }));
      }
      for (const [outcome, requests] of other) write(summary(outcome, requests, { other: true, ...span }));
      counts = new Map();
      other.clear();
      // pairs whose window has passed would be written in full again anyway: forget them
      const at = now();
      for (const [pair, until] of quiet) if (until <= at) quiet.delete(pair);
    },

    get pending() {
      return !empty();
    },

    get tracked() {
      return quiet.size + counts.size;
    },
  };
}
