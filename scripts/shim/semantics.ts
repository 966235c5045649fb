import type { Command } from "./codec.ts";
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

/** SCAN, then TYPE of every key it found, in one atomic round trip. */
const SCAN_WITH_TYPES = `local reply = redis.call('SCAN', unpack(ARGV))
local typed = {}
for i, key in ipairs(reply[2]) do
  typed[2 * i - 1] = key
  typed[2 * i] = redis.call('TYPE', key).ok
end
return {reply[1], typed}`;

/**
 * Runs one function of a library read-only: EVAL_RO evaluates the library's code with a
 * `redis` whose register_function keeps the callback asked for, then calls it. Every other
 * redis.* call is the real one, so a write fails as in any read-only script. ARGV ends with the
 * library code and the function name; the shebang line gives way to the `redis` binding, so
 * error line numbers match the library's.
 */
const FUNCTION_READ_ONLY = `local n = #ARGV
local code, name = ARGV[n - 1], ARGV[n]
local args = {}
for i = 1, n - 2 do args[i] = ARGV[i] end
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

const text = (value: unknown) => (value instanceof Uint8Array ? Buffer.from(value).toString("utf8") : String(value));

/** A RESP2 flat [key, value, key, value, …] array as a map with text keys. */
function fields(reply: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (!Array.isArray(reply)) return map;
  for (let i = 0; i + 1 < reply.length; i += 2) map.set(text(reply[i]), reply[i + 1]);
  return map;
}

/** The library code and flags of function `name`, from FUNCTION LIST WITHCODE. */
function findFunction(libraries: unknown, name: string): { code: string; flags: string[] } | undefined {
  for (const library of Array.isArray(libraries) ? libraries : []) {
    const lib = fields(library);
    const functions = lib.get("functions");
    for (const fn of Array.isArray(functions) ? functions : []) {
      const f = fields(fn);
      if (text(f.get("name")) !== name) continue;
      const flags = f.get("flags");
      return { code: text(lib.get("library_code")), flags: Array.isArray(flags) ? flags.map(text) : [] };
    }
  }
  return undefined;
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
 * const semantics = createSemantics(pool);
 * await semantics.translate(["COPY", "k", "k"]); // { command: ["EXISTS", "k"], reply: () => 0n }
 */
export function createSemantics(pool: RedisPool) {
  /** One extra round trip, only for FCALL_RO: whether the function carries no-writes. */
  async function fcallReadOnly(command: Command): Promise<Translation> {
    const [, name, numkeys, ...rest] = command;
    if (name === undefined || numkeys === undefined) return { command };
    // More keys than arguments would take the library code and the function name, which the
    // wrapper appends, for keys: Redis's own refusal is the answer, and FCALL_RO as sent gets it.
    if (/^\d+$/.test(numkeys) && Number(numkeys) > rest.length) return { command };
    const [[error, libraries]] = (await pool.exec([["FUNCTION", "LIST", "WITHCODE"]])) as [[Error | null, unknown]];
    const fn = error ? undefined : findFunction(libraries, name);
    if (!fn || fn.flags.includes("no-writes")) return { command };
    return { command: ["EVAL_RO", FUNCTION_READ_ONLY, numkeys, ...rest, fn.code, name] };
  }

  /** The command Upstash's answer needs, or undefined when Redis's own answer is Upstash's. */
  function translate(command: Command): Translation | Promise<Translation> | undefined {
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
  }

  return { translate };
}
