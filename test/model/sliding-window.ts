/**
 * What src/script/sliding-window.lua must decide, written the plain way: every log a list of
 * (arrival, cost) entries, every sum a loop over the window. The script's tests run command
 * sequences against both and compare each reply.
 *
 * @example
 * const model = new SlidingWindowModel();
 * model.decide("b", ["l"], 1_000_000, [{ limit: 2, windowMs: 1000, cost: 1, shadow: false }]); // [1, 1, 1000, 0]
 */

export interface RuleCall {
  limit: number;
  windowMs: number;
  /** whole number >= 1 */
  cost: number;
  shadow: boolean;
}

interface Entry {
  /** arrival, µs */
  at: number;
  cost: number;
}

/** The script's reply: [2, ms] while blocked; else [admitted, ...per rule remaining, reset ms, retry ms]. */
export type Reply = number[];

const ceilMs = (us: number) => Math.ceil(us / 1000);

export class SlidingWindowModel {
  private readonly logs = new Map<string, Entry[]>();
  /** block key → when it ends, µs */
  private readonly blocks = new Map<string, number>();

  /** The key is gone (deleted, evicted, expired): whatever it held is forgotten. */
  delete(key: string): void {
    this.logs.delete(key);
    this.blocks.delete(key);
  }

  block(key: string, endsUs: number): void {
    this.blocks.set(key, endsUs);
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

  decide(blockKey: string, logKeys: readonly string[], now: number, rules: readonly RuleCall[]): Reply {
    const ends = this.blocks.get(blockKey);
    if (ends !== undefined && ends > now) return [2, ceilMs(ends - now)];

    const measured = rules.map((r, i) => {
      const key = logKeys[i]!;
      // every call forgets first what has left the window by its own clock: a later clock
      // that runs behind never sees those entries again
      const log = (this.logs.get(key) ?? []).filter((e) => e.at > now - r.windowMs * 1000);
      this.logs.set(key, log);
      // a log whose newest entry is more than a window ahead of the clock starts afresh
      if (log.length > 0 && log[log.length - 1]!.at > now + r.windowMs * 1000) this.delete(key);
      const window = this.inWindow(key, now, r.windowMs);
      const used = window.reduce((sum, e) => sum + e.cost, 0);
      return { key, window, used, fits: used + r.cost <= r.limit };
    });
    const admitted = rules.every((r, i) => r.shadow || measured[i]!.fits);

    const reply: Reply = [admitted ? 1 : 0];
    rules.forEach((r, i) => {
      const m = measured[i]!;
      const w = r.windowMs * 1000;
      let used = m.used;
      let oldest = m.window[0]?.at;
      let retry = 0;
      if (!m.fits) {
        retry = r.cost > r.limit ? -1 : this.retry(m.window, used + r.cost - r.limit, w, now);
      } else if (admitted) {
        const log = this.logs.get(m.key) ?? [];
        const newest = log[log.length - 1]?.at;
        // arrivals strictly increase, whatever the clock says
        const at = newest !== undefined && newest >= now ? newest + 1 : now;
        log.push({ at, cost: r.cost });
        this.logs.set(m.key, log);
        used += r.cost;
        oldest ??= at;
      }
      reply.push(Math.max(r.limit - used, 0), oldest === undefined ? 0 : ceilMs(oldest + w - now), retry);
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
