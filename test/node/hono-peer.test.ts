import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { services } from "../helpers/shim.ts";

/**
 * The middleware writes its headers with `c.header()` after `next()`. Hono before 4.7.7 set them
 * on the response as it was, so a route returning `fetch()` (immutable headers) became a 500
 * after the route had run (honojs/hono#4055). The oldest Hono the peer range admits is
 * installed from the registry here and runs such a route through the middleware.
 */
const peer = (JSON.parse(readFileSync("package.json", "utf8")) as { peerDependencies: Record<string, string> }).peerDependencies.hono!;

describe("the oldest Hono the peer dependency admits", () => {
  it("sets the middleware's headers on a route that returns fetch()", () => {
    const oldest = /^\^(\d+\.\d+\.\d+)$/.exec(peer)?.[1];
    expect(oldest, `peerDependencies.hono "${peer}": a caret range, whose floor this test installs`).toBeDefined();
    const dir = mkdtempSync(join(tmpdir(), "slidegate-hono-peer-"));
    try {
      writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "hono-peer", version: "0.0.0", private: true, type: "module" }));
      const npm = spawnSync("npm", ["install", `hono@${oldest}`, "--prefer-offline", "--no-audit", "--no-fund"], { cwd: dir, encoding: "utf8" });
      expect(npm.status, npm.stdout + npm.stderr).toBe(0);
      const s = services();
      // the app's Hono is the old one; the middleware is this repository's source (Node strips its types)
      writeFileSync(
        join(dir, "app.mjs"),
        `import { Hono } from "hono";
import { rateLimit } from ${JSON.stringify(resolve("src/adapters/hono.ts"))};
const app = new Hono();
app.onError((err, c) => c.text(String(err), 500));
app.use(rateLimit({ url: ${JSON.stringify(s.shimUrl)}, token: ${JSON.stringify(s.shimToken)}, prefix: "honopeer${Date.now()}", rules: [{ name: "default", limit: 5, window: "10s" }], clientIp: () => "192.0.2.44" }));
app.get("/", () => fetch(${JSON.stringify(s.originUrl)}));
const res = await app.request("/");
console.log(JSON.stringify({ status: res.status, remaining: res.headers.get("x-ratelimit-remaining"), body: (await res.text()).slice(0, 200) }));
`,
      );
      const run = spawnSync(process.execPath, ["app.mjs"], { cwd: dir, encoding: "utf8", env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}` } });
      expect(run.stderr).toBe("");
      expect(JSON.parse(run.stdout)).toMatchObject({ status: 200, remaining: "4" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
