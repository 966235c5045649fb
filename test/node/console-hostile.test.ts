import { createHash } from "node:crypto";
import type { Miniflare } from "miniflare";
import type { Page, Request } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis } from "../../scripts/lib/redis-server.ts";
import { startShim } from "../../scripts/shim/server.ts";
import { type ConsoleBrowser, consoleBrowser, holdCalls } from "../helpers/console-browser.ts";
import { rateLimits, startGateIsolate } from "../helpers/miniflare.ts";

// The console against data an attacker may control: a registry label (an import from a billing
// system carries anything), the order in which the gate's answers arrive, and a store that fails. Debian's Chromium
// driven by Playwright, against the built Worker in workerd, the test shim, Redis and origin.
const ADMIN_TOKEN = crypto.randomUUID().replace(/-/g, "");
const hashOf = (key: string) => createHash("sha256").update(key).digest("hex");

let gate: Miniflare;
let page: Page;
let browser: ConsoleBrowser;
let consoleUrl: string;
const dialogs: string[] = [];
const violations: string[] = [];

async function adminCall(route: string, body: unknown) {
  const res = await gate.dispatchFetch(`http://gate.example/__slidegate/${route}`, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const text = (selector: string) => page.locator(selector).first().innerText();

/** A fresh page of the console (it keeps no token across pages), signed in on its health view. */
async function signIn() {
  await page.goto(consoleUrl);
  await page.locator("#token").fill(ADMIN_TOKEN);
  await page.locator("#login-form button").click();
  await page.locator("#refresh").waitFor();
}

beforeAll(async () => {
  gate = await startGateIsolate({
    ADMIN_TOKEN,
    RATE_LIMITS: rateLimits({
      identity: { header: "x-api-key" },
      defaultTier: "free",
      denialCacheSize: 0,
      tiers: { free: { rules: [{ name: "hour", limit: 1, window: "1h" }] }, paid: { rules: [{ name: "hour", limit: 2, window: "1h" }] } },
    }),
  });
  consoleUrl = `${await gate.ready}__slidegate/`;
  browser = await consoleBrowser(dialogs);
  ({ page } = browser);
  page.on("console", (m) => void (/Content.Security.Policy/i.test(m.text()) && violations.push(m.text())));
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await gate?.dispose();
});

/** Sends `key` past its limit of one an hour: two refusals the figures list within seconds. */
async function refuse(key: string) {
  for (let n = 0; n < 3; n++) {
    const res = await gate.dispatchFetch("http://gate.example/v1/things", { headers: { "x-api-key": key, "cf-connecting-ip": "203.0.113.9" } });
    await res.arrayBuffer();
  }
}

/** Refreshes the health view until the refused most lists a row holding `label`, or gives up after 60 s. */
async function listedWith(label: string) {
  const deadline = Date.now() + 60_000;
  const row = page.locator("#top tbody tr", { hasText: label });
  while ((await row.count()) === 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 500));
    await page.evaluate('document.getElementById("top").remove()');
    await page.locator("#refresh").click();
    await page.locator("#top").waitFor();
  }
  return row;
}

/** How far the page reaches past the window's right edge, in CSS pixels (0: nothing is out of view). */
const overflow = () => page.evaluate<number>("document.documentElement.scrollWidth - document.documentElement.clientWidth");

/**
 * `act` makes a call to the admin route `route` (those `matches` picks are held); the operator
 * then moves to `second`'s view, whose heading is `heading`, and the held answer arrives: the
 * view stays the second key's.
 */
async function leftBeforeTheAnswer(route: string, matches: (body: string) => boolean, act: () => Promise<unknown>, second: string, heading: string) {
  const late = await holdCalls(page, route, matches);
  try {
    const ours = (url: string, body: string | null) => url.endsWith(`/${route}`) && matches(body ?? "");
    const asked = page.waitForRequest((r) => ours(r.url(), r.postData()));
    const answered = page.waitForResponse((r) => ours(r.url(), r.request().postData()));
    await act();
    await asked;
    await page.evaluate(`location.hash = "#/identity/hash/${hashOf(second)}"`);
    await expect.poll(() => text("#view h2")).toBe(heading);
    late.release();
    await answered;
    // what a late draw would need: the answer read and put in the page (a wide margin)
    await new Promise((r) => setTimeout(r, 1000));
    expect(await text("#view h2")).toBe(heading);
  } finally {
    await late.stop();
  }
}

describe("the console against hostile data", () => {
  it("never draws an identity the operator has left: a late answer for one key does not replace the view of the next", async () => {
    const [first, second] = ["sk-looked-at-first", "sk-looked-at-second"];
    expect((await adminCall("keys/set", { key: first, tier: "free", label: "First" })).status).toBe(200);
    expect((await adminCall("keys/set", { key: second, tier: "paid", label: "Second" })).status).toBe(200);
    await signIn();
    // the first key's usage is held until the operator has moved on to the second
    const view = () => page.evaluate(`location.hash = "#/identity/hash/${hashOf(first)}"`);
    await leftBeforeTheAnswer("usage", (body) => body.includes(hashOf(first)), view, second, "Second (API key)");
    expect(await text("[data-fact=tier]")).toBe("paid");
  }, 60_000);

  it("never draws an identity again after an action on it once the operator has left it", async () => {
    const [first, second] = ["sk-acted-on", "sk-looked-at-next"];
    expect((await adminCall("keys/set", { key: first, tier: "free", label: "Acted on" })).status).toBe(200);
    expect((await adminCall("keys/set", { key: second, tier: "paid", label: "Looked at next" })).status).toBe(200);
    await signIn();
    await page.evaluate(`location.hash = "#/identity/hash/${hashOf(first)}"`);
    await expect.poll(() => text("#view h2")).toBe("Acted on (API key)");
    // the reset's answer is held until the operator has moved on to the second key
    const reset = () => page.locator("[data-action=reset]").click();
    await leftBeforeTheAnswer("reset", () => true, reset, second, "Looked at next (API key)");
  }, 60_000);

  it("keeps a label of 200 characters without a space inside the page: the tier and the refused count stay in view", async () => {
    const key = "sk-long-label";
    const label = "W".repeat(200);
    expect((await adminCall("keys/set", { key, tier: "free", label })).status).toBe(200);
    await refuse(key);
    await signIn();
    const row = await listedWith(label);
    expect(await row.locator("td").allInnerTexts()).toEqual([expect.stringMatching(/^k[\w-]{22}$/), "API key", label, "free", "2"]);
    expect(await overflow()).toBe(0);
    const refused = await row.locator("[data-refused]").boundingBox();
    expect(refused!.x + refused!.width).toBeLessThanOrEqual(await page.evaluate<number>("document.documentElement.clientWidth"));
    await row.locator("a").click();
    await page.locator("[data-fact=tier]").waitFor();
    expect(await text("#view h2")).toBe(`${label} (API key)`);
    expect(await overflow()).toBe(0);
  }, 90_000);

  it("fits a phone's width: no view reaches past the window's right edge, and Sign out and Look up stay in view", async () => {
    const key = "sk-on-a-phone";
    expect((await adminCall("keys/set", { key, tier: "free", label: "On a phone" })).status).toBe(200);
    await page.setViewportSize({ width: 360, height: 740 });
    try {
      await signIn();
      const width = await page.evaluate<number>("document.documentElement.clientWidth");
      for (const button of ["#sign-out", "#lookup button"]) {
        const box = await page.locator(button).boundingBox();
        expect(box!.x + box!.width, button).toBeLessThanOrEqual(width);
      }
      expect(await overflow(), "health").toBe(0);
      await page.evaluate(`location.hash = "#/identity/hash/${hashOf(key)}"`);
      await page.locator("#override-form").waitFor();
      expect(await overflow(), "identity").toBe(0);
      await page.evaluate('location.hash = "#/config"');
      await page.locator("#rules").waitFor();
      expect(await overflow(), "configuration").toBe(0);
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
  }, 60_000);

  it("keeps a label's bidirectional controls to the label: the console's own words read as written after it", async () => {
    const key = "sk-bidi-label";
    // right-to-left override, never closed: it would run on over whatever follows in the same line
    const label = "\u202Egnirotinom lanretni";
    expect((await adminCall("keys/set", { key, tier: "free", label })).status).toBe(200);
    await signIn();
    await page.evaluate(`location.hash = "#/identity/hash/${hashOf(key)}"`);
    await page.locator("[data-fact=tier]").waitFor();
    // where "(API key)" is drawn: at the right end of the heading, after the label, not reversed before it
    const drawn = await page.evaluate<{ text: string; right: number; end: number } | undefined>(`(() => {
      const h2 = document.querySelector("#view h2");
      const all = document.createRange();
      all.selectNodeContents(h2);
      const walker = document.createTreeWalker(h2, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const at = node.textContent.indexOf("(API key)");
        if (at < 0) continue;
        const own = document.createRange();
        own.setStart(node, at);
        own.setEnd(node, at + 9);
        return { text: own.toString(), right: own.getBoundingClientRect().right, end: all.getBoundingClientRect().right };
      }
    })()`);
    expect(drawn?.text).toBe("(API key)");
    expect(Math.abs(drawn!.right - drawn!.end)).toBeLessThan(1);

    // an action's answer quotes the entry, label and all: its controls are shown, not obeyed
    await page.locator("#tier-select").selectOption("paid");
    await page.locator("[data-action=tier]").click();
    await page.locator("#result:not(:empty):not([aria-busy])").waitFor();
    const result = await text("#result");
    expect(result).toMatch(/^keys\/update: done — /);
    expect(result).not.toMatch(/[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/);
    expect(JSON.parse(result.slice(result.indexOf("{")))).toMatchObject({ tier: "paid", label });
  }, 60_000);
});

describe("the console on a slow store", () => {
  it("shows an action on its way and sends it once however often it is clicked; a view, a refresh and a look-up on their way likewise", async () => {
    const key = "sk-clicked-twice";
    expect((await adminCall("keys/set", { key, tier: "free", label: "Clicked twice" })).status).toBe(200);
    await signIn();
    const sent: string[] = [];
    const count = (r: Request) => void (r.resourceType() === "fetch" && sent.push(new URL(r.url()).pathname.replace("/__slidegate/", "")));
    page.on("request", count);
    const busy = page.locator("#busy");
    let late: Awaited<ReturnType<typeof holdCalls>> | undefined;
    try {
      // a refresh on its way: shown, and not asked for again over it
      late = await holdCalls(page, "figures");
      await page.locator("#refresh").click();
      await expect.poll(() => sent).toEqual(["figures"]);
      expect(await busy.isVisible(), "the header says a call is on its way").toBe(true);
      expect(await page.locator("#refresh").isDisabled()).toBe(true);
      await page.locator("#refresh").click({ force: true });
      // a disabled button takes no click, forced or not: the 15 s refresh calls its handler as
      // this does, and only the view's own guard keeps it from asking again
      await page.evaluate('document.getElementById("refresh").onclick()');
      late.release();
      await expect.poll(() => page.locator("#refresh").isEnabled()).toBe(true);
      // stopped once nothing is on its way: an answer held when the hold stops is handled twice
      await late.stop();
      expect(sent).toEqual(["figures"]);
      expect(await busy.isVisible()).toBe(false);

      // a view on its way: the one being left is still in sight, and inert
      late = await holdCalls(page, "usage");
      await page.evaluate(`location.hash = "#/identity/hash/${hashOf(key)}"`);
      await expect.poll(() => sent.at(-1)).toBe("usage");
      expect(await busy.isVisible()).toBe(true);
      expect(await page.locator("#view > *:not([inert])").count(), "every part of the view being left is inert").toBe(0);
      late.release();
      await expect.poll(() => text("#view h2")).toBe("Clicked twice (API key)");
      await late.stop();

      // an action on its way: said where its answer will be, and sent once
      sent.length = 0;
      const asked = dialogs.length;
      late = await holdCalls(page, "block");
      await page.locator("[data-action=block]").click();
      await expect.poll(() => sent).toEqual(["block"]);
      expect(await busy.isVisible()).toBe(true);
      expect(await text("#result")).toBe("block: sending…");
      expect(await page.locator("[data-action=block]").isDisabled()).toBe(true);
      await page.locator("[data-action=block]").click({ force: true });
      // a submission no disabled button stops (a script's requestSubmit): the view's own guard must
      await page.evaluate('document.getElementById("block-form").requestSubmit()');
      await page.locator("[data-action=reset]").click({ force: true });
      late.release();
      await page.locator("#result:not(:empty):not([aria-busy])").waitFor();
      await late.stop();
      expect(await text("#result")).toBe('block: done — {"blocked":true,"seconds":600}');
      expect(dialogs.length, "one confirmation asked").toBe(asked + 1);
      expect(sent).toEqual(["block", "usage"]);
      expect(await busy.isVisible()).toBe(false);

      // a look-up on its way: sent once
      sent.length = 0;
      late = await holdCalls(page, "usage");
      await page.locator("#lookup-kind").selectOption("ip");
      await page.locator("#lookup-value").fill("198.51.100.41");
      await page.locator("#lookup button").click();
      await expect.poll(() => sent).toEqual(["usage"]);
      expect(await page.locator("#lookup button").isDisabled()).toBe(true);
      await page.locator("#lookup-value").press("Enter");
      // Enter submits nothing past a disabled button; a script's requestSubmit (or a look-up's
      // Try again, which calls it directly) is stopped by the look-up's own guard alone
      await page.evaluate('document.getElementById("lookup").requestSubmit()');
      late.release();
      await page.waitForURL(/#\/identity\/tag\/i[\w-]{22}$/);
      await expect.poll(() => text("[data-fact=tag]")).toBe(page.url().split("/").pop());
      await late.stop();
      expect(sent, "the look-up's, then its view's").toEqual(["usage", "usage"]);
    } finally {
      await late?.stop();
      page.off("request", count);
    }
  }, 60_000);
});

/**
 * Runs `body` with the console signed in on a gate whose store is a Redis of its own (which
 * `body` may stop and start), then takes them all down.
 */
async function signedInOnStoreOfItsOwn(body: (redis: Awaited<ReturnType<typeof startRedis>>) => Promise<void>) {
  const redis = await startRedis();
  const shimToken = crypto.randomUUID().replace(/-/g, "");
  const shim = await startShim({ token: shimToken, redisUrl: redis.url, log: () => {} });
  const own = await startGateIsolate({
    ADMIN_TOKEN,
    UPSTASH_REDIS_REST_URL: shim.url,
    UPSTASH_REDIS_REST_TOKEN: shimToken,
    RATE_LIMITS: rateLimits({ rules: [{ name: "hour", limit: 1, window: "1h" }] }),
  });
  try {
    await page.goto(`${await own.ready}__slidegate/`);
    await page.locator("#token").fill(ADMIN_TOKEN);
    await page.locator("#login-form button").click();
    await page.locator("#refresh").waitFor();
    await body(redis);
  } finally {
    await own.dispose();
    await shim.close();
    await redis.stop();
  }
}

describe("the console when the store fails", () => {
  it("says the gate answered that the store failed (not that it could not be reached), and tries again when asked", async () => {
    await signedInOnStoreOfItsOwn(async (redis) => {
      await redis.stop();
      await page.locator("#refresh").click();
      const alert = page.locator("#view [role=alert]");
      await alert.waitFor();
      expect(await alert.innerText()).toBe("The gate answered 503: The rate-limit store failed.");
      // the operator is still signed in, and the page offers the view again once the store is back
      expect(await page.locator("#sign-out").isVisible()).toBe(true);
      await redis.start();
      await expect
        .poll(
          async () => {
            if (await alert.isVisible()) await page.locator("#view [data-action=retry]").click();
            return page.locator("#refresh").isVisible();
          },
          { timeout: 30_000, interval: 1000 },
        )
        .toBe(true);
    });
  }, 90_000);

  it("tells an action the store failed as not confirmed, though the view cannot be read again, and one the gate never answered likewise", async () => {
    const errors: string[] = [];
    const onError = (e: Error) => void errors.push(e.message);
    page.on("pageerror", onError);
    try {
      await signedInOnStoreOfItsOwn(async (redis) => {
        await page.locator("#lookup-kind").selectOption("ip");
        await page.locator("#lookup-value").fill("198.51.100.40");
        await page.locator("#lookup button").click();
        await page.locator("[data-fact=block]").waitFor();

        // the block's call and the view's usage after it both meet the store down: the block's
        // answer is what the operator must read (a 503 change may have landed, README: Admin API)
        await redis.stop();
        await page.locator("[data-action=block]").click();
        const result = page.locator("#result:not(:empty):not([aria-busy])");
        await result.waitFor();
        expect(await result.innerText()).toBe("block: not confirmed — 503 The rate-limit store failed. It may have landed all the same: send it again to know it did.");
        expect(await page.locator("#view [role=alert]").innerText()).toBe("The gate answered 503: The rate-limit store failed.");

        await redis.start();
        await expect
          .poll(
            async () => {
              if (await page.locator("#view [role=alert]").isVisible()) await page.locator("#view [data-action=retry]").click();
              return page.locator("[data-fact=block]").isVisible();
            },
            { timeout: 30_000, interval: 1000 },
          )
          .toBe(true);

        // the gate out of reach for the block alone: said so, not left as if nothing was clicked
        await page.route("**/__slidegate/block", (route) => route.abort("connectionreset"));
        await page.locator("[data-action=block]").click();
        await result.waitFor();
        expect(await result.innerText()).toMatch(/^block: not confirmed — the gate could not be reached \(.+\)\. It may have landed all the same: send it again to know it did\.$/);
        await page.unroute("**/__slidegate/block");
      });
      expect(errors).toEqual([]);
    } finally {
      page.off("pageerror", onError);
    }
  }, 90_000);
});
