import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { services } from "../helpers/shim.ts";

/**
 * The oldest Hono the peer range admits, installed from the registry, running an app through
 * this repository's middleware. The middleware writes its headers with `c.header()` after
 * `next()`: Hono before 4.7.7 set them on the response as it was, so a route returning `fetch()`
 * (immutable headers) became a 500 after the route had run (honojs/hono#4055). And its router
 * reads the path up to the URL's `?` alone, a fragment included (honojs/hono#4627 stopped it at `#`).
 */
const peer = (JSON.parse(readFileSync("package.json", "utf8")) as { peerDependencies: Record<string, string> }).peerDependencies.hono!;

describe("the oldest Hono the peer dependency admits", () => {
  let dir: string;
  beforeAll(() => {
    const oldest = /^\^(\d+\.\d+\.\d+)$/.exec(peer)?.[1];
    expect(oldest, `peerDependencies.hono "${peer}": a caret range, whose floor this test installs`).toBeDefined();
    dir = mkdtempSync(join(tmpdir(), "slidegate-hono-peer-"));
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "hono-peer", version: "0.0.0", private: true, type: "module" }));
    const npm = spawnSync("npm", ["install", `hono@${oldest}`, "--prefer-offline", "--no-audit", "--no-fund"], { cwd: dir, encoding: "utf8" });
    expect(npm.status, npm.stdout + npm.stderr).toBe(0);
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs `body` after an app built on the old Hono with the middleware of this repository's source (Node strips its types); its stdout, parsed. */
  const run = (body: string): unknown => {
    writeFileSync(
      join(dir, "app.mjs"),
      `import { Hono } from "hono";
import { rateLimit } from ${JSON.stringify(resolve("src/adapters/hono.ts"))};
const app = new Hono();
app.onError((err, c) => c.text(String(err), err.status ?? 500));
${body}`,
    );
    const app = spawnSync(process.execPath, ["app.mjs"], { cwd: dir, encoding: "utf8", env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}` } });
    expect(app.stderr).toBe("");
    return JSON.parse(app.stdout);
  };
  const store = () => `url: ${JSON.stringify(services().shimUrl)}, token: ${JSON.stringify(services().shimToken)}, prefix: "honopeer${Date.now()}"`;

  it("sets the middleware's headers on a route that returns fetch()", () => {
    const out = run(`app.use(rateLimit({ ${store()}, rules: [{ name: "default", limit: 5, window: "10s" }], clientIp: () => "192.0.2.44" }));
app.get("/", () => fetch(${JSON.stringify(services().originUrl)}));
const res = await app.request("/");
console.log(JSON.stringify({ status: res.status, remaining: res.headers.get("x-ratelimit-remaining"), body: (await res.text()).slice(0, 200) }));
`);
    expect(out).toMatchObject({ status: 200, remaining: "4" });
  });

  it("counts a request whose URL carries a fragment, which this router reads as path (/v1/users/1#/avatar runs /v1/users/:id/avatar), against the route's rule", () => {
    // @hono/node-server hands the app `POST /v1/users/1#/avatar` with its fragment, as app.request() does here
    const out =
      run(`app.use(rateLimit({ ${store()}, rules: [{ name: "avatar", limit: 1, window: "1m", path: "/v1/users/*/avatar", methods: ["POST"] }], clientIp: () => "192.0.2.45" }));
app.post("/v1/users/:id/avatar", (c) => c.text("avatar " + c.req.param("id")));
const statuses = [];
for (const path of ["/v1/users/1/avatar", "/v1/users/1#/avatar", "/v1/users/2#/avatar"]) {
  const res = await app.request("http://app.example" + path, { method: "POST" });
  statuses.push(res.status + " " + (await res.text()).slice(0, 40));
}
console.log(JSON.stringify(statuses));
`);
    // the router does run the avatar handler for both spellings: only the limit stands between
    expect(out).toEqual(["200 avatar 1", expect.stringMatching(/^429 /), expect.stringMatching(/^429 /)]);
  });
});
