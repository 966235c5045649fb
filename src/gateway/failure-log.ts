/**
 * Store failures logged at a bounded rate, not one line per request: while the store is down,
 * slow or full, every request fails alike, and a line each would turn an outage into a log
 * flood (and each line could carry the client's whole error text).
 *
 * - The first failure of each interval is written in full, its error and every other text (a
 *   caller's path) cut to `maxErrorLength`.
 * - Later failures in that interval are only counted. The count goes out as one
 *   `<event>_summary` line with `failures`: before the next full line, or when
 *   the caller asks (`due()`, then `flush()`) once the interval is over. Every failure is in
 *   exactly one place: the full lines plus the summaries' `failures` add up to every request
 *   the store failed.
 *
 * @example
 * const failures = createFailureLog({ event: "slidegate.store_failure", write: (line) => console.error(JSON.stringify(line)) });
 * failures.record({ fail: "open", error: e.message });
 * // after each request:
 * if (failures.due()) failures.flush();
 */

export interface FailureLogOptions {
  /** the full lines' event; summaries are `<event>_summary` */
  event: string;
  /** where lines go, one object per line */
  write: (line: Record<string, unknown>) => void;
  /** the clock, in ms (default Date.now) */
  now?: () => number;
  /** at most one full line per interval, in ms (default 1 s) */
  intervalMs?: number;
  /** the longest text a line carries in any field: the error, and what the caller sent, like its path (default 300 characters) */
  maxErrorLength?: number;
  /**
   * a secret no line may carry: the store's token, which a store or a proxy in front of it can
   * quote back in an error page that the client then quotes in its error
   */
  secret?: string;
}

/** The least of a secret's start that is cut from the end of a text: shorter runs say little, and match by chance. */
const SECRET_PREFIX = 4;

/** How many times over a secret's JSON escapes are looked for: a reply shown as JSON that quotes JSON text holding it escapes it twice. */
const JSON_DEPTH = 3;

/**
 * `text` without `secret`: every whole occurrence, and a start of it that ends the text (before
 * an ellipsis), where the client's excerpt of a reply cut it short; the same of the secret
 * percent-encoded, as a page quoting a URL or a form shows a token with `=`, `+` or `/` in it;
 * and of the secret as JSON writes it, as a line shows an odd reply that quotes it (a token
 * may hold `"` or `\`, which a header carries as they are and JSON writes `\"` and `\\`).
 *
 * @example
 * withoutSecret("Refused: Bearer s3cr…", "s3cret-token"); // "Refused: Bearer [redacted]…"
 * withoutSecret('unexpected reply: "s3c\\"ret"', 's3c"ret'); // 'unexpected reply: "[redacted]"'
 */
export function withoutSecret(text: string, secret: string): string {
  if (secret.length < SECRET_PREFIX) return text;
  let out = withoutForm(text, secret, false);
  const escaped: string[] = [];
  for (let form = secret, depth = 0; depth < JSON_DEPTH; depth++) {
    const next = JSON.stringify(form).slice(1, -1);
    if (next === form) break;
    escaped.unshift(next);
    form = next;
  }
  for (const form of escaped) out = withoutForm(out, form, false);
  const encoded = encodeURIComponent(secret);
  // its escapes may come in either case (%3d): matched without regard to ASCII case, which at
  // worst takes out a few characters more
  return encoded === secret ? out : withoutForm(out, encoded, true);
}

/** ASCII letters in lower case, every other character as it is: the length stays, so places in one are places in the other. */
const asciiLower = (text: string) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());

function withoutForm(text: string, form: string, anyCase: boolean): string {
  const fold = anyCase ? asciiLower : (t: string) => t;
  const folded = fold(form);
  let out = "";
  let from = 0;
  const seen = fold(text);
  for (let at = seen.indexOf(folded); at >= 0; at = seen.indexOf(folded, from)) {
    out += `${text.slice(from, at)}[redacted]`;
    from = at + form.length;
  }
  out += text.slice(from);
  const tail = /(\.\.\.|…)?$/.exec(out)![0];
  const body = out.slice(0, out.length - tail.length);
  const bodySeen = fold(body);
  for (let n = Math.min(form.length - 1, body.length); n >= SECRET_PREFIX; n--) {
    if (bodySeen.endsWith(folded.slice(0, n))) return `${body.slice(0, body.length - n)}[redacted]${tail}`;
  }
  return out;
}

export interface FailureLog {
  /** one failed request: written in full when it is its interval's first, counted otherwise */
  record(fields: Record<string, unknown> & { error: string }): void;
  /** whether counted failures wait for a summary whose interval is over */
  due(): boolean;
  /** writes the summary of the failures counted since the last line, if any */
  flush(): void;
  /** whether failures are counted that no line has written yet */
  readonly pending: boolean;
}

export function createFailureLog(options: FailureLogOptions): FailureLog {
  const { event, write, now = Date.now, intervalMs = 1000, maxErrorLength = 300 } = options;
  // the secret as it went out: Headers drops the white space around a token ("…\n" read from a
  // file), so that is the text a store quotes back, which the secret as given would not match
  const secret = options.secret?.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
  const cut = (text: string) => (text.length > maxErrorLength ? `${text.slice(0, maxErrorLength)}…` : text);
  let lastFull = Number.NEGATIVE_INFINITY;
  let counted = 0;
  let from = 0;
  let to = 0;

  function flush() {
    if (counted === 0) return;
    write({ event: `${event}_summary`, failures: counted, from: new Date(from).toISOString(), to: new Date(to).toISOString() });
    counted = 0;
  }

  return {
    record(fields) {
      const t = now();
      if (t - lastFull < intervalMs) {
        if (counted === 0) from = t;
        counted++;
        to = t;
        return;
      }
      flush();
      lastFull = t;
      const line: Record<string, unknown> = { event, ...fields };
      // a path is the caller's, as long as the URL may be: every text is cut, not the error alone
      for (const [name, value] of Object.entries(fields)) if (typeof value === "string") line[name] = cut(value);
      // the secret out before the cut, which could leave a start of it where it could not be found
      line.error = cut(secret ? withoutSecret(fields.error, secret) : fields.error);
      write(line);
    },
    due: () => counted > 0 && now() - lastFull >= intervalMs,
    flush,
    get pending() {
      return counted > 0;
    },
  };
}
