/**
 * An API key as the gate reads it from its header, and as the admin API and the keys CLI name
 * it: one reading, so one raw key hashes to one SHA-256 everywhere, and a deny-list entry, a
 * block or a registry entry on a key holds however the key is padded. The console's script,
 * which cannot import it, has a copy (src/console/key-reading.ts), held to the same answers.
 */

/**
 * Whether `c` is dropped from either end of a key. An origin reads a padded key as the key it
 * pads, so the gate must too (one caller, one bucket): what is dropped is what any common stack
 * trims, and trimming more than some origin does only counts a key nobody issued against the
 * key it pads, never one key as two.
 *
 * - JavaScript's `trim()`: Unicode spaces, line breaks, U+FEFF.
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

/** At most `max` words of `text`, split at runs of what `trimKey` drops. */
function words(text: string, max: number): string[] {
  const found: string[] = [];
  let start = -1;
  for (let i = 0; i <= text.length && found.length < max; i++) {
    const gap = i === text.length || trimmed(text[i]!);
    if (!gap && start < 0) start = i;
    else if (gap && start >= 0) {
      found.push(text.slice(start, i));
      start = -1;
    }
  }
  return found;
}

/**
 * The token a Rails origin reads from `word`, the word after the scheme (undefined: it holds a
 * `;`, at which Rails splits it). Rails' token authentication (for `Token` and `Bearer`) splits
 * what follows the scheme into parameters at `,`, `;` and tab, takes the first as
 * `token=<value>` (it prefixes `token=` when it is missing) and drops one `"` from either end of
 * the value: `token="K"`, `token=K` and `"K"` are all K to it, and `K;x` is K. The gate reads
 * the same token from the first three and refuses the last, as it refuses a comma: what follows
 * a `;` must not make a new identity, and an origin that reads the whole word sees a key nobody
 * issued.
 */
function railsToken(word: string): string | undefined {
  if (word.includes(";")) return undefined;
  let value = word.startsWith("token=") ? word.slice("token=".length) : word;
  if (value.startsWith('"')) value = value.slice(1);
  if (value.endsWith('"')) value = value.slice(0, -1);
  return value;
}

/**
 * Base64 in its one canonical spelling (RFC 4648 §3.5): the standard alphabet, padded, the bits
 * past the last byte zero. Origins decode `Basic` credentials leniently — Node's `Buffer` (Express
 * `basic-auth`), Python's `b64decode` (Django REST framework, Flask) and Ruby's `decode64` skip
 * characters outside the alphabet and ignore those bits, Node needs no padding — so
 * `c2tf.bGl2ZTo=` and `c2tfbGl2ZTp=` are both `sk_live:` to them: every other spelling of a
 * credential would be a new identity at the gate.
 */
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$/;

/**
 * The API key a value of the key header `header` (lower case) carries (null: the header is
 * absent), refusing ambiguity: a header sent twice reaches the Worker joined as "K, K", and an
 * origin that reads the first line would see K — so a comma is never part of a new identity, it
 * is a request the gate refuses.
 *
 * In `Authorization` the key is the token after the scheme. Origins read the scheme in any case
 * (RFC 9110 §11.1) and after any run of spaces, so `Bearer K`, `bearer K` and `Bearer  K` are
 * all K, and the scheme is no part of the key (`Basic K` is K too: one caller at worst counted
 * as one). A token alone is the key itself, as an origin that drops an optional `Bearer ` reads
 * it. More words are refused: an origin may take the first after the scheme
 * (`value.split(" ")[1]`), and the rest must not make a new identity. The token is read as Rails
 * reads it too (see `railsToken`): `Token token="K"` is K, and a token with a `;` is refused.
 * A `Basic` token (the credentials, base64) must be canonical base64 (see `CANONICAL_BASE64`):
 * another spelling of the same credentials is refused, not counted as a new key.
 *
 * @example
 * readKey("x-api-key", " K\u0085");          // { kind: "key", key: "K" }
 * readKey("x-api-key", "K, K");              // { kind: "ambiguous" }
 * readKey("authorization", "bearer   K");    // { kind: "key", key: "K" }
 * readKey("authorization", "Bearer K junk"); // { kind: "ambiguous" }
 * readKey("authorization", 'Token token="K"'); // { kind: "key", key: "K" }
 * readKey("authorization", "Basic c2s6");      // { kind: "key", key: "c2s6" }
 * readKey("authorization", "Basic c2s6=");     // { kind: "ambiguous" }
 */
export function readKey(header: string, value: string | null): KeyHeader {
  if (value === null) return ABSENT;
  if (value.includes(",")) return AMBIGUOUS;
  const key = trimKey(value);
  if (!key) return ABSENT;
  if (header !== "authorization") return { kind: "key", key };
  const [first, token, more] = words(key, 3);
  if (more !== undefined) return AMBIGUOUS;
  const read = railsToken(token ?? first!);
  if (read === undefined) return AMBIGUOUS;
  if (token !== undefined && first!.toLowerCase() === "basic" && !CANONICAL_BASE64.test(read)) return AMBIGUOUS;
  return read ? { kind: "key", key: read } : ABSENT;
}
