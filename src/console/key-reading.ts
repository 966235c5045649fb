/**
 * `readKey` of src/decision/api-key.ts for the console's script (plain ES2020, no module): the
 * console hashes a key an operator looks up in the browser, and must hash the key the gate
 * would count, padded or sent as `Bearer <token>` alike. test/node/console-key.test.ts holds the
 * two to the same answers.
 */
export const READ_KEY_JS = String.raw`
  function keyTrimmed(c) { return c <= "\u0020" || c === "\u0085" || c === "\uFFFD" || c.trim() === ""; }

  /** The key a value of the key header carries, as the gate reads it: { kind, key }. */
  function readKey(header, value) {
    if (value.indexOf(",") >= 0) return { kind: "ambiguous" };
    var start = 0, end = value.length;
    while (start < end && keyTrimmed(value[start])) start++;
    while (end > start && keyTrimmed(value[end - 1])) end--;
    var key = value.slice(start, end);
    if (!key) return { kind: "absent" };
    if (header !== "authorization") return { kind: "key", key: key };
    var words = [], from = -1;
    for (var i = 0; i <= key.length && words.length < 3; i++) {
      var gap = i === key.length || keyTrimmed(key[i]);
      if (!gap && from < 0) from = i;
      else if (gap && from >= 0) { words.push(key.slice(from, i)); from = -1; }
    }
    if (words.length > 2) return { kind: "ambiguous" };
    // Rails' token parameter (readKey's railsToken): token="K" is K, a ; is ambiguous
    var token = words[words.length - 1];
    if (token.indexOf(";") >= 0) return { kind: "ambiguous" };
    if (token.indexOf("token=") === 0) token = token.slice(6);
    if (token[0] === '"') token = token.slice(1);
    if (token[token.length - 1] === '"') token = token.slice(0, -1);
    // Basic credentials in canonical base64 only (readKey's CANONICAL_BASE64)
    if (words.length === 2 && words[0].toLowerCase() === "basic" && !/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$/.test(token)) return { kind: "ambiguous" };
    return token ? { kind: "key", key: token } : { kind: "absent" };
  }
`;
