#!/usr/bin/env node
/**
 * `npm run build:package` (and `npm pack`, through `prepack`): compiles what the package ships
 * into lib/ — the library, the Hono middleware and the gateway from src/ (JavaScript and
 * declarations, tsconfig.build.json), and the shim from scripts/shim/ (JavaScript for Node,
 * tsconfig.build-shim.json) — so a project that installs slidegate needs no TypeScript
 * loader and no bundler rule, and the shim runs on plain Node (which strips no types inside
 * node_modules).
 *
 * @example
 * npm run build:package && ls lib   # adapters/ config/ … index.js index.d.ts shim/
 */
import { spawn } from "node:child_process";
import { chmodSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const lib = join(root, "lib");
const tsc = join(createRequire(import.meta.url).resolve("typescript/package.json"), "..", "bin", "tsc");

/**
 * tsc rewrites `./x.ts` to `./x.js` in the JavaScript it emits but not in declarations; a
 * consumer's TypeScript reads `.ts` there, but editors and other tools look for a file that
 * is not shipped. Rewritten here, in import/export specifiers and `import("…")` types.
 */
export function rewriteDeclarationSpecifiers(text: string): string {
  return text.replace(/((?:from|import)\s*\(?\s*["'])(\.{1,2}\/[^"']*?)\.ts(["'])/g, "$1$2.js$3");
}

if (import.meta.main) {
  rmSync(lib, { recursive: true, force: true });
  // the two projects share nothing: compiled side by side
  const failed = (
    await Promise.all(
      ["tsconfig.build.json", "tsconfig.build-shim.json"].map(
        (project) =>
          new Promise<string | undefined>((resolve) => {
            spawn(process.execPath, [tsc, "-p", join(root, project)], { stdio: "inherit" }).once("exit", (code) => resolve(code === 0 ? undefined : project));
          }),
      ),
    )
  ).filter(Boolean);
  if (failed.length) {
    console.error(`build:package: tsc -p ${failed.join(", ")} failed`);
    process.exit(1);
  }
  for (const file of readdirSync(lib, { recursive: true, encoding: "utf8" })) {
    if (!file.endsWith(".d.ts")) continue;
    const path = join(lib, file);
    writeFileSync(path, rewriteDeclarationSpecifiers(readFileSync(path, "utf8")));
  }
  chmodSync(join(lib, "shim", "main.js"), 0o755);
  console.log("build:package: wrote lib/ (the library, the Hono middleware, the gateway and the shim)");
}
