/**
 * Isolate-local memory of values that hold until a time: the denial cache (a denial, a block or
 * a registry refusal, so a caller hammering through a 429 costs no Redis round trip until their
 * wait is over), a key's registry tier, an address over the admin sign-in's failure limit.
 * Bounded: the least recently used entry goes first once `size` is reached (a Map keeps
 * insertion order).
 *
 * @example
 * const cache = createExpiringCache<Decision>(10_000);
 * cache.set("k…|free|minute*1", Date.now() + 30_000, decision, Date.now());
 * cache.get("k…|free|minute*1", Date.now()); // { until, value } until then, else undefined
 * cache.forget("k…|");                     // every entry of that identity, gone
 */
export interface ExpiringCache<T> {
  get(key: string, now: number): { until: number; value: T } | undefined;
  /** `now`: the caller's clock, by which an entry that has lapsed makes room */
  set(key: string, until: number, value: T, now: number): void;
  /** drops every entry whose key starts with `prefix`; returns how many */
  forget(prefix: string): number;
  readonly size: number;
}

export function createExpiringCache<T>(size: number): ExpiringCache<T> {
  const entries = new Map<string, { until: number; value: T }>();
  // the most recently used key: a flood from one caller hits it request after request, and it
  // need not be moved to the end of the Map it is at the end of already
  let newest: string | undefined;
  return {
    get(key, now) {
      const hit = entries.get(key);
      if (!hit) return undefined;
      if (hit.until <= now) {
        entries.delete(key);
        return undefined;
      }
      if (key !== newest) {
        entries.delete(key);
        entries.set(key, hit); // now the most recently used
        newest = key;
      }
      return hit;
    },
    set(key, until, value, now) {
      if (size === 0) return;
      entries.delete(key);
      // the least recently used entries go while they have lapsed (two at most: the cache
      // shrinks back after a burst, at a fixed cost per entry), and one when there is no room
      for (let i = 0; i < 2; i++) {
        const oldest = entries.entries().next().value;
        if (!oldest || (oldest[1].until > now && entries.size < size)) break;
        entries.delete(oldest[0]);
      }
      entries.set(key, { until, value });
      newest = key;
    },
    forget(prefix) {
      let dropped = 0;
      for (const key of entries.keys()) if (key.startsWith(prefix) && entries.delete(key)) dropped++;
      return dropped;
    },
    get size() {
      return entries.size;
    },
  };
}
