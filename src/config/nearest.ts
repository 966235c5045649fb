/**
 * The name among `names` that `name` most likely misspells (case aside, at most no edit for a
 * name of up to 2 characters, one up to 4 and two for a longer one, a swap of neighbours
 * counting as one),
 * or undefined when none is that close. A refused field or value is then told what was meant:
 * "limt" is "limit", "unknownkeys" is "unknownKeys", "rejected" is "reject".
 *
 * @example
 * nearest("limt", ["name", "limit", "window"]); // "limit"
 * nearest("colour", ["name", "limit"]);         // undefined
 */
export function nearest(name: string, names: readonly string[]): string | undefined {
  const wanted = name.toLowerCase();
  // a name sent by mistake may be anything (a raw key too): past this length nothing is that close
  if (wanted.length > 64) return undefined;
  let best: string | undefined;
  // past the bound nothing is offered: any name of one or two characters is one edit from any other
  let bestDistance = wanted.length <= 2 ? 0 : wanted.length <= 4 ? 1 : 2;
  for (const candidate of names) {
    if (candidate === name) continue;
    const d = distance(wanted, candidate.toLowerCase(), bestDistance);
    if (d < bestDistance || (d === bestDistance && best === undefined)) {
      best = candidate;
      bestDistance = d;
      if (d === 0) break;
    }
  }
  return best;
}

/** "; did you mean "limit"?" for a refusal's words, or "" when nothing in `names` is close. */
export function didYouMean(name: string, names: readonly string[]): string {
  const meant = nearest(name, names);
  return meant === undefined ? "" : `; did you mean ${JSON.stringify(meant)}?`;
}

/** Edits from `a` to `b` (insert, delete, replace, swap two neighbours), or more than `most` when it is more. */
function distance(a: string, b: string, most: number): number {
  if (Math.abs(a.length - b.length) > most) return most + 1;
  // rows of the edit table: two back (for a swap), one back, and this one
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const same = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + same);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      row.push(d);
    }
    before = previous;
    previous = row;
  }
  return previous[b.length]!;
}
