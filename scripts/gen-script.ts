#!/usr/bin/env node
/**
 * `npm run gen:script`: writes src/script/sliding-window.ts from src/script/sliding-window.lua, the commented source
 * of truth. What ships (and what the Worker bundles) is then plain TypeScript: no bundler rule
 * for .lua files in this project or in any project that installs slidegate. A test fails when
 * the two disagree.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";

export const LUA_PATH = new URL("../src/script/sliding-window.lua", import.meta.url);
export const MODULE_PATH = new URL("../src/script/sliding-window.ts", import.meta.url);

/** The TypeScript module for a given script text. */
export function scriptModule(lua: string): string {
  const sha1 = createHash("sha1").update(lua).digest("hex");
  return `// Generated from sliding-window.lua by \`npm run gen:script\`. Edit the .lua file, then run it.

/** The sliding-window script, exactly as sent to Redis (sliding-window.lua is its commented source). */
export const SLIDING_WINDOW_SCRIPT: string = ${JSON.stringify(lua)};

/** SHA1 of {@link SLIDING_WINDOW_SCRIPT}: what EVALSHA names it by. */
export const SLIDING_WINDOW_SHA1 = "${sha1}";
`;
}

if (import.meta.main) {
  writeFileSync(MODULE_PATH, scriptModule(readFileSync(LUA_PATH, "utf8")));
  console.log("wrote src/script/sliding-window.ts from src/script/sliding-window.lua");
}
