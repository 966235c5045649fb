/**
 * What src/script/sliding-window.lua must decide, written the plain way: every log a list of
 * (arrival, cost) entries, every sum a loop over the window, the registry a map of fields. The
 * script's tests run command sequences against both and compare each reply.
 *
 * @example
 * const model = new SlidingWindowModel();
 * model.decide({ block: "b", registry: "k", logs: ["l"], now: 1_000_000, tier: "t", fallback: "-",
 *   rules: [{ name: "m", limit: 2, windowMs: 1000, cost: 1, shadow: false }] }); // [1, 1, 1000, 0, 2, 1000]
 */

export interface RuleCall {
  name: string;
  limit: number;
  windowMs: number;
  /** whole number >= 1 */
  cost: number;
  shadow: boolean;
}

export interface Call {
  block: string;
  registry: string;
  logs: readonly string[];
  /** µs */
  now: number;
  /** the tier whose rules are sent */
  tier: string;
  /** the tier without a registry entry; "" for an unknown key; "-": not a key, the registry is not read */
  fallback: string;
  rules: readonly RuleCall[];
}

interface Entry {
  /** arrival, µs */
  at: number;
  cost: number;
}

/**
 * The script's reply: [2, ms] blocked; [3] unknown key; [4] disabled key; [5, tier] another
 * tier; else [admitted, ...per rule remaining, reset ms, retry ms, limit, window ms].
 */
export type Reply = (number | string)[];

const ceilMs = (us: number) => Math.ceil(us / 1000);
/** An override as the admin API writes one (a whole number from 1 to `max`); anything else is none. */
const override = (v: string | undefined, max: number) => (v !== undefined && /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= max ? Number(v) : undefined);
const MAX_LIMIT = 1_000_000;
const MAX_WINDOW_MS = 366 * 86_400_000;

export class SlidingWindowModel {
  private readonly logs = new Map<string, Entry[]>();
  /** block key → when it ends, µs */
  private readonly blocks = new Map<string, number>();
  /** registry key → its fields */
  private readonly entries = new Map<string, Record<string, string>>();

  /** The key is gone (deleted, evicted, expired): whatever it held is forgotten. */
  delete(key: string): void {
    this.logs.delete(key);
    this.blocks.delete(key);
    this.entries.delete(key);
  }

  /** A block ending at `endsUs`; `Infinity` for one without end (a value of another type, say, with no TTL). */
  block(key: string, endsUs: number): void {
    this.blocks.set(key, endsUs);
  }

  /** A registry entry, as the admin API (or a hand) writes it. */
  register(key: string, fields: Record<string, string>): void {
    this.entries.set(key, { ...fields });
  }

  /**
   * Entries still in `key`'s window at `now`. A log's clock never runs back: when `now` is
   * behind its newest entry, the window ends at that entry instead.
   */
  inWindow(key: string, now: number, windowMs: number): Entry[] {
    const log = this.logs.get(key) ?? [];
    const end = Math.max(now, log.at(-1)?.at ?? now);
    return log.filter((e) => e.at > end - windowMs * 1000);
  }

  decide(call: Call): Reply {
    const { now } = call;
    const ends = this.blocks.get(call.block);
    if (ends !== undefined && ends > now) return [2, ends === Infinity ? -1 : ceilMs(ends - now)];

    let fields: Record<string, string> = {};
    if (call.fallback !== "-") {
      fields = this.entries.get(call.registry) ?? {};
      if (fields.disabled === "1") return [4];
      // a tier only as the configuration names one; any other is no tier field (the tier asked
      // about is the caller's own name, taken as it is)
      const tier = fields.tier !== undefined && (fields.tier === call.tier || /^[A-Za-z0-9_-]{1,32}$/.test(fields.tier)) ? fields.tier : call.fallback;
      if (tier === "") return [3];
      if (tier !== call.tier) return [5, tier];
    }
    // a key's overrides replace the rule's limit and window; anything but a whole number >= 1 is
    // ignored, and so is a pair of more than 1000 per ms of the window (entries stand 1 µs apart)
    const rules = call.rules.map((r) => {
      const limit = override(fields[`limit:${r.name}`], MAX_LIMIT) ?? r.limit;
      const windowMs = override(fields[`window:${r.name}`], MAX_WINDOW_MS) ?? r.windowMs;
      return limit <= windowMs * 1000 ? { ...r, limit, windowMs } : r;
    });

    // a log named by several rules is one log, kept for the longest of their windows
    const longest = new Map<string, number>();
    rules.forEach((r, i) => {
      const key = call.logs[i]!;
      const first = rules[call.logs.indexOf(key)]!;
      if (first !== r && (first.cost !== r.cost || first.shadow || r.shadow)) throw new Error("model: rules sharing a log must weigh a request alike and be enforced");
      longest.set(key, Math.max(longest.get(key) ?? 0, r.windowMs));
    });
    for (const [key, windowMs] of longest) {
      // every call forgets first what has left the window by its own clock: a later clock
      // that runs behind never sees those entries again
      const log = (this.logs.get(key) ?? []).filter((e) => e.at > now - windowMs * 1000);
      this.logs.set(key, log);
      // a log whose newest entry is more than a window ahead of the clock starts afresh
      if (log.length > 0 && log[log.length - 1]!.at > now + windowMs * 1000) this.logs.delete(key);
    }
    const measured = rules.map((r, i) => {
      const key = call.logs[i]!;
      const window = this.inWindow(key, now, r.windowMs);
      const used = window.reduce((sum, e) => sum + e.cost, 0);
      return { key, window, used, fits: used + r.cost <= r.limit };
    });
    const admitted = rules.every((r, i) => r.shadow || measured[i]!.fits);
    // a log records a request once, and only when every rule on it fits
    const unrecorded = new Set(measured.filter((m) => !m.fits).map((m) => m.key));
    const recordedAt = new Map<string, number>();

    const reply: Reply = [admitted ? 1 : 0];
    rules.forEach((r, i) => {
      const m = measured[i]!;
      const w = r.windowMs * 1000;
      let used = m.used;
      let oldest = m.window[0]?.at;
      let retry = 0;
      if (!m.fits) {
        retry = r.cost > r.limit ? -1 : this.retry(m.window, used + r.cost - r.limit, w, now);
      } else if (admitted && !unrecorded.has(m.key)) {
        let at = recordedAt.get(m.key);
        if (at === undefined) {
          const log = this.logs.get(m.key) ?? [];
          const newest = log[log.length - 1]?.at;
          // arrivals strictly increase, whatever the clock says
          at = newest !== undefined && newest >= now ? newest + 1 : now;
          log.push({ at, cost: r.cost });
          this.logs.set(m.key, log);
          recordedAt.set(m.key, at);
        }
        used += r.cost;
        oldest ??= at;
      }
      reply.push(Math.max(r.limit - used, 0), oldest === undefined ? 0 : ceilMs(oldest + w - now), retry, r.limit, r.windowMs);
    });
    return reply;
  }

  /** When enough of the oldest entries have left for `need` units: the arrival of the last of them, plus a window. */
  private retry(window: readonly Entry[], need: number, w: number, now: number): number {
    let freed = 0;
    for (const e of window) {
      freed += e.cost;
      if (freed >= need) return ceilMs(e.at + w - now);
    }
    throw new Error("model: a denied rule always frees enough within its window");
  }
}
