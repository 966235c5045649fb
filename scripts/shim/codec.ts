/**
 * Upstash REST ⇄ RESP2 values. Requests: JSON scalars → the exact text Redis should see.
 * Replies: RESP2 values (Buffers from the client) → JSON, base64 at every depth when asked.
 */

export class BadRequest extends Error {
  readonly status: number;
  constructor(message: string, status = 400) {
    super(message);
    this.status = status;
  }
}

export type Command = [name: string, ...args: string[]];

// String.prototype.isWellFormed, which ES2023's types lack: in a u-mode pattern a surrogate
// pair is one code point, so only a surrogate without its partner matches
const LONE_SURROGATE = /\p{Surrogate}/u;

/**
 * One command from JSON. Numbers become the text JavaScript prints for them (String(n)),
 * booleans "true"/"false". null, arrays and objects are refused: Redis has no such values
 * and guessing one (an empty string, say) would store something the caller did not send.
 * A string with a lone surrogate ("\ud800", valid JSON) is refused for the same reason.
 */
export function toCommand(value: unknown, where: string): Command {
  if (!Array.isArray(value)) throw new BadRequest(`ERR ${where} must be a JSON array like ["SET","key","value"]`);
  if (value.length === 0) throw new BadRequest(`ERR ${where} is an empty command`);
  const parts = value.map((v, i) => {
    if (typeof v === "string") {
      if (LONE_SURROGATE.test(v)) {
        throw new BadRequest(
          `ERR ${where}[${i}] is not well-formed Unicode text: it holds a lone surrogate (such as "\\ud800"), which has no UTF-8 form, and Redis would store U+FFFD instead`,
        );
      }
      return v;
    }
    if (typeof v === "number" || typeof v === "boolean") return String(v);
    const kind = v === null ? "null" : Array.isArray(v) ? "an array" : "an object";
    throw new BadRequest(`ERR ${where}[${i}] is ${kind}; arguments must be strings, numbers or booleans`);
  });
  if (parts[0] === "") throw new BadRequest(`ERR ${where}[0] must name a command`);
  return [parts[0]!.toUpperCase(), ...parts.slice(1)];
}

/** A body that must be a list of commands (/pipeline, /multi-exec). */
export function toCommands(value: unknown): Command[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new BadRequest('ERR body must be a non-empty JSON array of commands, like [["SET","a","1"],["GET","a"]]');
  }
  return value.map((c, i) => toCommand(c, `command ${i}`));
}

const INTEGER_LITERAL = /^-?\d+$/;

/**
 * A request body's JSON. An integer written past 2^53 (`9007199254740993`, a count or ID a
 * caller writes by hand) becomes the string of its digits: read as a double it is another
 * integer (…992), which Redis would have stored or added in silence. Other numbers stay
 * numbers, for toCommand to print as JavaScript does (the official client only ever sends
 * those). The digits come from JSON.parse's own source text (`context.source`, given to a reviver
 * by the same V8 feature as JSON.rawJSON, which the shim checks for at start); a body with no run of 16 digits holds no such integer
 * (2^53 itself has 16) and is parsed without a reviver.
 */
export function parseBody(text: string): unknown {
  if (!/\d{16}/.test(text)) return JSON.parse(text);
  return JSON.parse(text, (_key, value: unknown, context?: { source?: string }) =>
    typeof value === "number" && !Number.isSafeInteger(value) && context?.source !== undefined && INTEGER_LITERAL.test(context.source) ? context.source : value,
  );
}

/** JSON text spliced in verbatim: an integer with every digit Redis sent. */
export interface RawJson {
  readonly rawJSON: string;
}
export type Json = string | number | null | RawJson | Json[];

// Node 22's JSON.rawJSON (not yet in TypeScript's lib): JSON.stringify writes its text as is.
const rawJSON = (JSON as unknown as { rawJSON(text: string): RawJson }).rawJSON;

/**
 * Redis integer replies, which the pool hands over as bigints so no digit is lost, become JSON
 * numbers written digit for digit: `INCRBY k 9007199254740993` answers `{"result":9007199254740993}`,
 * as Upstash does, where a JavaScript number would have sent …992.
 */
const integer = (value: bigint): RawJson => rawJSON(value.toString());

/** A RESP2 reply as JSON: integers stay numbers, nil stays null, every string is text or base64. */
export function encodeReply(reply: unknown, base64: boolean): Json {
  if (reply instanceof Uint8Array) {
    const bytes = Buffer.from(reply.buffer, reply.byteOffset, reply.byteLength);
    return bytes.toString(base64 ? "base64" : "utf8");
  }
  if (typeof reply === "bigint") return integer(reply);
  if (typeof reply === "string") return base64 ? Buffer.from(reply).toString("base64") : reply;
  if (typeof reply === "number" || reply === null) return reply;
  if (Array.isArray(reply)) return reply.map((r: unknown) => encodeReply(r, base64));
  // An error nested in an array reply (a script's redis.error_reply) is one of its strings to
  // the client, which decodes every string of a base64 reply: sent as bare text, "My Error"
  // reached it as the bytes that text decodes to. Only a whole answer's {"error"} stays text.
  if (reply instanceof Error) return base64 ? Buffer.from(reply.message).toString("base64") : reply.message;
  return String(reply);
}
