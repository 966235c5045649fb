/**
 * An API key as the gate reads it from its header, and as the admin API and the keys CLI name
 * it: one reading, so one raw key hashes to one SHA-256 everywhere, and a deny-list entry, a
 * block or a registry entry on a key holds however the key is padded.
 */

/**
 * Whether `c` is dropped from either end of a key. An origin reads a padded key as the key it
 * pads, so the gate must too (one caller, one bucket): what is dropped is what any common stack
 * trims, and trimming more than some origin does only counts a key nobody issued against the
 * key it pads, never one key as two.
 *
 * - JavaScript's `trim()`, the gate's reading until now: Unicode spaces, line breaks, U+FEFF.
 * - Every character up to U+0020: Java's `String.trim()` drops them all (C0 controls); Python's
 *   `str.strip()` also drops U+001C–U+001F.
 * - U+0085 (NEL): Python's `str.strip()`, .NET's `Trim()`, Go's `strings.TrimSpace`.
 * - U+FFFD: workerd reads header values as UTF-8 and gives each byte that is not as U+FFFD — the
 *   byte 0x85 or 0xA0 alone among them, which an origin reading headers as Latin-1 (WSGI,
 *   servlets, Node) gets as U+0085 or U+00A0, and Python trims.
 *
 * Not U+007F (DEL): no common stack trims it, and workerd refuses it in a header.
 */
function trimmed(c: string): boolean {
  return c <= "\u0020" || c === "\u0085" || c === "\uFFFD" || c.trim() === "";
}

/**
 * `text` without what any origin trims from its ends (see `trimmed`). A loop, not a regular
 * expression: `/\s+$/` backtracks over every run of spaces inside a 64 KB key.
 *
 * @example
 * trimKey(" sk-live-1\u0085"); // "sk-live-1"
 */
export function trimKey(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && trimmed(text[start]!)) start++;
  while (end > start && trimmed(text[end - 1]!)) end--;
  return text.slice(start, end);
}

export type KeyHeader = { kind: "absent" } | { kind: "key"; key: string } | { kind: "ambiguous" };

const ABSENT: KeyHeader = Object.freeze({ kind: "absent" });
const AMBIGUOUS: KeyHeader = Object.freeze({ kind: "ambiguous" });

/**
 * The API key a value of the key header carries (null: the header is absent), refusing
 * ambiguity: a header sent twice reaches the Worker joined as "K, K", and an origin that reads
 * the first line would see K — so a comma is never part of a new identity, it is a request the
 * gate refuses.
 *
 * @example
 * readKey(" K\u0085"); // { kind: "key", key: "K" }
 * readKey("K, K");     // { kind: "ambiguous" }
 */
export function readKey(value: string | null): KeyHeader {
  if (value === null) return ABSENT;
  if (value.includes(",")) return AMBIGUOUS;
  const key = trimKey(value);
  return key ? { kind: "key", key } : ABSENT;
}
