/**
 * Admin authentication attempts counted in this isolate's memory, by the same sliding window as
 * the store's count: what still limits token guesses while the store is full (`maxmemory` under
 * `noeviction`) and refuses the script that counts them in Redis. Without it a full store would
 * shut the operator out of the very calls that free memory (reset, unblock, keys/delete). Each
 * isolate counts its own, so across a fleet an address gets this limit per isolate while the
 * store is full: a bound still, on a token of 32 characters or more.
 *
 * Bounded: past `addresses` the address counted longest ago is forgotten first.
 *
 * @example
 * const attempts = createLocalAttempts({ limit: 10, windowMs: 600_000, addresses: 10_000 });
 * attempts.record("i…", Date.now()); // 0: counted; else the ms until the address may try again
 * attempts.takeBack("i…");           // the right token's attempt, once it is known to be right
 */
export function createLocalAttempts(options: { limit: number; windowMs: number; addresses: number }) {
  const { limit, windowMs, addresses } = options;
  /** per address, when each attempt in the window came, oldest first */
  const times = new Map<string, number[]>();
  return {
    /** Counts an attempt of `tag` at `now` (ms): 0, or (over the limit: nothing counted) the ms until it may try again. */
    record(tag: string, now: number): number {
      let at = times.get(tag);
      if (at) {
        while (at.length && at[0]! <= now - windowMs) at.shift();
        times.delete(tag); // counted now: the last to be forgotten
      } else {
        if (times.size >= addresses) times.delete(times.keys().next().value!);
        at = [];
      }
      times.set(tag, at);
      if (at.length >= limit) return at[0]! + windowMs - now;
      at.push(now);
      return 0;
    },
    /** Takes back the newest attempt of `tag`. */
    takeBack(tag: string): void {
      times.get(tag)?.pop();
    },
  };
}
