import { createHash } from "node:crypto";
import type { Command } from "./codec.ts";

/**
 * Upstash knows script flags that stock Redis refuses ("Unexpected flag in script shebang"),
 * such as `allow-key-locking`. The shim drops the flags Redis does not know before a script
 * reaches it, and remembers which SHA1 the client computed (over the text it sent) for which
 * SHA1 Redis knows (over the rewritten text), so EVALSHA, SCRIPT LOAD and SCRIPT EXISTS keep
 * working with the client's SHA1 — and NOSCRIPT still surfaces when Redis has lost the script.
 */

const REDIS_FLAGS = new Set(["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"]);
const MAX_MAPPINGS = 10_000;

const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");

/** `script` with unknown shebang flags removed, or undefined when Redis takes it as it is. */
export function rewriteShebang(script: string): string | undefined {
  if (!script.startsWith("#!")) return undefined;
  const end = script.indexOf("\n");
  const shebang = end < 0 ? script : script.slice(0, end);
  const [engine, ...options] = shebang.split(/\s+/);
  let changed = false;
  const kept = options
    .map((option) => {
      if (!option.startsWith("flags=")) return option;
      const flags = option.slice("flags=".length).split(",").filter(Boolean);
      const known = flags.filter((f) => REDIS_FLAGS.has(f));
      changed ||= known.length !== flags.length;
      return known.length ? `flags=${known.join(",")}` : "";
    })
    .filter(Boolean);
  if (!changed) return undefined;
  return [engine, ...kept].join(" ") + script.slice(shebang.length);
}

export interface Translation {
  command: Command;
  /** turns Redis's reply into the one the client expects, when they differ */
  reply?: (reply: unknown) => unknown;
}

export function createScriptRegistry() {
  /** client SHA1 → Redis SHA1, oldest first */
  const shas = new Map<string, string>();
  const remember = (original: string, rewritten: string) => {
    const client = sha1(original);
    shas.delete(client);
    if (shas.size >= MAX_MAPPINGS) shas.delete(shas.keys().next().value!);
    shas.set(client, sha1(rewritten));
    return client;
  };
  const toRedis = (sha: string) => shas.get(sha.toLowerCase()) ?? sha;

  /** The command as Redis must see it. */
  function translate(command: Command): Translation {
    const [name, ...args] = command;
    if ((name === "EVAL" || name === "EVAL_RO") && args[0] !== undefined) {
      const rewritten = rewriteShebang(args[0]);
      if (rewritten === undefined) return { command };
      remember(args[0], rewritten);
      return { command: [name, rewritten, ...args.slice(1)] };
    }
    if ((name === "EVALSHA" || name === "EVALSHA_RO") && args[0] !== undefined) {
      return { command: [name, toRedis(args[0]), ...args.slice(1)] };
    }
    if (name === "SCRIPT") {
      const sub = args[0]?.toUpperCase();
      if (sub === "LOAD" && args[1] !== undefined) {
        const rewritten = rewriteShebang(args[1]);
        if (rewritten === undefined) return { command };
        const client = remember(args[1], rewritten);
        return { command: [name, args[0]!, rewritten], reply: () => client };
      }
      if (sub === "EXISTS") return { command: [name, args[0]!, ...args.slice(1).map(toRedis)] };
      if (sub === "FLUSH") shas.clear();
    }
    return { command };
  }

  return { translate };
}

export type ScriptRegistry = ReturnType<typeof createScriptRegistry>;
