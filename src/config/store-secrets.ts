/**
 * What is wrong with the store's URL, never repeating it: the Redis URL of the same database
 * (`rediss://default:<password>@…:6379`) pasted in its place carries a password, and with the two
 * secrets swapped it is the token. Taken as it is, the REST client throws on every request (a 500
 * internal error, its message quoting the URL into the log), and fetch() refuses credentials in a
 * URL, so every decision would be a store failure. The Worker refuses such a value with its
 * configuration error; `npm run dev` says the same before anything runs.
 */
export function storeUrlErrors(value: string): string[] {
  const url = URL.canParse(value) ? new URL(value) : undefined;
  if (url?.protocol !== "https:" && url?.protocol !== "http:")
    return ["UPSTASH_REDIS_REST_URL: must be an http(s) URL, like https://example.upstash.io (the REST URL, not the database's redis:// one; not repeated here)"];
  if (url.username || url.password)
    return ["UPSTASH_REDIS_REST_URL: must hold no credentials (user:password@), which fetch() refuses: give the REST URL alone and the REST token as UPSTASH_REDIS_REST_TOKEN"];
  return [];
}

/** A token no header can carry: a header value loses spaces at its ends, and within it holds no line break, NUL or character past U+00FF. */
const unsendableWithin = (token: string) => /[\0\r\n\u0100-\uffff]/.test(token.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, ""));

/** What is wrong with the store's token, never repeating it. */
export function storeTokenErrors(value: string): string[] {
  if (!unsendableWithin(value)) return [];
  return [
    "UPSTASH_REDIS_REST_TOKEN: holds a line break, a NUL or a character past U+00FF, which no Authorization header can carry, so every store call would fail: check the value as copied (it is not repeated here)",
  ];
}
