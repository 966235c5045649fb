#!/usr/bin/env node
/**
 * `npm run keys -- <verb> …`: manage the key registry of a running gate through its admin API.
 * SLIDEGATE_URL names the gate (http://127.0.0.1:8787 by default), ADMIN_TOKEN its admin token.
 *
 *   show      <key> | --hash <sha256>                      the key's entry
 *   set       <key> | --hash …  [--tier T] [--label L] [--disabled]   create or replace the entry
 *   tier      <key> | --hash …  <tier>                     change the tier, keeping the rest
 *   override  <key> | --hash …  <rule> [--limit N] [--window W] | --clear
 *   disable   <key> | --hash …                             refuse the key (403)
 *   enable    <key> | --hash …
 *   delete    <key> | --hash …
 *   list      [--limit N] [--cursor C] [--all]             entries by hash, a page (or all)
 *   import    <file.csv | file.json>                       many entries merged in, in batches, with progress
 *
 * A CSV has a header line naming its columns: `hash` (or `key`), `tier`, and optionally
 * `label`, `disabled`. A JSON file is an array of entries as the admin API takes them.
 * Output is JSON on stdout; progress and errors go to stderr. Exit codes: 0 done, 1 the gate
 * refused or failed (nothing after the failing batch was sent), 2 a wrong command line.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const IMPORT_BATCH = 1000;

class UsageError extends Error {}

const { values, positionals } = (() => {
  try {
    return parseArgs({
      allowPositionals: true,
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
      },
    });
  } catch (e) {
    console.error(`slidegate keys: ${(e as Error).message}`);
    process.exit(2);
  }
})();

const base = (process.env.SLIDEGATE_URL ?? "http://127.0.0.1:8787").replace(/\/$/, "");
const token = process.env.ADMIN_TOKEN;

class RefusedError extends Error {}

/** One admin call: the answer's JSON, or a RefusedError carrying the gate's own words. */
async function call(route: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
  if (!token) throw new UsageError("ADMIN_TOKEN is not set: export the gate's admin token first");
  let res: Response;
  try {
    res = await fetch(`${base}/__slidegate/${route}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new RefusedError(`could not reach ${base}: ${(e as Error).message}`);
  }
  const text = await res.text();
  let answer: Record<string, unknown>;
  try {
    answer = JSON.parse(text);
  } catch {
    throw new RefusedError(`${base} answered ${res.status} with something that is not JSON (is SLIDEGATE_URL a slidegate gate?)`);
  }
  if (!res.ok) throw new RefusedError(`${res.status} ${String(answer.title ?? "")}: ${String(answer.detail ?? text)}`);
  return answer;
}

/** The key the command line names: a raw key as the first argument, or --hash. */
function who(args: string[]): { target: Record<string, string>; rest: string[] } {
  if (values.hash !== undefined) return { target: { hash: values.hash }, rest: args };
  const [key, ...rest] = args;
  if (!key) throw new UsageError("name the key: a raw key as the first argument, or --hash <sha256>");
  return { target: { key }, rest };
}

/** Entries from a CSV (a header line, then one entry a line) or a JSON array. */
function readEntries(path: string): Record<string, unknown>[] {
  const text = readFileSync(path, "utf8");
  if (path.endsWith(".json")) {
    const parsed: unknown = JSON.parse(text);
    if (!Array.isArray(parsed)) throw new UsageError(`${path}: must hold a JSON array of entries`);
    return parsed as Record<string, unknown>[];
  }
  const [header, ...lines] = text.split(/\r?\n/).filter((l) => l.trim() !== "");
  const columns = (header ?? "").split(",").map((c) => c.trim());
  if (!columns.includes("hash") && !columns.includes("key")) throw new UsageError(`${path}: the header line must name a "hash" or "key" column`);
  return lines.map((line) => {
    const cells = line.split(",").map((c) => c.trim());
    const entry: Record<string, unknown> = {};
    columns.forEach((column, i) => {
      const cell = cells[i];
      if (cell === undefined || cell === "") return;
      entry[column] = column === "disabled" ? cell === "true" || cell === "1" : cell;
    });
    return entry;
  });
}

async function main(): Promise<unknown> {
  const [verb, ...args] = positionals;
  switch (verb) {
    case "show":
      return call("keys/get", who(args).target);
    case "set": {
      const { target } = who(args);
      return call("keys/set", { ...target, tier: values.tier, label: values.label, disabled: values.disabled });
    }
    case "tier": {
      const { target, rest } = who(args);
      if (!rest[0]) throw new UsageError("name the tier: tier <key> <tier>");
      const { hash: _h, ...entry } = await call("keys/get", target).catch((e): Record<string, unknown> => {
        if (e instanceof RefusedError && e.message.startsWith("404")) return { overrides: {} };
        throw e;
      });
      return call("keys/set", { ...target, ...entry, tier: rest[0], overrides: toWire(entry.overrides) });
    }
    case "override": {
      const { target, rest } = who(args);
      const rule = rest[0];
      if (!rule) throw new UsageError("name the rule: override <key> <rule> --limit N --window W, or --clear");
      if (values.clear) return call("keys/override", { ...target, rule, clear: true });
      if (values.limit === undefined && values.window === undefined) throw new UsageError("give --limit, --window (or both), or --clear");
      const limit = values.limit === undefined ? undefined : Number(values.limit);
      const window = values.window === undefined ? undefined : /^\d+$/.test(values.window) ? Number(values.window) : values.window;
      return call("keys/override", { ...target, rule, limit, window });
    }
    case "disable":
    case "enable": {
      const { target } = who(args);
      const { hash: _h, ...entry } = await call("keys/get", target);
      return call("keys/set", { ...target, ...entry, disabled: verb === "disable", overrides: toWire(entry.overrides) });
    }
    case "delete":
      return call("keys/delete", who(args).target);
    case "list": {
      const limit = values.limit === undefined ? (values.all ? 1000 : 100) : Number(values.limit);
      if (!values.all) return call("keys/list", { cursor: values.cursor, limit });
      const entries: unknown[] = [];
      let cursor: unknown = values.cursor;
      do {
        const page = await call("keys/list", { cursor, limit });
        entries.push(...(page.entries as unknown[]));
        cursor = page.cursor;
      } while (cursor);
      return { entries, count: entries.length };
    }
    case "import": {
      if (!args[0]) throw new UsageError("name the file: import <file.csv | file.json>");
      const entries = readEntries(args[0]);
      let imported = 0;
      for (let i = 0; i < entries.length; i += IMPORT_BATCH) {
        const batch = entries.slice(i, i + IMPORT_BATCH);
        try {
          imported += Number((await call("keys/import", { entries: batch })).imported);
        } catch (e) {
          // the admin API names entries by their place in the batch: say where the batch starts
          throw new RefusedError(`entries ${i + 1}–${i + batch.length} (${imported} imported before them, none after): ${(e as Error).message}`);
        }
        console.error(`imported ${imported} of ${entries.length}`);
      }
      return { imported };
    }
    default:
      throw new UsageError(`unknown verb "${verb ?? ""}": show, set, tier, override, disable, enable, delete, list or import`);
  }
}

/** Overrides as read (windowMs) back into what the admin API takes (window). */
function toWire(overrides: unknown): Record<string, { limit?: number; window?: number }> {
  const out: Record<string, { limit?: number; window?: number }> = {};
  for (const [rule, o] of Object.entries((overrides ?? {}) as Record<string, { limit?: number; windowMs?: number }>)) {
    out[rule] = { limit: o.limit, window: o.windowMs };
  }
  return out;
}

try {
  console.log(JSON.stringify(await main(), null, 2));
} catch (e) {
  console.error(`slidegate keys: ${(e as Error).message}`);
  process.exit(e instanceof UsageError ? 2 : 1);
}
