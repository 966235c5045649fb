/**
 * A pure function's recent results, kept per isolate: a flood repeats the same caller and the
 * same path, and their work (a SHA-256, a path's canonical forms) is done once, not per
 * request. Bounded: once `size` inputs are held, the oldest goes first, so a flood of distinct
 * inputs costs a fixed amount of memory and no more work than without the memo. Each input is
 * held as a copy of its own: a string cut from a larger one (a trimmed header) can keep the
 * whole of that larger string alive, and the memo's bound is on the inputs' own lengths.
 * A result `keep` refuses is not held: one that an input of bounded length can make large.
 *
 * @example
 * const canonical = memo(canonicalPath, 1024);
 * canonical("/v1/users"); // worked out once, then remembered
 */
export function memo<V>(fn: (input: string) => V, size: number, keep: (result: V) => boolean = () => true): (input: string) => V {
  const results = new Map<string, V>();
  // The input asked for last, and its result, always one the Map holds too: a flood asks for
  // the same one request after request, and comparing it with the last costs less than
  // hashing a new string for the Map. One string held as it was given, whatever it was cut from.
  let lastInput: string | undefined;
  let lastResult: V | undefined;
  return (input) => {
    if (input === lastInput) return lastResult as V;
    let result = results.get(input);
    if (result === undefined && !results.has(input)) {
      result = fn(input);
      // a result too large to hold (see `keep`) is worked out again each time
      if (!keep(result)) return result;
      if (results.size >= size) results.delete(results.keys().next().value!);
      results.set(Array.from(input).join(""), result);
    }
    lastInput = input;
    lastResult = result;
    return result as V;
  };
}
