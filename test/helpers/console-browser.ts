import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";

/** Debian's Chromium, or the one CHROMIUM_PATH names. */
export const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

export interface ConsoleBrowser {
  context: BrowserContext;
  page: Page;
  /** closes the browser and removes its profile */
  close(): Promise<void>;
}

/**
 * A headless Chromium with a profile of its own (so the origin's storage starts empty) and one
 * page, whose dialogs (the console's confirmations) are accepted and their messages kept in
 * `dialogs`. With `backForwardCache`, pages left are kept for Back as a browser keeps them
 * (Playwright turns that off, since a page restored so fires no load event: wait for
 * `commit` on goBack).
 *
 * @example
 * const browser = await consoleBrowser(dialogs);
 * await browser.page.goto(consoleUrl);
 */
export async function consoleBrowser(dialogs: string[], options: { backForwardCache?: boolean } = {}): Promise<ConsoleBrowser> {
  const profile = mkdtempSync(join(tmpdir(), "slidegate-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    ignoreDefaultArgs: options.backForwardCache ? ["--disable-back-forward-cache"] : undefined,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("dialog", (dialog) => {
    dialogs.push(dialog.message());
    void dialog.accept();
  });
  return {
    context,
    page,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Holds the page's calls to the admin route `route` (those whose body `matches`) until
 * `release()`: an answer that arrives late. `stop()` lets every later call through.
 *
 * @example
 * const late = await holdCalls(page, "usage");
 * try { …; late.release(); } finally { await late.stop(); }
 */
export async function holdCalls(page: Page, route: string, matches: (body: string) => boolean = () => true) {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const url = `**/__slidegate/${route}`;
  await page.route(url, async (call) => {
    if (matches(call.request().postData() ?? "")) await held;
    await call.continue();
  });
  return { release, stop: () => page.unroute(url) };
}
