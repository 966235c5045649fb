#!/usr/bin/env node
/**
 * `npm run keys -- <verb> …`: manage the key registry of a running gate through its admin API.
 * SLIDEGATE_URL names the gate (http://127.0.0.1:8787 by default; https://, or http:// on this
 * machine only), ADMIN_TOKEN its admin token, SLIDEGATE_TIMEOUT_MS how long one call may take
 * (30000 by default).
 *
 *   show      <key> | --hash <sha256>                      the key's entry
 *   set       <key> | --hash …  [--tier T] [--label L] [--disabled]   create or replace the entry
 *   tier      <key> | --hash …  <tier>                     change the tier, keeping the rest
 *   label     <key> | --hash …  <label>                    change the label, keeping the rest
 *   override  <key> | --hash …  <rule> [--limit N] [--window W] | --clear
 *   disable   <key> | --hash …                             refuse the key (403)
 *   enable    <key> | --hash …
 *   delete    <key> | --hash …
 *   list      [--limit N] [--cursor C] [--all]             entries by hash, a page (or all)
 *   import    <file.csv | file.json>                       many entries merged in, in batches, with progress
 *
 * <key> "-" reads the raw key from standard input, so it stays out of the command line (shell
 * history, `ps`, npm's own log). A CSV has a header line naming its columns: `hash` (or
 * `key`), `tier`, `label`, `disabled` (true/false/1/0), each at most once and no other; a
 * JSON file is an array of entries as the admin API takes them, or what `list --all` prints
 * (so `list --all > backup.json` restores with `import backup.json`). A file is checked whole
 * before anything is imported (here, then by the gate, batch by batch, writing nothing): a bad
 * line is named, and nothing is imported.
 * Output is JSON on stdout; progress and errors go to stderr. Exit codes: 0 done; 2 a wrong
 * command line, no ADMIN_TOKEN, or a file that cannot be read or that the check refuses (its own
 * or the gate's, batch by batch: nothing was written); 1 the gate refused a call (400, 404, …),
 * could not be reached or did not answer in time, or an import's batch failed after the check
 * (nothing after that batch was sent).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { parse as parseCsv } from "csv-parse/sync";
import { didYouMean } from "../src/config/nearest.ts";
import { readKey, trimKey } from "../src/decision/api-key.ts";
import { isLoopback } from "./shim/loopback.ts";

const IMPORT_BATCH = 1000;
/** A key's SHA-256 as the gate lists it, and as its list's cursor: 64 lowercase hex digits. */
const KEY_HASH = /^[0-9a-f]{64}$/;
/**
 * The longest wait a node timer keeps: past it the timer fires after 1 ms (a call "did not
 * answer" at once, an import's batch "may have landed"), and past 2^32 - 1 the signal is refused.
 */
const TIMER_MAX_MS = 2 ** 31 - 1;
/** How long one call to the gate may take before the CLI gives up on it (SLIDEGATE_TIMEOUT_MS). */
const CALL_TIMEOUT_MS = (() => {
  const text = process.env.SLIDEGATE_TIMEOUT_MS;
  if (text === undefined || text === "") return 30_000;
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > TIMER_MAX_MS) {
    console.error(`slidegate keys: SLIDEGATE_TIMEOUT_MS must be a whole number of milliseconds from 1 to ${TIMER_MAX_MS} (about 24 days), not ${JSON.stringify(text)}`);
    process.exit(2);
  }
  return Number(text);
})();

/**
 * What a terminal could act on rather than print: C0 controls but the line break, DEL, C1
 * controls (a terminal may take U+009B as CSI) and the bidirectional overrides that reorder what
 * is shown. A gate's words, a file's field names and a label the registry holds reach the
 * terminal through this CLI: a file or a server could otherwise retitle the window, write the
 * clipboard (OSC 52) or hide text.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
const TERMINAL_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
/** `text` with each such character as a JSON escape (`\u001b`): inside JSON's strings, still the same JSON. */
const printable = (text: string) => text.replace(TERMINAL_CONTROL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);

class UsageError extends Error {}
class RefusedError extends Error {}

const { values, positionals } = (() => {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions();
  } catch (e) {
    // node names an unknown option in full, and a key that starts with "-" reads as one: a key
    // never reaches the terminal, so the option is left unnamed and the ones there are listed
    const unknown = (e as { code?: string }).code === "ERR_PARSE_ARGS_UNKNOWN_OPTION";
    console.error(
      unknown
        ? "slidegate keys: an option it does not know (not repeated here: it may be a key); the options are --hash, --tier, --label, --disabled, --limit, --window, --clear, --cursor, --all and --help. A key that starts with '-' goes after '--', as in: show -- <key>"
        : `slidegate keys: ${(e as Error).message}`,
    );
    process.exit(2);
  }
  // node keeps the last of an option given twice: "--tier free --tier paid" would register the
  // key as paid without a word, when which one was meant is a guess (named, not its values)
  const seen = new Set<string>();
  for (const token of parsed.tokens) {
    if (token.kind !== "option") continue;
    if (seen.has(token.name)) {
      console.error(`slidegate keys: --${token.name} is given twice: give it once`);
      process.exit(2);
    }
    seen.add(token.name);
  }
  return parsed;
})();

function parseOptions() {
  return parseArgs({
    allowPositionals: true,
    tokens: true,
    options: {
      hash: { type: "string" },
      tier: { type: "string" },
      label: { type: "string" },
      disabled: { type: "boolean" },
      limit: { type: "string" },
      window: { type: "string" },
      clear: { type: "boolean" },
      cursor: { type: "string" },
      all: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
}

// --help: this file's own opening comment, which is the usage
if (values.help) {
  const source = readFileSync(new URL(import.meta.url), "utf8");
  const usage = /\/\*\*\n([\s\S]*?)\*\//.exec(source)?.[1] ?? "";
  console.log(usage.replace(/^ \* ?/gm, "").trim());
  process.exit(0);
}

const base = (process.env.SLIDEGATE_URL ?? "http://127.0.0.1:8787").replace(/\/$/, "");
const token = process.env.ADMIN_TOKEN;

/**
 * Why the CLI will not call `base`, or undefined. Every call carries the admin token, and a
 * `set`, `show` or import by key a raw key: over plain HTTP anyone on the way reads them, and a
 * gate behind Cloudflare answers http:// with a redirect only after the token has crossed in
 * clear. HTTP is for this machine alone (npm run dev's gate). And the URL is the gate's alone:
 * the admin API is at its root.
 */
function unsafeBase(): string | undefined {
  let at: URL;
  try {
    at = new URL(base);
  } catch {
    return `SLIDEGATE_URL is not a URL: give the gate's, like https://api.example.com`;
  }
  // not repeated: a user name or password there may be the token itself
  if (at.username || at.password) return "SLIDEGATE_URL holds a user name or password: give the gate's URL alone (the token goes in ADMIN_TOKEN)";
  // The admin API is at the root of the gate's host (/__slidegate/): under a path, every call
  // would be a request to the origin, carrying the admin token there (and into its logs).
  if (at.pathname !== "/")
    return `SLIDEGATE_URL has a path (${JSON.stringify(at.pathname.slice(0, 64))}): give the gate's URL without one, like https://${at.host}; the admin API is at its root`;
  // "?" or "#" alone, which the parsed URL drops: the text itself, as a shell or a file gave it
  if (at.search || at.hash || /[?#]/.test(base)) return `SLIDEGATE_URL has a query or a fragment: give the gate's URL without one, like https://${at.host}`;
  if (at.protocol === "https:" || (at.protocol === "http:" && isLoopback(at.hostname))) return undefined;
  if (at.protocol !== "http:") return `SLIDEGATE_URL must be an https:// URL (or http:// on this machine), not ${at.protocol}`;
  return `SLIDEGATE_URL is plain HTTP to ${at.hostname}, which is not this machine: the admin token (and any raw key) would cross the network in clear. Use https://${at.host}, or http:// on a loopback address (127.0.0.1, localhost) through a tunnel`;
}

/** What each verb takes: its options, and how many arguments follow the key (or all of them, for a verb without a key). */
const VERBS: Record<string, { options: string[]; key: boolean; args: number }> = {
  show: { options: ["hash"], key: true, args: 0 },
  set: { options: ["hash", "tier", "label", "disabled"], key: true, args: 0 },
  tier: { options: ["hash"], key: true, args: 1 },
  label: { options: ["hash"], key: true, args: 1 },
  override: { options: ["hash", "limit", "window", "clear"], key: true, args: 1 },
  disable: { options: ["hash"], key: true, args: 0 },
  enable: { options: ["hash"], key: true, args: 0 },
  delete: { options: ["hash"], key: true, args: 0 },
  list: { options: ["limit", "cursor", "all"], key: false, args: 0 },
  import: { options: [], key: false, args: 1 },
};

/** One admin call: the answer's JSON object, or a RefusedError carrying the gate's own words. */
async function call(route: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (!token) throw new UsageError("ADMIN_TOKEN is not set: export the gate's admin token first");
  // fetch refuses such a header with an error that quotes it, token and all: refused here, unquoted
  // (at its ends fetch drops spaces and line breaks, as from a token file's CRLF: those go)
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
  if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(token.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, ""))) {
    throw new UsageError("ADMIN_TOKEN holds a line break or another control character, which no header can carry (a token file of more than one line?): export the token alone");
  }
  // The gate reads a header a byte a character, and node's fetch sends such a character as two
  // or more (UTF-8), or not at all: the gate would see another token and count a failed sign-in.
  if (/[^\x20-\x7e\t\n\r]/.test(token)) {
    throw new UsageError(
      "ADMIN_TOKEN holds a character outside ASCII, which this command cannot send as the gate reads it (a byte a character): it would be a failed sign-in, counted against this address. Give the gate a random ASCII token (openssl rand -hex 32)",
    );
  }
  const unsafe = unsafeBase();
  if (unsafe) throw new UsageError(unsafe);
  let res: Response;
  try {
    // from the parsed URL's origin, not the text: "https://gate//" or a space after it (as from
    // a file) would be another path, one an origin may serve, or no URL at all
    res = await fetch(new URL(`/__slidegate/${route}`, new URL(base).origin), {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      // a redirect would turn the POST into a GET somewhere else, the token with it: not
      // followed, but said as what it is (node's "error" is a "could not reach" of a gate reached)
      redirect: "manual",
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
  } catch (e) {
    const error = e as Error & { cause?: { code?: string; message?: string } };
    if (error.name === "TimeoutError") throw new RefusedError(`${base} did not answer within ${CALL_TIMEOUT_MS} ms (SLIDEGATE_TIMEOUT_MS)`);
    const cause = error.cause?.code ?? error.cause?.message;
    throw new RefusedError(`could not reach ${base}: ${error.message}${cause ? ` (${cause})` : ""}`);
  }
  if (res.status >= 300 && res.status < 400) {
    // where it points, at most its origin: the rest of a URL may carry anything
    let to = "nowhere it names";
    try {
      to = new URL(res.headers.get("location") ?? "", `${base}/`).origin;
    } catch {}
    throw new RefusedError(
      `${base} answered ${res.status}, a redirect to ${to} (not followed: the call, and the admin token, are for the gate itself). Set SLIDEGATE_URL to the gate's own URL`,
    );
  }
  const text = await res.text();
  let answer: unknown;
  try {
    answer = JSON.parse(text);
  } catch {
    answer = undefined;
  }
  if (typeof answer !== "object" || answer === null || Array.isArray(answer)) {
    throw new RefusedError(`${base} answered ${res.status} with something that is not a JSON object (is SLIDEGATE_URL a slidegate gate?)`);
  }
  const fields = answer as Record<string, unknown>;
  // a 429 (failed sign-ins from this address, the gate's or a proxy's) says how long it lasts
  const retryAfter = res.status === 429 ? res.headers.get("retry-after") : null;
  const wait = retryAfter && /^\d+$/.test(retryAfter) ? ` (Retry-After: ${retryAfter} s)` : "";
  if (!res.ok) throw new RefusedError(`${res.status} ${String(fields.title ?? "")}: ${String(fields.detail ?? "")}${wait}`);
  return fields;
}

/** The raw key from standard input (its first line): kept out of the command line. */
function keyFromStdin(): string {
  let text: string;
  try {
    text = readFileSync(0, "utf8");
  } catch {
    throw new UsageError('"-" reads the key from standard input, which could not be read');
  }
  const key = text.split(/\r?\n/)[0]!;
  if (key === "") throw new UsageError('"-" reads the key from standard input, which held none');
  return key;
}

/** The key the command line names: a raw key (or "-": from standard input) as the first argument, or --hash. */
function who(args: string[]): { target: Record<string, string>; rest: string[] } {
  // the gate stores hashes in lower case: sent so, a hash copied in upper case names the same entry
  if (values.hash !== undefined) return { target: { hash: values.hash.toLowerCase() }, rest: args };
  const [key, ...rest] = args;
  if (!key) throw new UsageError('name the key: a raw key as the first argument ("-" reads it from standard input), or --hash <sha256>');
  return { target: { key: key === "-" ? keyFromStdin() : key }, rest };
}

/**
 * Refuses a raw key of 64 hex digits that is the hash of an entry the registry holds: a hash
 * copied from `list` and given without --hash. Taken as a raw key, `set` registered another
 * entry (the hash of that hash), and every other verb answered a 404 for an entry the list
 * shows. A key that is no entry's hash (keys made with `openssl rand -hex 32`) is a raw key.
 */
async function refuseHashAsKey(
  target: Record<string, unknown>,
  refusal = "the key given is 64 hex digits: the hash of an entry the registry holds (copied from list?). Name that entry with --hash and the same digits; nothing was changed",
): Promise<void> {
  const key = typeof target.key === "string" ? trimKey(target.key) : undefined;
  if (key === undefined || !/^[0-9a-f]{64}$/i.test(key)) return;
  // not repeated: it may be a raw key after all
  if (await listed(key.toLowerCase())) throw new UsageError(refusal);
}

/**
 * Whether the registry lists an entry whose hash is `hash`, asked without sending it: `hash` may
 * be a raw key, and `keys/get` would put it in the name of a key the store reads. The list is read
 * from just before its first 8 hex digits instead (after the last hash of the 8 digits before
 * them, or from the start), so the gate and the store see 32 bits of it; the entries between there
 * and it (1 in 4 billion of the registry, each) are paged past.
 */
async function listed(hash: string): Promise<boolean> {
  // the list starts after its cursor: from the first 8 digits padded with zeros, it would start
  // after a hash that is those digits and zeros, which only a keys/get of it whole could find
  const before = Number.parseInt(hash.slice(0, 8), 16) - 1;
  let cursor = before < 0 ? undefined : before.toString(16).padStart(8, "0").padEnd(64, "f");
  // a registry of a billion keys has a quarter of one between: 100 pages end only a list that is not one
  for (let pages = 0; pages < 100; pages++) {
    const page = await call("keys/list", { cursor, limit: 10 });
    const hashes = Array.isArray(page.entries) ? page.entries.map((entry: { hash?: unknown }) => entry?.hash) : undefined;
    if (
      !hashes?.every((h): h is string => typeof h === "string" && KEY_HASH.test(h)) ||
      (page.cursor !== null && (typeof page.cursor !== "string" || !KEY_HASH.test(page.cursor) || (cursor !== undefined && page.cursor <= cursor)))
    ) {
      break;
    }
    if (hashes.includes(hash)) return true;
    if (page.cursor === null || page.cursor >= hash) return false;
    cursor = page.cursor;
  }
  throw new RefusedError(`${base} answered keys/list with pages that are not a slidegate gate's list`);
}

/** Refuses options and arguments the verb does not take, without echoing them (an argument may be a key). */
function checkLine(verb: string, args: string[]): void {
  const spec = VERBS[verb]!;
  const stray = Object.keys(values).filter((o) => values[o as keyof typeof values] !== undefined && !spec.options.includes(o));
  if (stray.length) throw new UsageError(`${verb} does not take ${stray.map((o) => `--${o}`).join(", ")}`);
  if (spec.key && values.hash !== undefined && args.length > spec.args) {
    throw new UsageError(`${verb}: name the key once, as an argument or with --hash, not both`);
  }
  const expected = spec.args + (spec.key && values.hash === undefined ? 1 : 0);
  if (args.length > expected) throw new UsageError(`${verb} takes ${expected} argument${expected === 1 ? "" : "s"}, not ${args.length}`);
}

/** An entry of a file, and where it came from (a line of a CSV, an index of a JSON array). */
interface FileEntry {
  entry: Record<string, unknown>;
  at: string;
}

const CSV_COLUMNS = ["hash", "key", "tier", "label", "disabled"];
const BOOLEANS: Record<string, boolean> = { true: true, "1": true, false: false, "0": false };

/** Entries from a CSV (a header line, then one entry a record) or a JSON array, checked whole. */
function readEntries(path: string): FileEntry[] {
  let text: string;
  try {
    // npm runs this in the package's root; a relative name is the user's, from where npm was typed (INIT_CWD)
    text = readFileSync(resolve(process.env.INIT_CWD ?? ".", path), "utf8").replace(/^\uFEFF/, "");
  } catch (e) {
    // ENOENT alone: the user looks for a typo where the file was looked for somewhere else
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "it is a directory" : code === "EACCES" ? "permission denied" : (code ?? (e as Error).message);
    throw new UsageError(`cannot read ${path}: ${why} (looked for ${resolve(process.env.INIT_CWD ?? ".", path)})`);
  }
  const json = path.toLowerCase().endsWith(".json");
  // UTF-16 ("Unicode text" from a spreadsheet) read as UTF-8 has a NUL beside each ASCII character
  if (text.includes("\u0000")) throw new UsageError(`${path}: is not UTF-8 text (UTF-16?): save it as ${json ? "UTF-8" : "CSV UTF-8"}; nothing was imported`);
  const entries = json ? fromJson(path, text) : fromCsv(path, text);
  // the gate stores hashes in lower case; a file's upper-case one is sent as it will be stored
  for (const { entry } of entries) if (typeof entry.hash === "string") entry.hash = entry.hash.toLowerCase();
  // as the gate reads any key header but Authorization: trimmed, with the same trimKey
  refuseTwice(path, entries, trimKey);
  return entries;
}

/**
 * Refuses a file that names one key twice (as itself, read as `read` reads it, or as its hash):
 * which of the two lines wins would be an accident of batching, as the gate refuses it only
 * within a batch.
 */
function refuseTwice(path: string, entries: FileEntry[], read: (key: string) => string | undefined): void {
  const seen = new Map<string, string>();
  for (const { entry, at } of entries) {
    const key = typeof entry.key === "string" ? read(entry.key) : undefined;
    const id = typeof entry.hash === "string" ? entry.hash : key !== undefined ? createHash("sha256").update(key).digest("hex") : undefined;
    if (id === undefined) continue;
    const first = seen.get(id);
    if (first) throw new UsageError(`${path}: ${at} names the same key as ${first}; nothing was imported`);
    seen.set(id, at);
  }
}

function fromJson(path: string, text: string): FileEntry[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    // the parser's message quotes the file around the error, which may be a raw key: only where
    const where = /at position \d+(?: \(line \d+ column \d+\))?/.exec((e as Error).message)?.[0];
    throw new UsageError(`${path}: not valid JSON${where ? ` (${where})` : ""}; nothing was imported`);
  }
  return entriesOf(path, parsed).map((entry, i) => {
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) throw new UsageError(`${path}: entry [${i}] is not an object; nothing was imported`);
    // an entry keyed by its key ({"sk-live-…":"paid"}): the gate would name that field, a raw
    // key, in its answer, so it is refused here without naming any
    if (!Object.hasOwn(entry, "key") && !Object.hasOwn(entry, "hash")) {
      throw new UsageError(`${path}: entry [${i}] has no "key" or "hash" field (its fields are not repeated here: one may be a raw key); nothing was imported`);
    }
    return { entry: entry as Record<string, unknown>, at: `entry [${i}]` };
  });
}

/**
 * A JSON file's entries: an array of them, or what `list` prints (`{"entries":[…],"count":N}`
 * from `list --all`, `{"entries":[…],"cursor":null}` from a last page), so a backup taken with
 * `list --all > backup.json` restores with `import backup.json` as it stands.
 */
function entriesOf(path: string, parsed: unknown): unknown[] {
  if (Array.isArray(parsed)) return parsed;
  const shape = 'must hold a JSON array of entries, or what "list --all" prints ({"entries":[…]})';
  if (typeof parsed !== "object" || parsed === null) throw new UsageError(`${path}: ${shape}`);
  const { entries, count, cursor, ...rest } = parsed as Record<string, unknown>;
  // a field beside "entries" is a misspelling, and named; without "entries" the object may be a
  // map of raw keys to tiers ({"sk-live-…":"paid"}), and no field of it is repeated
  const unknown = Object.hasOwn(parsed, "entries") ? Object.keys(rest) : [];
  if (!Array.isArray(entries) || unknown.length) {
    throw new UsageError(`${path}: ${shape}${unknown.length ? `, not a field ${JSON.stringify(unknown[0]!.slice(0, 64))}` : ""}; nothing was imported`);
  }
  // a page with a cursor has entries after it that the file lacks: restored, the backup would be a part of the registry
  if (cursor !== undefined && cursor !== null) {
    throw new UsageError(`${path}: holds one page of a list (its "cursor" is not null), not every entry: back up with "list --all"; nothing was imported`);
  }
  // list --all counts what it printed: a file that holds fewer (or more) was changed since, and
  // entries gone from it would be restored as if the registry never held them
  if (count !== undefined) {
    if (typeof count !== "number")
      throw new UsageError(
        `${path}: "count" must be the number of entries list --all printed, not ${count === null ? "null" : `a ${typeof count}`} (not repeated here: a file's text may be a raw key); nothing was imported`,
      );
    if (count !== entries.length)
      throw new UsageError(
        `${path}: "count" is ${count}, but it holds ${entries.length} entries: entries were lost or added since list --all printed it. Check the file; to import it as it stands, set "count" to ${entries.length} (or drop it); nothing was imported`,
      );
  }
  return entries;
}

/** What a spreadsheet's other exports separate cells with, by name: told apart from a file without its header line. */
const SEPARATORS: [string, string][] = [
  ["\t", "tabs"],
  [";", "semicolons"],
];

/** `"teir" (did you mean "tier"?)`: a header's misspelt column with the one it most likely meant. */
function namedWithNearest(column: string): string {
  const meant = didYouMean(column, CSV_COLUMNS);
  return meant ? `"${column}" (${meant.slice(2)})` : `"${column}"`;
}

/** Excel's first line naming the separator (`sep=,`), quoted or not, padded with the empty cells of the other columns. */
const EXCEL_SEPARATOR_LINE = /^"?sep=([\s\S])"?,*$/i;

function fromCsv(path: string, text: string): FileEntry[] {
  let lines = text.replace(/\r\n?/g, "\n");
  if (lines.trim() === "") throw new UsageError(`${path}: is empty: a CSV starts with a header line naming its columns (${CSV_COLUMNS.join(", ")}); nothing was imported`);
  // Excel reads a file whose first line is "sep=," with that separator, and writes one so
  // when told to: read past as a blank line (the lines after keep their numbers in the file)
  const firstLine = lines.split("\n", 1)[0]!;
  const separator = EXCEL_SEPARATOR_LINE.exec(firstLine)?.[1];
  if (separator !== undefined) {
    const named = SEPARATORS.find(([s]) => s === separator);
    if (separator !== ",")
      throw new UsageError(
        `${path}: line 1 (sep=) separates its cells with ${named?.[1] ?? "another character than commas"}: a CSV separates them with commas; nothing was imported`,
      );
    lines = lines.slice(firstLine.length);
  }
  let records: { record: string[]; info: { lines: number } }[];
  try {
    records = parseCsv(lines, { skip_empty_lines: true, relax_column_count: true, info: true }) as unknown as typeof records;
  } catch (e) {
    const line = (e as { lines?: number }).lines;
    // the parser's words quote the cell (`value is "sk-live-…"`) or a character of it: a cell may
    // be a raw key, so neither is echoed, as a JSON file's parse error quotes nothing of it
    const why = (e as Error).message
      .replace(/ at line \d+/, "")
      .replace(/, value is [\s\S]*$/, "")
      .replace(/got "[\s\S]"/, "got a character");
    throw new UsageError(`${path}${line ? ` line ${line}` : ""}: ${why}; nothing was imported`);
  }
  // a row of empty cells is a blank line as a spreadsheet saves it (rows formatted, never filled): skipped as one
  const [header, ...rows] = records.filter(({ record }) => record.some((cell) => cell.trim() !== ""));
  const columns = (header?.record ?? []).map((c) => c.trim().toLowerCase());
  // a first line that names no column at all is a record, the header left out: its cells may be
  // raw keys, so none is echoed (a header's misspelt column, beside known ones, is named)
  if (!columns.some((c) => CSV_COLUMNS.includes(c))) {
    // only the header line's own words, which name columns, decide: a record's cells are never looked into
    const separated = SEPARATORS.find(([separator]) => columns.length === 1 && columns[0]!.split(separator).some((c) => CSV_COLUMNS.includes(c.trim())));
    if (separated) throw new UsageError(`${path}: line 1 separates its cells with ${separated[1]}: a CSV separates them with commas; nothing was imported`);
    throw new UsageError(`${path}: line 1 names no column (columns: ${CSV_COLUMNS.join(", ")}): a CSV starts with a header line naming its columns; nothing was imported`);
  }
  if (columns.includes(""))
    throw new UsageError(`${path}: line 1 names an empty column (a comma at the end of the line?): name each column, or drop the empty one; nothing was imported`);
  const unknown = columns.filter((c) => !CSV_COLUMNS.includes(c));
  if (unknown.length)
    throw new UsageError(
      `${path}: unknown column${unknown.length > 1 ? "s" : ""} ${unknown.map(namedWithNearest).join(", ")} (columns: ${CSV_COLUMNS.join(", ")}); nothing was imported`,
    );
  const twice = columns.filter((c, i) => columns.indexOf(c) !== i);
  if (twice.length) throw new UsageError(`${path}: column "${twice[0]}" is named twice; nothing was imported`);
  if (columns.includes("hash") === columns.includes("key"))
    throw new UsageError(`${path}: the header line must name a "hash" or a "key" column (one of them); nothing was imported`);
  return rows.map(({ record, info }) => {
    const at = `line ${info.lines}`;
    if (record.length !== columns.length) throw new UsageError(`${path} ${at}: ${record.length} cells for ${columns.length} columns; nothing was imported`);
    const entry: Record<string, unknown> = {};
    columns.forEach((column, i) => {
      // a key or hash is taken as it is; every other cell without the spaces around it
      const cell = column === "key" || column === "hash" ? record[i]! : record[i]!.trim();
      if (cell === "") return;
      if (column === "disabled") {
        // own properties only: "constructor" would find Object's, a function JSON drops, and the key import enabled
        const value = Object.hasOwn(BOOLEANS, cell.toLowerCase()) ? BOOLEANS[cell.toLowerCase()] : undefined;
        if (value === undefined) throw new UsageError(`${path} ${at}: "disabled" must be true, false, 1 or 0; nothing was imported`);
        entry.disabled = value;
      } else entry[column] = cell;
    });
    return { entry, at };
  });
}

/** --limit N for an override: a whole number. */
function wholeNumber(text: string, option: string): number {
  if (!/^\d+$/.test(text)) throw new UsageError(`--${option} takes a whole number, not ${JSON.stringify(text)}`);
  return Number(text);
}

async function main(): Promise<unknown> {
  const [verb, ...args] = positionals;
  if (verb === undefined || !(verb in VERBS)) {
    throw new UsageError(`unknown verb "${verb ?? ""}": show, set, tier, label, override, disable, enable, delete, list or import`);
  }
  checkLine(verb, args);
  // named once: "-" reads standard input, which a second reading finds empty
  const { target, rest } = VERBS[verb]!.key ? who(args) : { target: {}, rest: [] };
  await refuseHashAsKey(target);
  switch (verb) {
    case "show":
      return call("keys/get", target);
    case "set": {
      return call("keys/set", { ...target, tier: values.tier, label: values.label, disabled: values.disabled });
    }
    case "tier": {
      if (!rest[0]) throw new UsageError("name the tier: tier <key> <tier>");
      return changeField(`tier ${JSON.stringify(rest[0])}`, target, { tier: rest[0] });
    }
    case "label": {
      // set would replace the whole entry: a disabled key relabelled so would be enabled again
      if (rest[0] === undefined) throw new UsageError("give the label: label <key> <label>");
      return changeField("label", target, { label: rest[0] });
    }
    case "override": {
      const rule = rest[0];
      if (!rule) throw new UsageError("name the rule: override <key> <rule> --limit N --window W, or --clear");
      if (values.clear) {
        if (values.limit !== undefined || values.window !== undefined) throw new UsageError("--clear takes no --limit or --window");
        return call("keys/override", { ...target, rule, clear: true });
      }
      if (values.limit === undefined && values.window === undefined) throw new UsageError("give --limit, --window (or both), or --clear");
      const limit = values.limit === undefined ? undefined : wholeNumber(values.limit, "limit");
      if (values.window !== undefined && /^\d+$/.test(values.window)) throw new UsageError(`--window takes a duration with its unit (90s, 2m, 500ms), not ${values.window}`);
      return call("keys/override", { ...target, rule, limit, window: values.window });
    }
    case "disable":
    case "enable":
      return changeField(verb, target, { disabled: verb === "disable" });
    case "delete":
      return call("keys/delete", target);
    case "list": {
      const limit = values.limit === undefined ? (values.all ? 1000 : 100) : wholeNumber(values.limit, "limit");
      if (!values.all) return call("keys/list", { cursor: values.cursor, limit });
      const entries: unknown[] = [];
      let cursor: unknown = values.cursor;
      do {
        const page = await call("keys/list", { cursor, limit });
        if (!Array.isArray(page.entries)) throw new RefusedError(`${base} answered a page without entries`);
        // the gate's cursor is the page's last hash, past the one it was sent: one that is not
        // (the same page again, from a cache in front that ignores the body) would loop for ever
        const sent = typeof cursor === "string" ? cursor.toLowerCase() : "";
        if (page.cursor !== null && (typeof page.cursor !== "string" || !KEY_HASH.test(page.cursor) || page.cursor <= sent)) {
          throw new RefusedError(
            `${base} answered a page whose cursor ${JSON.stringify(page.cursor)?.slice(0, 80)} does not follow ${sent ? `the one sent (${sent})` : "the start"}: not a slidegate gate's list; nothing printed`,
          );
        }
        entries.push(...page.entries);
        cursor = page.cursor;
      } while (cursor);
      return { entries, count: entries.length };
    }
    case "import":
      return importFile(args[0]);
  }
}

async function importFile(path: string | undefined): Promise<unknown> {
  if (!path) throw new UsageError("name the file: import <file.csv | file.json>");
  const entries = readEntries(path);
  // a column of hashes named "key" (copied from list) would import each as a new entry: its
  // first key of 64 hex digits is asked about, one call (a file of hex keys is not asked per key)
  const hexKey = entries.find(({ entry }) => typeof entry.key === "string" && /^[0-9a-f]{64}$/i.test(trimKey(entry.key)));
  if (hexKey) {
    try {
      await refuseHashAsKey(
        hexKey.entry,
        `${path} ${hexKey.at}: its key is 64 hex digits: the hash of an entry the registry holds (copied from list?). A column of hashes is a "hash" column (an entry of a JSON file, a "hash" field); nothing was imported`,
      );
    } catch (e) {
      if (e instanceof RefusedError) throw new RefusedError(`${path}: nothing was imported; the gate, asked whether ${hexKey.at} is a hash, did not answer it: ${e.message}`);
      throw e;
    }
  }
  let imported = 0;
  let sending: string | undefined;
  // Ctrl-C: what has landed, and that running the file again is safe (an import merges). While
  // the gate checks the file, nothing has: said so, where a silent exit leaves the operator to guess
  let checking = true;
  process.once("SIGINT", () => {
    console.error(
      checking
        ? `interrupted while the gate checked the file: nothing was imported (${entries.length} entries in ${path})`
        : `interrupted: ${imported} of ${entries.length} imported${sending ? `; ${sending} were being sent and may have landed` : ""}. An import merges entries, so running it again is safe.`,
    );
    process.exit(130);
  });
  // From Authorization the gate reads the token after the scheme ("Bearer K" is K), which trimKey
  // alone does not: asked of the gate, as only it knows its key header
  if (entries.some(({ entry }) => typeof entry.key === "string")) {
    let configuration: Record<string, unknown>;
    try {
      configuration = await call("configuration", {});
    } catch (e) {
      if (e instanceof RefusedError) throw new RefusedError(`${path}: nothing was imported; the gate's configuration, read before the check, did not come: ${e.message}`);
      throw e;
    }
    const identity = configuration.identity as { header?: unknown } | undefined;
    if (identity?.header === "authorization") {
      refuseTwice(path, entries, (key) => {
        const read = readKey("authorization", key);
        return read.kind === "key" ? read.key : undefined;
      });
    }
  }
  // the gate checks every batch first (tiers, rules, hashes: what only it knows), writing nothing
  for (let i = 0; i < entries.length; i += IMPORT_BATCH) {
    const batch = entries.slice(i, i + IMPORT_BATCH);
    let answer: Record<string, unknown>;
    try {
      answer = await call("keys/import", { entries: batch.map((e) => e.entry), check: true });
    } catch (e) {
      // a gate that failed or went away mid-check wrote nothing: said, as a failed write says what landed
      if (e instanceof RefusedError && !e.message.startsWith("400 "))
        throw new RefusedError(
          `${path}: nothing was imported; the check of ${batch[0]!.at} to ${batch.at(-1)!.at} (entries ${i + 1}–${i + batch.length}) did not complete: ${e.message}`,
        );
      if (!(e instanceof RefusedError)) throw e;
      const entry = /entries\[(\d+)\]/.exec(e.message);
      const where = entry ? ` (${batch[Number(entry[1])]?.at ?? `entry ${i + Number(entry[1]) + 1}`})` : "";
      throw new UsageError(`${path}${where}: ${e.message}`);
    }
    if (answer.checked !== batch.length)
      throw new RefusedError(`${base} answered ${JSON.stringify(answer).slice(0, 200)} to a check of ${batch.length} entries (is it a slidegate gate of this version?)`);
    // a long file's check is a call a batch before anything is written: shown, or the import looks stuck
    if (entries.length > IMPORT_BATCH) console.error(`checked ${i + batch.length} of ${entries.length}`);
  }
  // a header line alone, or [], is a file that imports nothing: said, as a botched export would be
  if (entries.length === 0) console.error(`${path} holds no entries: nothing to import`);
  checking = false;
  for (let i = 0; i < entries.length; i += IMPORT_BATCH) {
    const batch = entries.slice(i, i + IMPORT_BATCH);
    sending = `${batch[0]!.at} to ${batch.at(-1)!.at}`;
    let answer: Record<string, unknown>;
    try {
      answer = await call("keys/import", { entries: batch.map((e) => e.entry) });
    } catch (e) {
      // the admin API names entries by their place in the batch: say where the batch is in the file.
      // A gate that refused it before the route wrote (a 400 of its check, 401, 404, 405, 429)
      // wrote none of it; one that failed or did not answer may have written some or all (a
      // store failing part-way, a 409 for a key of another type, an answer lost after the writes)
      const message = (e as Error).message;
      const landed = /^(?:400|401|404|405|429) /.test(message)
        ? "none of these landed"
        : "these may have landed, in part or whole; an import merges, so running the file again is safe";
      throw new RefusedError(`${path} ${sending} (entries ${i + 1}–${i + batch.length}; ${imported} imported before them, none after; ${landed}): ${message}`);
    }
    if (answer.imported !== batch.length)
      throw new RefusedError(`${base} answered ${JSON.stringify(answer).slice(0, 200)} for a batch of ${batch.length}, not {"imported":${batch.length}}`);
    imported += batch.length;
    sending = undefined;
    console.error(`imported ${imported} of ${entries.length}`);
  }
  return { imported };
}

/**
 * Changes one field of an existing entry and answers the entry. An existing one only: a
 * mistyped key must not become a registered one (set creates), and a key another operator
 * deleted (revoked) meanwhile must stay deleted. keys/update sets what it names and keeps the
 * rest as the gate holds it, in one write that answers 404 for a key that is not there:
 * writing back the whole entry read a moment before (keys/set) would undo another operator's
 * change made in between, and a read then an import would bring a deleted key back. A refusal is
 * told as of `what` the operator ran (`tier "gold"`), not as the route's ("tier: …").
 */
async function changeField(what: string, target: Record<string, string>, field: Record<string, unknown>): Promise<unknown> {
  try {
    return await call("keys/update", { ...target, ...field });
  } catch (e) {
    if (!(e instanceof RefusedError)) throw e;
    throw new RefusedError(`${what}: ${e.message.replace(/: (?:tier|label|disabled): /, ": ")}`);
  }
}

try {
  console.log(printable(JSON.stringify(await main(), null, 2)));
} catch (e) {
  console.error(`slidegate keys: ${printable((e as Error).message)}`);
  process.exit(e instanceof UsageError ? 2 : 1);
}
