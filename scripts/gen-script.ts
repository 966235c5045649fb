#!/usr/bin/env node
/**
 * `npm run gen:script`: writes src/script/sliding-window.ts from src/script/sliding-window.lua, the commented source
 * of truth. What ships (and what the Worker bundles) is then plain TypeScript: no bundler rule
 * for .lua files in this project or in any project that installs slidegate. What ships is the
 * script without its comments (see `compact`). A test fails when the two disagree.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

export const LUA_PATH = new URL("../src/script/sliding-window.lua", import.meta.url);
export const MODULE_PATH = new URL("../src/script/sliding-window.ts", import.meta.url);

/**
 * The script as sent to Redis: the .lua file without its comments and blank lines, which are
 * for its readers, while every byte of the script is in every Worker bundle and every EVAL.
 * The first line (the flags Upstash reads) stays. A comment after code on the same line is
 * refused rather than guessed at: telling it from a "--" inside a string takes a Lua lexer.
 *
 * @example
 * compact("#!lua flags=x\n-- why\nlocal a = 1\n"); // "#!lua flags=x\nlocal a = 1\n"
 */
export function compact(lua: string): string {
  const [first = "", ...rest] = lua.split("\n");
  const kept = [first];
  let inBlock = false;
  for (const [i, line] of rest.entries()) {
    const text = line.trim();
    if (inBlock) {
      inBlock = !text.includes("]]");
    } else if (text.startsWith("--[[")) {
      inBlock = !text.includes("]]");
    } else if (text !== "" && !text.startsWith("--")) {
      if (line.includes("--")) throw new Error(`sliding-window.lua line ${i + 2}: a comment after code; give it a line of its own`);
      kept.push(line);
    }
  }
  return `${kept.join("\n")}\n`;
}

/** The TypeScript module for a given .lua text: the script it ships (see `compact`) and its SHA1. */
export function scriptModule(source: string): string {
  const lua = compact(source);
  const sha1 = createHash("sha1").update(lua).digest("hex");
  return `// Generated from sliding-window.lua by \`npm run gen:script\`. Edit the .lua file, then run it.

/** The sliding-window script, exactly as sent to Redis: sliding-window.lua, its commented source, without the comments. */
export const SLIDING_WINDOW_SCRIPT: string = ${JSON.stringify(lua)};

/** SHA1 of {@link SLIDING_WINDOW_SCRIPT}: what EVALSHA names it by. */
export const SLIDING_WINDOW_SHA1 = "${sha1}";
`;
}

if (import.meta.main) {
  writeFileSync(MODULE_PATH, scriptModule(readFileSync(LUA_PATH, "utf8")));
  console.log("wrote src/script/sliding-window.ts from src/script/sliding-window.lua");
}
