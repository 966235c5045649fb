import { BadRequest, type Command } from "./codec.ts";
import type { Translation } from "./lua-flags.ts";
import type { RedisPool } from "./pool.ts";

/**
 * Where Upstash answers differently from a stock redis-server and the official client relies
 * on Upstash's answer, the shim reproduces it:
 *
 * - `FLUSHALL` empties the one database (Upstash has no other), never the server's others;
 * - `COPY k k` answers 0 (stock Redis: "source and destination objects are the same");
 * - `SCAN … WITHTYPE` answers `[cursor, [key, type, key, type, …]]` (an Upstash extension);
 * - `FCALL_RO` runs a function registered without the `no-writes` flag, read-only: it works
 *   while the function only reads, and fails with Redis's read-only error when it writes
 *   (stock Redis refuses the call outright: "Can not execute a script with write flag …").
 *
 * Each rewrite keeps one command in one place, so pipelines keep their order and transactions
 * their atomicity.
 */

/**
 * SCAN, then TYPE of every key it found, in one atomic round trip. SCAN's refusal (an invalid
 * cursor, a syntax error) is returned, not raised: raised, Redis adds the script's SHA1 and
 * line to the text, where a plain SCAN answers Redis's words alone.
 */
const SCAN_WITH_TYPES = `local reply = redis.pcall('SCAN', unpack(ARGV))
if reply.err then return reply end
local typed = {}
for i, key in ipairs(reply[2]) do
  typed[2 * i - 1] = key
  typed[2 * i] = redis.call('TYPE', key).ok
end
return {reply[1], typed}`;

/**
 * A script that runs one function of `code` (a library) read-only: it evaluates the library
 * with a `redis` whose register_function keeps the callback asked for, then calls it. Every
 * other redis.* call is the real one, so a write fails as in any read-only script. ARGV ends
 * with the function name; the shebang line gives way to the `redis` binding, so error line
 * numbers match the library's. The code is part of the script's text, not an argument: loaded
 * once, the script runs by its SHA1, and the library crosses to Redis once per request however
 * many calls it serves (as an argument, 500 calls of a 900 KB library in an 11 KB pipeline
 * grew the shim by 1.5 GB).
 */
function readOnlyScript(code: string): string {
  // a long bracket the code cannot close: level 1 at least (Lua 5.1 refuses [[ inside [[ ]]);
  // the newlines around the code keep a ] it ends with from joining the closing bracket, and
  // Lua drops the one after the opening
  let level = "=";
  while (code.includes(`]${level}]`)) level += "=";
  return `local code = [${level}[
${code}
]${level}]
local n = #ARGV
local name = ARGV[n]
local args = {}
for i = 1, n - 1 do args[i] = ARGV[i] end
local callback
local api = setmetatable({
  register_function = function(spec, fn)
    if type(spec) == 'table' then spec, fn = spec.function_name, spec.callback end
    if spec == name then callback = fn end
  end,
}, { __index = redis })
local library = assert(loadstring('local redis = ...; ' .. string.gsub(code, '^#![^\\n]*', ''), '@user_function'))
library(api)
return callback(KEYS, args)`;
}

const text = (value: unknown) => (value instanceof Uint8Array ? Buffer.from(value).toString("utf8") : String(value));

/** A RESP2 flat [key, value, key, value, …] array as a map with text keys. */
function fields(reply: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (!Array.isArray(reply)) return map;
  for (let i = 0; i + 1 < reply.length; i += 2) map.set(text(reply[i]), reply[i + 1]);
  return map;
}

/**
 * Every function's library code and flags, from FUNCTION LIST WITHCODE: each library's code
 * decoded once, however many of its functions a request calls.
 */
function functionsOf(libraries: unknown): Map<string, { code: string; flags: string[] }> {
  const found = new Map<string, { code: string; flags: string[] }>();
  for (const library of Array.isArray(libraries) ? libraries : []) {
    const lib = fields(library);
    const functions = lib.get("functions");
    const code = text(lib.get("library_code"));
    for (const fn of Array.isArray(functions) ? functions : []) {
      const f = fields(fn);
      const flags = f.get("flags");
      found.set(text(f.get("name")), { code, flags: Array.isArray(flags) ? flags.map(text) : [] });
    }
  }
  return found;
}

/** SCAN's arguments without WITHTYPE, or undefined when it was not asked for. */
function withoutWithType(args: string[]): string[] | undefined {
  const kept = [args[0]!];
  let asked = false;
  for (let i = 1; i < args.length; i++) {
    const word = args[i]!.toUpperCase();
    if (word === "WITHTYPE") asked = true;
    else if ((word === "MATCH" || word === "COUNT" || word === "TYPE") && i + 1 < args.length) kept.push(args[i]!, args[++i]!);
    else kept.push(args[i]!);
  }
  return asked ? kept : undefined;
}

/**
 * @example
 * const translate = createSemantics(pool).forRequest();
 * await translate(["COPY", "k", "k"]); // { command: ["EXISTS", "k"], reply: () => 0n }
 */
export function createSemantics(pool: RedisPool) {
  /**
   * One request's translations. FCALL_RO costs extra round trips, made once per request: one
   * FUNCTION LIST for all its calls, one SCRIPT LOAD per library they use.
   */
  function forRequest() {
    let functions: Promise<Map<string, { code: string; flags: string[] }>> | undefined;
    const loaded = new Map<string, Promise<string>>();

    async function fcallReadOnly(command: Command): Promise<Translation> {
      const [, name, numkeys, ...rest] = command;
      if (name === undefined || numkeys === undefined) return { command };
      // More keys than arguments would take the function name, which the script appends, for
      // a key: Redis's own refusal is the answer, and FCALL_RO as sent gets it.
      if (/^\d+$/.test(numkeys) && Number(numkeys) > rest.length) return { command };
      functions ??= pool.exec([["FUNCTION", "LIST", "WITHCODE"]]).then((replies) => {
        const [[error, reply]] = replies as [[Error | null, unknown]];
        return functionsOf(error ? undefined : reply);
      });
      const fn = (await functions).get(name);
      if (!fn || fn.flags.includes("no-writes")) return { command };
      let sha = loaded.get(fn.code);
      if (!sha) {
        sha = pool.loadScript(readOnlyScript(fn.code)).catch((e: unknown) => {
          throw e instanceof Error && e.name === "ReplyError" ? new BadRequest(e.message) : e;
        });
        loaded.set(fn.code, sha);
      }
      // Loaded a moment ago: only a SCRIPT FLUSH or a restart of Redis in that moment makes
      // this call answer NOSCRIPT.
      return { command: ["EVALSHA_RO", await sha, numkeys, ...rest, name] };
    }

    /** The command Upstash's answer needs, or undefined when Redis's own answer is Upstash's. */
    return function translate(command: Command): Translation | Promise<Translation> | undefined {
      const [name, ...args] = command;
      switch (name) {
        case "FLUSHALL":
          return { command: ["FLUSHDB", ...args] };
        case "COPY": {
          const [source, destination, option] = args;
          const plain = args.length === 2 || (args.length === 3 && option!.toUpperCase() === "REPLACE");
          // EXISTS keeps the command's place (and its key's slot) in a pipeline or transaction.
          if (plain && source === destination) return { command: ["EXISTS", source!], reply: () => 0n };
          return undefined;
        }
        case "SCAN": {
          const scanArgs = args.length ? withoutWithType(args) : undefined;
          return scanArgs ? { command: ["EVAL_RO", SCAN_WITH_TYPES, "0", ...scanArgs] } : undefined;
        }
        case "FCALL_RO":
          return fcallReadOnly(command);
        default:
          return undefined;
      }
    };
  }

  return { forRequest };
}
