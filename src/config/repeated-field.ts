/**
 * Where `text`, a JSON document that parsed, names one field twice in an object, as the path of
 * that object from `root` and the field, or undefined when it never does. JSON.parse keeps the
 * last of the two without a word, so `{"limit": 10, …, "limit": 10000}` would run with the
 * second; the operator who wrote the first is told instead.
 *
 * @example
 * repeatedField('{"rules":[{"name":"a","limit":1,"limit":2}]}', "RATE_LIMITS"); // { at: "RATE_LIMITS.rules[0]", field: "limit" }
 * repeatedField('{"rules":[]}', "RATE_LIMITS");                                  // undefined
 */
export function repeatedField(text: string, root: string): { at: string; field: string } | undefined {
  // an open object: its path, its fields so far, and whether a string read next is a field name
  // (after "{" or ","), else a value; an open array: its path and the index of its next element
  const open: ({ at: string; fields: Set<string>; field: string; named: boolean } | { at: string; index: number })[] = [];
  // the document parsed, so its strings, brackets and separators are all that matter here
  for (const [token] of text.matchAll(/"(?:[^"\\]|\\.)*"|[{}[\],]/g)) {
    const top = open.at(-1);
    if (token === "{" || token === "[") {
      const at = top === undefined ? root : "fields" in top ? `${top.at}.${top.field}` : `${top.at}[${top.index}]`;
      open.push(token === "{" ? { at, fields: new Set(), field: "", named: true } : { at, index: 0 });
    } else if (token === "}" || token === "]") open.pop();
    else if (token === ",") {
      if (top && "fields" in top) top.named = true;
      else if (top) top.index++;
    } else if (top && "fields" in top && top.named) {
      // "\u006cimit" is "limit" to JSON.parse, and so here
      const field = JSON.parse(token) as string;
      if (top.fields.has(field)) return { at: top.at, field };
      top.fields.add(field);
      top.field = field;
      top.named = false;
    }
  }
  return undefined;
}
