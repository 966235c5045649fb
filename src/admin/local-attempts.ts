/**
 * Admin authentication attempts counted in this isolate's memory, by the same sliding window as
 * the store's count: what still limits token guesses while the store is full (`maxmemory` under
 * `noeviction`) and refuses the script that counts them in Redis. Without it a full store would
 * shut the operator out of the very calls that free memory (reset, unblock, keys/delete). Each
 * isolate counts its own, so across a fleet an address gets this limit per isolate while the
 * store is full: a bound still, on a token of 32 characters or more.
 *
 * Bounded, and closed when full: an address is forgotten only once its attempts have all left
 * the window. Forgetting one still counted would give a caller cycling through more addresses
 * than `addresses` (a /48 holds 65,536 /64s) fresh guesses on each, without any limit; while
 * every address held has attempts in the window, another is refused until the first of them
 * frees.
 *
 * @example
 * const attempts = createLocalAttempts({ limit: 10, windowMs: 600_000, addresses: 10_000 });
 * attempts.record("i…", Date.now()); // 0: counted; else the ms until the address may try again
 * attempts.takeBack("i…");           // the right token's attempt, once it is known to be right
 */
export function createLocalAttempts(options: { limit: number; windowMs: number; addresses: number }) {
  const { limit, windowMs, addresses } = options;
  /** per address, when each attempt in the window came, oldest first; addresses in the order of their newest attempt */
  const times = new Map<string, number[]>();
  return {
    /** Counts an attempt of `tag` at `now` (ms): 0, or (over the limit: nothing counted) the ms until it may try again. */
    record(tag: string, now: number): number {
      let at = times.get(tag);
      if (at) {
        while (at.length && at[0]! <= now - windowMs) at.shift();
        if (at.length >= limit) return at[0]! + windowMs - now;
        times.delete(tag); // moved last, behind every address whose newest attempt came before
      } else {
        if (times.size >= addresses) {
          // the first address's newest attempt is the oldest of all (or was, before a take-back:
          // then an address is kept longer, never forgotten early): in the window, all are
          const [first, its] = times.entries().next().value!;
          const newest = its.at(-1) ?? Number.NEGATIVE_INFINITY;
          if (newest > now - windowMs) return newest + windowMs - now;
          times.delete(first);
        }
        at = [];
      }
      at.push(now);
      times.set(tag, at);
      return 0;
    },
    /** Takes back the newest attempt of `tag`. */
    takeBack(tag: string): void {
      const at = times.get(tag);
      at?.pop();
      if (at?.length === 0) times.delete(tag);
    },
  };
}
