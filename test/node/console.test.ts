import { createHash } from "node:crypto";
import { copyFileSync, mkdirSync } from "node:fs";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fleet } from "../../scripts/lib/fleet.ts";
import { type ConsoleBrowser, consoleBrowser, holdCalls } from "../helpers/console-browser.ts";
import { rateLimits, startGateFleet, startGateIsolate } from "../helpers/miniflare.ts";

// The console in a real browser: Debian's Chromium driven by Playwright, against the built
// Worker in workerd (three isolates sharing the test shim, Redis and origin). Screenshots go
// to dist/ (CI keeps them); SLIDEGATE_CONSOLE_SCREENSHOT=docs/console.png also copies the
// health view there, for the README.
const ADMIN_TOKEN = crypto.randomUUID().replace(/-/g, "");
const KEY = "sk-live-acme";
const IP = "198.51.100.10";
const OTHER_IP = "198.51.100.11";

let fleet: Fleet;
let context: BrowserContext;
let page: Page;
let browser: ConsoleBrowser;
let consoleUrl: string;
let sent = 0;
const dialogs: string[] = [];

/** One request from a client, on the next isolate in turn: its status. */
async function request(headers: Record<string, string>): Promise<number> {
  const isolate = fleet.isolates[sent++ % fleet.isolates.length]!;
  const res = await isolate.dispatchFetch("http://gate.example/v1/things", { headers });
  await res.arrayBuffer();
  return res.status;
}
const fromIp = (ip: string) => request({ "cf-connecting-ip": ip });
const withKey = () => request({ "cf-connecting-ip": "203.0.113.50", "x-api-key": KEY });

async function adminCall(route: string, body: unknown) {
  const res = await fleet.isolates[0]!.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const text = (selector: string) => page.locator(selector).first().innerText();

/** Refreshes the health view until `selector` reads `want` (figures arrive within seconds), or gives up after 60 s. */
async function refreshUntil(selector: string, want: string): Promise<string> {
  const deadline = Date.now() + 60_000;
  let seen = "";
  for (;;) {
    // what is on the page now is stale: read only what the refresh draws
    await page.evaluate('document.querySelectorAll("[data-total]").forEach((e) => e.remove())');
    await page.locator("#refresh").click();
    await page.locator(selector).first().waitFor();
    seen = await text(selector);
    if (seen === want || Date.now() > deadline) return seen;
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Clicks an action of the identity view, accepts its confirmation, and returns the result it shows. */
async function act(selector: string): Promise<string> {
  const before = dialogs.length;
  await page.evaluate('document.getElementById("result").textContent = ""');
  await page.locator(selector).click();
  await page.locator("#result:not(:empty):not([aria-busy])").waitFor();
  expect(dialogs.length, "the action asked for confirmation").toBe(before + 1);
  return page.locator("#result").innerText();
}

/**
 * A gate in front of an origin that serves a page at every path, as an API's docs or user
 * content would be: the same origin as the console the gate serves at /__slidegate/.
 */
async function gateBeforeOriginPage() {
  const { createServer } = await import("node:http");
  const origin = createServer((_, res) => res.writeHead(200, { "content-type": "text/html" }).end("<!doctype html><title>an origin page</title><p>docs</p>"));
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  const gate = await startGateIsolate({
    ADMIN_TOKEN,
    ORIGIN_URL: `http://127.0.0.1:${(origin.address() as { port: number }).port}`,
    RATE_LIMITS: rateLimits({ rules: [{ name: "hour", limit: 1000, window: "1h" }] }),
  });
  return { gate, origin };
}

/**
 * Runs `body` with the URL of a gate in front of an origin page (`gateBeforeOriginPage`) and a
 * tab of the browser's own, then takes them all down.
 */
async function withGateBeforeOriginPage(body: (url: string, tab: Page) => Promise<void>) {
  const { gate, origin } = await gateBeforeOriginPage();
  const tab = await context.newPage();
  try {
    await body((await gate.ready).href, tab);
  } finally {
    await tab.close();
    await gate.dispose();
    origin.close();
  }
}

/** Signs in at the console `tab` shows, and waits for its first view. */
async function signInHere(tab: Page) {
  await tab.locator("#token").fill(ADMIN_TOKEN);
  await tab.locator("#login-form button").click();
  await tab.locator("#refresh").waitFor();
}

/** Everything of the origin that a script of any of its pages reads in `tab`: its storages, its cookies, its databases. */
function originStorage(tab: Page) {
  return tab.evaluate(`(async () => ({
    session: { ...sessionStorage },
    local: { ...localStorage },
    cookie: document.cookie,
    databases: (await indexedDB.databases()).map((d) => d.name),
  }))()`);
}

function screenshot(name: string) {
  mkdirSync("dist", { recursive: true });
  return page.screenshot({ path: `dist/console-${name}.png`, fullPage: true });
}

beforeAll(async () => {
  fleet = await startGateFleet(3, {
    ADMIN_TOKEN,
    RATE_LIMITS: rateLimits({
      identity: { header: "x-api-key" },
      defaultTier: "free",
      denialCacheSize: 0,
      timeout: 30_000,
      tiers: {
        // windows no run outlasts: what the page shows of usage is what the test sent
        free: {
          rules: [
            { name: "hour", limit: 5, window: "1h" },
            { name: "burst", limit: 3, window: "1s", shadow: true, path: "/v2/*" },
          ],
        },
        paid: { rules: [{ name: "hour", limit: 8, window: "1h" }] },
      },
      deny: { ips: ["192.0.2.66"] },
    }),
  });
  consoleUrl = `${await fleet.isolates[0]!.ready}__slidegate/`;
  browser = await consoleBrowser(dialogs);
  ({ context, page } = browser);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await fleet?.dispose();
});

describe("the console in a browser", () => {
  it("signs in with the admin token kept in the page's memory only, and refuses a wrong one", async () => {
    await page.goto(consoleUrl);
    await page.locator("#token").fill("not-the-token");
    await page.locator("#login-form button").click();
    await expect.poll(() => text("#login-error")).toBe("The admin token was refused.");
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);

    // a gate that does not answer: the page says so and keeps no token
    await page.route("**/__slidegate/configuration", (route) => route.abort("connectionrefused"));
    await page.locator("#token").fill(ADMIN_TOKEN);
    await page.locator("#login-form button").click();
    await expect.poll(() => text("#login-error")).toMatch(/^The gate did not answer/);
    expect(await page.evaluate(() => sessionStorage.length)).toBe(0);
    await page.unroute("**/__slidegate/configuration");

    // every call the page makes goes to this gate's /__slidegate/, and nowhere else
    const called: string[] = [];
    page.on("request", (r) => void (r.resourceType() === "fetch" && called.push(r.url())));
    await page.locator("#token").fill(ADMIN_TOKEN);
    await page.locator("#login-form button").click();
    await page.locator("#refresh").waitFor();
    expect(await originStorage(page)).toEqual({ session: {}, local: {}, cookie: "", databases: [] });
    expect((await context.cookies()).length).toBe(0);
    expect(page.url()).not.toContain(ADMIN_TOKEN);
    expect(called.length).toBeGreaterThan(0);
    for (const url of called) expect(url.startsWith(new URL("/__slidegate/", consoleUrl).href), url).toBe(true);
  });

  it("shows exactly the decisions sent across three isolates, per outcome, in its numbers and charts", async () => {
    expect((await adminCall("keys/set", { key: KEY, tier: "paid", label: "Acme Corp" })).status).toBe(200);
    const codes = { ip: [] as number[], key: [] as number[], other: [] as number[], denylisted: [] as number[] };
    for (let i = 0; i < 9; i++) codes.ip.push(await fromIp(IP));
    for (let i = 0; i < 11; i++) codes.key.push(await withKey());
    for (let i = 0; i < 3; i++) codes.other.push(await fromIp(OTHER_IP));
    for (let i = 0; i < 2; i++) codes.denylisted.push(await fromIp("192.0.2.66"));
    expect(codes.ip).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429]);
    expect(codes.key).toEqual([...Array(8).fill(200), 429, 429, 429]);
    expect(codes.other).toEqual([200, 200, 200]);
    expect(codes.denylisted).toEqual([403, 403]);

    // every isolate flushes within seconds of its decisions; then nothing more may arrive
    expect(await refreshUntil("[data-total=all]", "25")).toBe("25");
    await new Promise((r) => setTimeout(r, 12_000));
    expect(await refreshUntil("[data-total=all]", "25")).toBe("25");
    expect(await text("[data-total=admitted]")).toBe("16");
    expect(await text("[data-total=denied]")).toBe("7");
    expect(await text("[data-total=denylisted]")).toBe("2");
    expect(await text("[data-total=fail-open]")).toBe("0");
    expect(await text("[data-total=lost]")).toBe("0");
    expect(await text("[data-total=store-failures]")).toBe("0");
    expect(await page.locator("[data-total=store-failures]").getAttribute("class")).toBe("");
    expect(await text("[data-total=latency]")).toMatch(/^≤\d+ \/ ≤\d+ ms$/);
    // the charts carry the same numbers: each series' sum, drawn as SVG
    expect(await page.locator("[data-chart=decisions] [data-series=admitted]").getAttribute("data-sum")).toBe("16");
    expect(await page.locator("[data-chart=decisions] [data-series=denied]").getAttribute("data-sum")).toBe("7");
    expect(await page.locator("[data-chart=fail-open] [data-series=failed-open]").getAttribute("data-sum")).toBe("0");
    expect(await page.locator('[data-chart=fail-open] [data-series="store failures"]').getAttribute("data-sum")).toBe("0");
    expect(await page.locator("[data-chart=decisions] svg path").count()).toBeGreaterThanOrEqual(3);
    expect(await page.locator("[data-chart=latency] svg path").count()).toBe(2);

    // the refused most: the address (by tag) and the registered key (by its label)
    const rows = page.locator("#top tbody tr");
    expect(await rows.count()).toBe(2);
    expect(await rows.nth(0).locator("td").allInnerTexts()).toEqual([expect.stringMatching(/^i[\w-]{22}$/), "address", "", "free", "4"]);
    expect(await rows.nth(1).locator("td").allInnerTexts()).toEqual([expect.stringMatching(/^k[\w-]{22}$/), "API key", "Acme Corp", "paid", "3"]);
    await screenshot("health");
    if (process.env.SLIDEGATE_CONSOLE_SCREENSHOT) copyFileSync("dist/console-health.png", process.env.SLIDEGATE_CONSOLE_SCREENSHOT);
  }, 120_000);

  it("shows store failures, which no outcome tells, as a stat marked bad and a series beside fail-open", async () => {
    // the figures as a store whose address calls failed beside admitted keys would leave them
    await page.route("**/__slidegate/figures", async (route) => {
      const res = await route.fetch();
      const figures = (await res.json()) as { minutes: { storeFailures: number }[]; totals: { storeFailures: number } };
      figures.minutes.at(-1)!.storeFailures = 3;
      figures.totals.storeFailures = 3;
      await route.fulfill({ response: res, json: figures });
    });
    try {
      expect(await refreshUntil("[data-total=store-failures]", "3")).toBe("3");
      expect(await page.locator("[data-total=store-failures]").getAttribute("class")).toBe("bad");
      // the decisions stay as they were: a store failure is no outcome of its own
      expect(await text("[data-total=all]")).toBe("25");
      const series = page.locator('[data-chart=fail-open] [data-series="store failures"]');
      expect(await series.getAttribute("data-sum")).toBe("3");
      expect(await page.locator("[data-chart=fail-open] svg circle").count()).toBe(1);
    } finally {
      await page.unroute("**/__slidegate/figures");
    }
    expect(await refreshUntil("[data-total=store-failures]", "0")).toBe("0");
  }, 120_000);

  it("acts on an identity from its detail: reset, block (403 on its next request), unblock (it passes), tier, override", async () => {
    await page.locator("#top tbody tr", { hasText: "Acme Corp" }).locator("a").click();
    await page.locator("[data-fact=tier]").waitFor();
    expect(await text("#view h2")).toBe("Acme Corp (API key)");
    expect(await text("[data-fact=tier]")).toBe("paid");
    expect(await text("[data-fact=block]")).toBe("not blocked");
    expect(await text("[data-rule=hour] [data-used]")).toBe("8");
    expect(page.url()).not.toContain(KEY);

    expect(await act("[data-action=reset]")).toMatch(/^reset: done/);
    expect(await text("[data-rule=hour] [data-used]")).toBe("0");
    expect(await withKey()).toBe(200);

    expect(await act("[data-action=block]")).toBe('block: done — {"blocked":true,"seconds":600}');
    expect(dialogs.at(-1)).toMatch(/^Block k[\w-]{22} for 10 minutes\?/);
    expect(await text("[data-fact=block]")).toMatch(/^blocked for (599|600) s$/);
    expect([await withKey(), await withKey(), await withKey()]).toEqual([403, 403, 403]);

    expect(await act("[data-action=unblock]")).toBe('unblock: done — {"unblocked":true}');
    expect(await text("[data-fact=block]")).toBe("not blocked");
    expect([await withKey(), await withKey(), await withKey()]).toEqual([200, 200, 200]);

    // another operator disables the key while this page shows it enabled: a tier set from the
    // page changes the tier, and the key stays disabled
    expect((await adminCall("keys/import", { entries: [{ key: KEY, disabled: true }] })).status).toBe(200);
    await page.locator("#tier-select").selectOption("free");
    expect(await act("[data-action=tier]")).toMatch(/^keys\/update: done/);
    expect(await text("[data-fact=tier]")).toBe("free");
    expect((await adminCall("keys/get", { key: KEY })).body).toMatchObject({ tier: "free", disabled: true });
    expect((await adminCall("keys/import", { entries: [{ key: KEY, disabled: false }] })).status).toBe(200);

    await page.locator("#override-rule").selectOption("hour");
    await page.locator("#override-limit").fill("20");
    await page.locator("#override-window").fill("2m");
    expect(await act("[data-action=override]")).toBe('keys/override: done — {"rule":"hour","limit":20,"windowMs":120000}');
    // a tier's windows are its own: in "free" the key starts from nothing
    expect(await page.locator("[data-rule=hour] td").allInnerTexts()).toEqual(["hour", "0", "20", "2m", "20", "—", "limit 20, window 2m Clear"]);
    await screenshot("identity");

    // the registry holds what the page set
    expect((await adminCall("keys/get", { key: KEY })).body).toMatchObject({ tier: "free", label: "Acme Corp", overrides: { hour: { limit: 20, windowMs: 120_000 } } });
    expect(await withKey()).toBe(200);

    // another operator revokes (deletes) the key while this page shows it registered: a tier set
    // from the page is refused, and the key stays deleted
    expect((await adminCall("keys/delete", { key: KEY })).status).toBe(200);
    await page.locator("#tier-select").selectOption("free");
    expect(await act("[data-action=tier]")).toMatch(/^keys\/update: refused/);
    expect((await adminCall("keys/get", { key: KEY })).status).toBe(404);
  }, 60_000);

  it("disables a key from its detail (403 on its next request) and enables it again (it passes), its tier and label kept", async () => {
    const key = "sk-disabled-from-the-page";
    const send = () => request({ "cf-connecting-ip": "203.0.113.51", "x-api-key": key });
    expect((await adminCall("keys/set", { key, tier: "paid", label: "Lapsed Ltd" })).status).toBe(200);
    expect(await send()).toBe(200);
    await page.locator("#lookup-kind").selectOption("key");
    await page.locator("#lookup-value").fill(key);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("#view h2")).toBe("Lapsed Ltd (API key)");
    expect(await text("[data-fact=registry]")).toBe("registered");

    expect(await act("[data-action=disable]")).toMatch(/^keys\/update: done — /);
    expect(dialogs.at(-1)).toBe("Disable this key? Its requests will be answered 403 everywhere.");
    expect(await text("[data-fact=registry]")).toBe("disabled");
    expect([await send(), await send()]).toEqual([403, 403]);
    expect((await adminCall("keys/get", { key })).body).toMatchObject({ tier: "paid", label: "Lapsed Ltd", disabled: true });

    expect(await act("[data-action=enable]")).toMatch(/^keys\/update: done — /);
    expect(await text("[data-fact=registry]")).toBe("registered");
    expect([await send(), await send()]).toEqual([200, 200]);
    expect((await adminCall("keys/get", { key })).body).toMatchObject({ tier: "paid", label: "Lapsed Ltd", disabled: false });

    // a key nobody registered, disabled from the page: registered so, in the default tier
    const unknown = "sk-made-up-and-disabled";
    await page.locator("#lookup-value").fill(unknown);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("[data-fact=registry]")).toBe("not registered");
    expect(await act("[data-action=disable]")).toMatch(/^keys\/import: done — /);
    expect(await text("[data-fact=registry]")).toBe("disabled");
    expect(await request({ "cf-connecting-ip": "203.0.113.52", "x-api-key": unknown })).toBe(403);
    expect((await adminCall("keys/get", { key: unknown })).body).toMatchObject({ tier: "free", disabled: true });
  }, 60_000);

  it("disables a key RATE_LIMITS.keys gives a tier, which the registry does not hold, in that tier, and enables it again in that tier", async () => {
    const key = "sk-configured-paid";
    const gate = await startGateIsolate({
      ADMIN_TOKEN,
      RATE_LIMITS: rateLimits({
        identity: { header: "x-api-key" },
        defaultTier: "free",
        keys: { [createHash("sha256").update(key).digest("hex")]: "paid" },
        tiers: { free: { rules: [{ name: "hour", limit: 1, window: "1h" }] }, paid: { rules: [{ name: "hour", limit: 1000, window: "1h" }] } },
      }),
    });
    const other = await context.newPage();
    other.on("dialog", (dialog) => {
      dialogs.push(dialog.message());
      void dialog.accept();
    });
    const url = (await gate.ready).href;
    const send = async () => {
      const res = await gate.dispatchFetch(`${url}v1/things`, { headers: { "cf-connecting-ip": "203.0.113.53", "x-api-key": key } });
      await res.arrayBuffer();
      return res.status;
    };
    const entry = async () => {
      const res = await gate.dispatchFetch(`${url}__slidegate/keys/get`, { method: "POST", body: JSON.stringify({ key }), headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      return (await res.json()) as Record<string, unknown>;
    };
    const act = async (action: string) => {
      await other.locator(`[data-action=${action}]`).click();
      await other.locator("#result:not(:empty):not([aria-busy])").waitFor();
      return other.locator("#result").innerText();
    };
    try {
      await other.goto(`${url}__slidegate/`);
      await other.locator("#token").fill(ADMIN_TOKEN);
      await other.locator("#login-form button").click();
      await other.locator("#refresh").waitFor();
      await other.locator("#lookup-kind").selectOption("key");
      await other.locator("#lookup-value").fill(key);
      await other.locator("#lookup button").click();
      await expect.poll(() => other.locator("[data-fact=registry]").innerText()).toBe("not registered");
      expect(await other.locator("[data-fact=tier]").innerText()).toBe("paid");

      expect(await act("disable")).toMatch(/^keys\/import: done — /);
      expect(dialogs.at(-1)).toBe('Register this key disabled, in tier "paid"? Its requests will be answered 403 everywhere.');
      expect(await entry()).toMatchObject({ tier: "paid", disabled: true });
      expect(await send()).toBe(403);
      expect(await act("enable")).toMatch(/^keys\/update: done — /);
      // its configured tier's quota, not the default tier's one request an hour
      expect(await other.locator("[data-fact=tier]").innerText()).toBe("paid");
      expect([await send(), await send()]).toEqual([200, 200]);
    } finally {
      await other.close();
      await gate.dispose();
    }
  }, 60_000);

  it("registers a key it showed as unregistered without replacing an entry another operator made meanwhile", async () => {
    const key = "sk-registered-behind-the-page";
    await page.locator("#lookup-kind").selectOption("key");
    await page.locator("#lookup-value").fill(key);
    await page.locator("#lookup button").click();
    await page.waitForURL(/#\/identity\/hash\/[0-9a-f]{64}$/);
    await expect.poll(() => text("[data-fact=registry]")).toBe("not registered");
    // another operator registers the key, disabled, while this page says it is not registered
    expect((await adminCall("keys/set", { key, tier: "paid", label: "Held", disabled: true })).status).toBe(200);
    await page.locator("#override-rule").selectOption("hour");
    await page.locator("#override-limit").fill("3");
    expect(await act("[data-action=override]")).toMatch(/: done/);
    expect((await adminCall("keys/get", { key })).body).toMatchObject({ label: "Held", disabled: true, overrides: { hour: { limit: 3 } } });
  }, 60_000);

  it("shows a key's tier that the configuration no longer has as its own, and moves it nowhere until one is chosen", async () => {
    // the registry answers a tier a later configuration dropped (the admin API refuses to write one)
    await page.route("**/__slidegate/usage", async (route) => {
      const res = await route.fetch();
      await route.fulfill({ response: res, json: { ...((await res.json()) as object), tier: "retired" } });
    });
    try {
      await page.locator("#lookup-kind").selectOption("key");
      await page.locator("#lookup-value").fill(KEY);
      await page.locator("#lookup button").click();
      await expect.poll(() => text("[data-fact=tier]")).toBe("retired");
      expect(await page.evaluate('document.getElementById("tier-select").selectedOptions[0].text')).toBe("retired (not configured)");
      const before = dialogs.length;
      await page.locator("[data-action=tier]").click();
      await new Promise((r) => setTimeout(r, 500));
      expect(dialogs.length, "no move was offered").toBe(before);
    } finally {
      await page.unroute("**/__slidegate/usage");
    }
  }, 60_000);

  it("shows a key's override of a rule its tier lacks, as keys/get holds it, and clears it", async () => {
    // "burst" is a rule of free only: the override waits for the key to move there
    const key = "sk-paid-with-a-burst-override";
    expect((await adminCall("keys/set", { key, tier: "paid", overrides: { burst: { limit: 2 } } })).status).toBe(200);
    await page.locator("#lookup-kind").selectOption("key");
    await page.locator("#lookup-value").fill(key);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("[data-fact=tier]")).toBe("paid");
    expect(await page.locator("[data-rule=burst] td").allInnerTexts()).toEqual(["burst (not a rule of this tier)", "—", "—", "—", "—", "—", "limit 2 Clear"]);
    expect(await act("[data-rule=burst] [data-action=clear-override]")).toBe('keys/override: done — {"cleared":"burst"}');
    expect(await page.locator("[data-rule=burst]").count()).toBe(0);
    expect((await adminCall("keys/get", { key })).body.overrides).toEqual({});
  }, 60_000);

  it("looks a key up as the gate reads it: padded as an origin trims it, the same key; with a comma, none", async () => {
    const key = "sk-looked-up-padded";
    await page.locator("#lookup-kind").selectOption("key");
    await page.locator("#lookup-value").fill(`\u0085${key}\u001f`);
    await page.locator("#lookup button").click();
    await page.waitForURL(new RegExp(`#/identity/hash/${createHash("sha256").update(key).digest("hex")}$`));
    await page.locator("#lookup-value").fill(`${key},${key}`);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("#view [role=alert]")).toMatch(/^The gate reads no single key from that: it refuses a key with a comma/);
  }, 60_000);

  it("looks an address up and acts on it by its tag, the raw address going only into the usage call", async () => {
    await page.locator("#lookup-kind").selectOption("ip");
    await page.locator("#lookup-value").fill(IP);
    await page.locator("#lookup button").click();
    await page.waitForURL(/#\/identity\/tag\/i[\w-]{22}$/);
    // the key's view stays until the address's is drawn
    await expect.poll(() => text("[data-fact=tag]")).toBe(page.url().split("/").pop());
    expect(await text("[data-rule=hour] [data-used]")).toBe("5");
    // what the view draws is elements alone: no stray word between its heading and its facts
    expect(await page.locator("#view").evaluate((view) => [...view.childNodes].filter((n) => n.nodeType === 3 /* a text node */).map((n) => n.textContent))).toEqual([]);
    // a minutes field left empty: no block "for 0 minutes" is asked for, nor sent
    const asked = dialogs.length;
    await page.locator("#block-minutes").fill("");
    await page.locator("[data-action=block]").click();
    await new Promise((r) => setTimeout(r, 500));
    expect(dialogs.length, "no block was offered").toBe(asked);
    await page.locator("#block-minutes").fill("10");
    expect(await act("[data-action=block]")).toMatch(/^block: done/);
    expect(await fromIp(IP)).toBe(403);
    expect(await act("[data-action=unblock]")).toMatch(/^unblock: done/);
    expect(await act("[data-action=reset]")).toMatch(/^reset: done/);
    expect(await fromIp(IP)).toBe(200);
  }, 60_000);

  it("keeps a look-up the gate refused in its field to be corrected, offers no Try again of it, and tries again the look-up itself when the gate was out of reach", async () => {
    await page.evaluate('location.hash = "#/config"');
    await page.locator("#rules").waitFor();
    await page.locator("#lookup-kind").selectOption("ip");
    await page.locator("#lookup-value").fill(IP);
    await page.locator("#lookup button").click();
    await page.waitForURL(/#\/identity\/tag\/i[\w-]{22}$/);
    const tag = page.url().split("/").pop();
    await expect.poll(() => text("[data-fact=tag]")).toBe(tag);
    expect(await page.locator("#lookup-value").inputValue(), "found: what was looked up leaves the field").toBe("");

    // a typo: what was typed stays, and nothing offers to send it again to the same refusal
    await page.locator("#lookup-value").fill("198.51.100.1O");
    await page.locator("#lookup button").click();
    await expect.poll(() => text("#view [role=alert]")).toBe('The gate answered 400: "ip": "198.51.100.1O" is not an IP address.');
    expect(await page.locator("#lookup-value").inputValue()).toBe("198.51.100.1O");
    expect(await page.locator("#view [data-action=retry]").count()).toBe(0);
    // Back: the view the address still names, drawn again
    await page.locator("#view [data-action=back]").click();
    await expect.poll(() => text("[data-fact=tag]")).toBe(tag);
    // corrected in the field to the identity the address already names: drawn though the address does not change
    await page.locator("#lookup-value").fill("198.51.100.1O");
    await page.locator("#lookup button").click();
    await page.locator("#view [role=alert]").waitFor();
    await page.locator("#lookup-value").fill(IP);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("[data-fact=tag]")).toBe(tag);

    // the gate out of reach: Try again looks up what was typed, not the identity shown before
    await page.route("**/__slidegate/usage", (route) => route.abort("connectionreset"), { times: 1 });
    await page.locator("#lookup-value").fill(OTHER_IP);
    await page.locator("#lookup button").click();
    await expect.poll(() => text("#view [role=alert]")).toMatch(/^The gate could not be reached: /);
    expect(await page.locator("#lookup-value").inputValue()).toBe(OTHER_IP);
    await page.locator("#view [data-action=retry]").click();
    await page.waitForURL((url) => url.hash !== `#/identity/tag/${tag}`);
    await expect.poll(() => text("[data-fact=tag]")).toBe(page.url().split("/").pop());
    expect(await text("[data-rule=hour] [data-used]"), "the other address's three requests").toBe("3");
    expect(await page.locator("#lookup-value").inputValue()).toBe("");
  }, 60_000);

  it("shows an address's usage of the address rules beside its tier's: what every key it sends also spends", async () => {
    const gate = await startGateIsolate({
      ADMIN_TOKEN,
      RATE_LIMITS: rateLimits({
        identity: { header: "x-api-key" },
        rules: [{ name: "hour", limit: 1000, window: "1h" }],
        addressRules: [{ name: "per-address", limit: 300, window: "1h" }],
      }),
    });
    const other = await context.newPage();
    try {
      const url = (await gate.ready).href;
      // two made-up keys and one request without a key, from one address: the address rule
      // counts all three, the address's own (tier) rule the keyless one alone
      for (const headers of [{ "x-api-key": "sk-first" }, { "x-api-key": "sk-second" }, {}]) {
        const res = await gate.dispatchFetch(`${url}v1/things`, { headers: { "cf-connecting-ip": "198.51.100.77", ...headers } });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
      await other.goto(`${url}__slidegate/`);
      await other.locator("#token").fill(ADMIN_TOKEN);
      await other.locator("#login-form button").click();
      await other.locator("#refresh").waitFor();
      await other.locator("#lookup-kind").selectOption("ip");
      await other.locator("#lookup-value").fill("198.51.100.77");
      await other.locator("#lookup button").click();
      await other.locator("[data-fact=tag]").waitFor();
      expect(await other.locator('[data-rule="hour"] td').allInnerTexts()).toEqual(["hour", "1", "1000", "1h", "999", expect.stringMatching(/^\d+[smh]$/), "—"]);
      expect(await other.locator('[data-rule="address/per-address"] td').allInnerTexts()).toEqual([
        "per-address address rule",
        "3",
        "300",
        "1h",
        "297",
        expect.stringMatching(/^\d+[smh]$/),
        "—",
      ]);
    } finally {
      await other.close();
      await gate.dispose();
    }
  }, 60_000);

  it("shows the effective configuration read-only, without a secret", async () => {
    await page.locator("[data-nav=config]").click();
    await page.locator("#rules").waitFor();
    expect(await page.locator("#rules tbody tr").allInnerTexts()).toEqual([
      expect.stringMatching(/^free\thour\t5\t1h\t1\tany\tany\topen\t30s\tenforced$/),
      expect.stringMatching(/^free\tburst\t3\t1s\t1\t\/v2\/\*\tany\topen\t30s\tshadow$/),
      expect.stringMatching(/^paid\thour\t8\t1h\t1\tany\tany\topen\t30s\tenforced$/),
    ]);
    const all = await page.locator("body").innerText();
    expect(all).toContain("free/burst");
    expect(all).toContain("192.0.2.66");
    expect(await page.locator("#settings tr", { hasText: "key required" }).innerText()).toBe("key required\tno");
    // the header the gate writes the client address in for the origin, not one it reads callers by
    expect(await page.locator("#settings tr", { hasText: "x-forwarded-for" }).innerText()).toBe("client address, to the origin in\tx-forwarded-for");
    // no originTimeout configured: the gate waits on the origin as long as the client does
    expect(await page.locator("#settings tr", { hasText: "origin time limit" }).innerText()).toBe("origin time limit\tnone");
    expect(all).not.toContain(ADMIN_TOKEN);
    expect(all).not.toContain(KEY);
    for (const input of await page.locator("input").all()) expect(await input.inputValue()).not.toContain(ADMIN_TOKEN);
    await screenshot("configuration");

    await page.locator("#sign-out").click();
    await page.locator("#login-form").waitFor();
  }, 60_000);

  it("keeps the admin token in the page's memory alone: no storage of the origin holds it, nor a page of the API the tab goes on to, and Back or a reload asks for it again", async () => {
    await withGateBeforeOriginPage(async (url, tab) => {
      await tab.goto(`${url}__slidegate/`);
      await signInHere(tab);
      expect(await originStorage(tab)).toEqual({ session: {}, local: {}, cookie: "", databases: [] });
      expect((await context.cookies()).length).toBe(0);
      expect(tab.url()).not.toContain(ADMIN_TOKEN);

      // the operator types a page of the API into the same tab: its script reads what the origin keeps
      await tab.goto(`${url}docs`);
      expect(await tab.title()).toBe("an origin page");
      expect(JSON.stringify(await originStorage(tab))).not.toContain(ADMIN_TOKEN);
      expect(await tab.evaluate(() => sessionStorage.getItem("slidegate.adminToken"))).toBeNull();

      // Back (from the back/forward cache or loaded again): the console asks for the token
      await tab.goBack();
      await tab.locator("#login").waitFor();
      expect(await tab.locator("#nav").isVisible()).toBe(false);
      expect(await tab.locator("#view > *").count()).toBe(0);

      // signed in again, a reload asks again, and calls nothing meanwhile
      await signInHere(tab);
      const called: string[] = [];
      tab.on("request", (r) => void (r.resourceType() === "fetch" && called.push(r.url())));
      await tab.reload();
      await tab.locator("#login").waitFor();
      expect(await tab.locator("#nav").isVisible()).toBe(false);
      expect(called).toEqual([]);
      expect(await originStorage(tab)).toEqual({ session: {}, local: {}, cookie: "", databases: [] });
    });
  }, 60_000);

  it("signs out a console page the browser keeps for Back: restored, the same page asks for the token again and shows no figures", async () => {
    await withGateBeforeOriginPage(async (url) => {
      const keeping = await consoleBrowser([], { backForwardCache: true });
      const tab = keeping.page;
      try {
        // This Chromium keeps no page served no-store (the console's, its admin answers) for Back;
        // Safari does, and Chrome is starting to. The header is taken off on the way to stand in
        // for such a browser: the page and its script are the gate's own.
        await tab.route("**/__slidegate/**", async (route) => {
          const response = await route.fetch();
          const { "cache-control": _, ...headers } = response.headers();
          await route.fulfill({ response, headers });
        });
        await tab.goto(`${url}__slidegate/`);
        await signInHere(tab);
        await tab.evaluate('window.samePage = true; addEventListener("pageshow", (e) => { window.restored = e.persisted; })');
        await tab.goto(`${url}docs`);
        await tab.goBack({ waitUntil: "commit" });
        await tab.waitForFunction("window.restored !== undefined");
        // the page kept, its memory with it: not one loaded again, which would ask for the token anyway
        expect(await tab.evaluate("[window.samePage, window.restored]")).toEqual([true, true]);
        expect(await tab.locator("#login").isVisible()).toBe(true);
        expect(await tab.locator("#login-error").innerText()).toBe("You left the console: sign in again.");
        expect(await tab.locator("#nav").isVisible()).toBe(false);
        expect(await tab.locator("#view > *").count()).toBe(0);
      } finally {
        await keeping.close();
      }
    });
  }, 60_000);

  it("removes, unread, a token an earlier build left in the tab's session storage", async () => {
    await withGateBeforeOriginPage(async (url, tab) => {
      await tab.goto(`${url}docs`);
      await tab.evaluate((token) => sessionStorage.setItem("slidegate.adminToken", token), ADMIN_TOKEN);
      const called: string[] = [];
      tab.on("request", (r) => void (r.resourceType() === "fetch" && called.push(r.url())));
      await tab.goto(`${url}__slidegate/`);
      await tab.locator("#login").waitFor();
      expect(await tab.locator("#nav").isVisible()).toBe(false);
      expect(called).toEqual([]);
      expect(await tab.evaluate(() => sessionStorage.length)).toBe(0);
      // gone for the pages of the API the tab goes on to as well
      await tab.goto(`${url}docs`);
      expect(await tab.evaluate(() => sessionStorage.getItem("slidegate.adminToken"))).toBeNull();
    });
  }, 60_000);

  it("keeps a page of the origin it shares that opened it from its window: the opener cannot read the token or the page", async () => {
    // the API's own origin serves a page (user content, an XSS): same origin as the console,
    // since the gate answers /__slidegate/ in front of it
    await withGateBeforeOriginPage(async (url, opener) => {
      await opener.goto(`${url}docs`);
      expect(await opener.title()).toBe("an origin page");
      // it opens the console, and the operator signs in there (the address bar shows the gate's own console)
      const opened = context.waitForEvent("page");
      await opener.evaluate('window.consoleWindow = window.open("/__slidegate/")');
      const popup = await opened;
      await signInHere(popup);
      // what the origin page's script can reach of it: the page, whose script holds the token, and its storage
      const reach = await opener.evaluate(`(() => {
        const w = window.consoleWindow;
        let token = null, markup = null;
        try { token = w.sessionStorage.getItem("slidegate.adminToken"); } catch (e) { token = "refused: " + e.name; }
        try { markup = w.document.documentElement.outerHTML.slice(0, 40); } catch (e) { markup = "refused: " + e.name; }
        return { closed: w.closed, token, markup };
      })()`);
      expect(reach).toMatchObject({ closed: true });
      expect(JSON.stringify(reach)).not.toContain(ADMIN_TOKEN);
      expect(JSON.stringify(reach)).not.toContain("<html");
      await popup.close();
    });
  }, 60_000);

  it.each([
    ["reject", "not registered: refused (401)", 0],
    ["ip", "not registered: limited as its address", 1],
  ])(
    'says how a key nobody knows is decided under unknownKeys "%s", not only that it is unregistered, and offers to disable it only where that stops it',
    async (unknownKeys, shown, disable) => {
      const gate = await startGateIsolate({
        ADMIN_TOKEN,
        RATE_LIMITS: rateLimits({ identity: { header: "x-api-key", unknownKeys }, rules: [{ name: "hour", limit: 1000, window: "1h" }] }),
      });
      const other = await context.newPage();
      try {
        await other.goto(`${(await gate.ready).href}__slidegate/`);
        await other.locator("#token").fill(ADMIN_TOKEN);
        await other.locator("#login-form button").click();
        await other.locator("#refresh").waitFor();
        await other.locator("#lookup-kind").selectOption("key");
        await other.locator("#lookup-value").fill("sk-nobody-knows");
        await other.locator("#lookup button").click();
        await expect.poll(() => other.locator("[data-fact=registry]").innerText()).toBe(shown);
        // under "reject" it is refused already: registered disabled, it would be one Enable away from admitted
        expect(await other.locator("[data-action=disable]").count()).toBe(disable);
      } finally {
        await other.close();
        await gate.dispose();
      }
    },
    60_000,
  );

  it("asks for the token again in a tab opened from the console, and signs every tab out when the operator signs out of one", async () => {
    await page.goto(consoleUrl);
    await page.locator("#token").fill(ADMIN_TOKEN);
    await page.locator("#login-form button").click();
    await page.locator("#refresh").waitFor();
    // a tab opened from the console starts with a copy of its session storage, which holds no token
    const opened = context.waitForEvent("page");
    await page.evaluate('window.open(location.href, "_blank")');
    const other = await opened;
    try {
      await other.locator("#login").waitFor();
      expect(await other.locator("#nav").isVisible()).toBe(false);
      await other.locator("#token").fill(ADMIN_TOKEN);
      await other.locator("#login-form button").click();
      await other.locator("#refresh").waitFor();
      await page.locator("#sign-out").click();
      await expect.poll(() => other.locator("#login").isVisible()).toBe(true);
      expect(await other.locator("#login-error").innerText()).toBe("Signed out in another tab.");
      expect(await other.locator("#view > *").count()).toBe(0);
    } finally {
      await other.close();
    }
  }, 60_000);

  it("draws nothing and calls nothing once signed out, though an answer asked for before arrives after", async () => {
    await page.goto(consoleUrl);
    await page.locator("#token").fill(ADMIN_TOKEN);
    await page.locator("#login-form button").click();
    await page.locator("#refresh").waitFor();
    // a refresh whose answer is held until the operator has signed out
    const late = await holdCalls(page, "figures");
    const answered = page.waitForResponse("**/__slidegate/figures");
    await page.locator("#refresh").click();
    await page.locator("#sign-out").click();
    const sent: (string | null)[] = [];
    page.on("request", (r) => void (r.resourceType() === "fetch" && sent.push(r.headers().authorization ?? null)));
    late.release();
    await answered;
    await late.stop();
    // a health view drawn after sign-out shows the figures to whoever sits down next
    await new Promise((r) => setTimeout(r, 1000));
    expect(await page.locator("#view > *").count()).toBe(0);
    // and its refresh, every 15 s, sent "Bearer null": a failed sign-in counted against the address
    await new Promise((r) => setTimeout(r, 15_000));
    expect(sent).toEqual([]);
    expect(await text("#login-error")).toBe("Signed out.");
  }, 60_000);
});
