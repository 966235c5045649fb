/**
 * What is wrong with `ORIGIN_URL`, never repeating it (not even to the log: it may carry
 * credentials). The Worker refuses such a value with its configuration error; `npm run
 * check-config` and `npm run dev` say the same before anything runs.
 */
export function originUrlErrors(value: string): string[] {
  // "api.example.com" is no URL, and "localhost:8080" one of scheme "localhost:": both lack "https://"
  const like = "give it whole, with its scheme, like https://api.example.com (the value is not repeated here)";
  if (!URL.canParse(value)) return [`ORIGIN_URL: is not a URL: ${like}`];
  const origin = new URL(value);
  const errors: string[] = [];
  // fetch loads no other scheme: every admitted request would end in a 502 that blames the
  // origin, its upstream_error line quoting the URL, credentials and all
  if (origin.protocol !== "http:" && origin.protocol !== "https:") errors.push(`ORIGIN_URL: must be an http or https URL: ${like}`);
  // the runtime's fetch drops them without a word: no Authorization reaches the origin, which
  // then refuses every admitted request as if the gate had never been given them
  if (origin.username || origin.password)
    errors.push("ORIGIN_URL: must hold no user name or password (user:password@), which the runtime drops without sending them to the origin");
  // each request's path and query are appended to it: after a query or fragment they would
  // land in the query, or be dropped, and every request reach the same origin page
  if (/[?#]/.test(origin.href)) errors.push("ORIGIN_URL: must hold no query or fragment (each request's path and query are appended to it)");
  return errors;
}
