/**
 * Denials logged per identity, not per request: under a flood of callers who are over their
 * limit, the log grows with the number of identities, not with the number of requests.
 *
 * - The first denial of an identity by a rule is written in full; further denials of that
 *   identity by that rule are only counted until the rule's window has passed since that line.
 * - Every `intervalMs` (when the caller asks: `due()`, then `flush()`), one summary line per
 *   identity and rule carries the exact number of denials since the last summary, the ones
 *   written in full included: summing `denied` over the summary lines gives every denial.
 * - Memory is bounded: at most `maxTracked` identity-rule pairs are counted by name and at most
 *   `maxTracked` are remembered as written in full. Denials of pairs past the cap are counted
 *   in one `other` summary line, so the totals stay exact; pairs past the cap are not written
 *   in full (a flood of new identities cannot turn back into a line per request).
 *
 * Lines:
 *   { event: "slidegate.denied", tag, tier, rules: [names], ...detail }
 *   { event: "slidegate.denied_summary", tag, tier, rule, denied, from, to }
 *   { event: "slidegate.denied_summary", other: true, denied, from, to }
 * `from` and `to` (ISO 8601) span the denials a summary counts.
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

export interface Denial {
  /** the identity's hashed tag (never a raw key or IP) */
  tag: string;
  tier: string;
  /** the enforced rules that denied the request */
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
  /** identity-rule pairs counted by name, and remembered as written in full (default 1,000 each) */
  maxTracked?: number;
}

export interface DenialLog {
  /** counts one denial, and writes it in full when it is its identity's first by a rule in that rule's window */
  record(denial: Denial): void;
  /** true once a summary has waited `intervalMs` since the first denial it counts */
  due(): boolean;
  /** writes the summaries now and starts counting afresh; resolves once they are written */
  flush(): Promise<void>;
  /** identity-rule pairs held in memory (at most twice `maxTracked`) */
  readonly tracked: number;
}

export const DENIAL_LOG_DEFAULTS = { intervalMs: 60_000, maxTracked: 1000 } as const;

interface Count {
  tag: string;
  tier: string;
  rule: string;
  denied: number;
}

export function createDenialLog(options: DenialLogOptions): DenialLog {
  const { write } = options;
  const now = options.now ?? Date.now;
  const intervalMs = options.intervalMs ?? DENIAL_LOG_DEFAULTS.intervalMs;
  const cap = options.maxTracked ?? DENIAL_LOG_DEFAULTS.maxTracked;
  /** pair → until when its denials are only counted (its full line was written in this window) */
  const quiet = new Map<string, number>();
  /** pair → denials since the last summary */
  const counts = new Map<string, Count>();
  let other = 0;
  let from = 0;
  let to = 0;

  const iso = (ms: number) => new Date(ms).toISOString();

  return {
    record({ tag, tier, rules, detail }) {
      const at = now();
      if (counts.size === 0 && other === 0) from = at;
      to = at;
      let full = false;
      // a denial that names no rule is still counted, under the rule ""
      for (const { name, windowMs } of rules.length ? rules : [{ name: "", windowMs: 0 }]) {
        const key = `${tag}|${tier}|${name}`;
        const count = counts.get(key);
        if (count) count.denied++;
        else if (counts.size < cap) counts.set(key, { tag, tier, rule: name, denied: 1 });
        else other++;

        const until = quiet.get(key);
        if (until !== undefined && until > at) continue;
        if (until === undefined && quiet.size >= cap) continue; // no room to remember it: counted, not written
        quiet.set(key, at + windowMs);
        full = true;
      }
      if (full) write({ ...detail, event: "slidegate.denied", tag, tier, rules: rules.map((r) => r.name) });
    },

    due() {
      return (counts.size > 0 || other > 0) && now() - from >= intervalMs;
    },

    async flush() {
      const span = { from: iso(from), to: iso(to) };
      for (const c of counts.values()) write({ event: "slidegate.denied_summary", tag: c.tag, tier: c.tier, rule: c.rule, denied: c.denied, ...span });
      if (other > 0) write({ event: "slidegate.denied_summary", other: true, denied: other, ...span });
      counts.clear();
      other = 0;
      // pairs whose window has passed would be written in full again anyway: forget them
      const at = now();
      for (const [key, until] of quiet) if (until <= at) quiet.delete(key);
    },

    get tracked() {
      return quiet.size + counts.size;
    },
  };
}
