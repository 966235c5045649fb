import ipaddr from "ipaddr.js";
import { CONSOLE_JS } from "./app.ts";
import { CONSOLE_CSS } from "./style.ts";

/**
 * The operator's console: one HTML page with its stylesheet and script inline, shipped in the
 * Worker's bundle — no framework, no CDN, no request but to the gate's own admin API. The page
 * holds no data and no secret: it asks for the admin token, keeps it in the page's memory
 * only (never in storage of the origin, never a cookie, never a URL) and sends it as a bearer
 * token with each admin call. A Content-Security-Policy allows exactly this script and stylesheet (by hash)
 * and connections to this origin only; no page may frame it, and no page that opened it keeps
 * its window (Cross-Origin-Opener-Policy).
 *
 * @example
 * GET /__slidegate/   → the page (the admin API must be on: ADMIN_TOKEN)
 */
const CONSOLE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>slidegate console</title>
<link rel="icon" href="data:,">
<style>${CONSOLE_CSS}</style>
</head>
<body>
<header>
  <h1>slidegate <span>console</span></h1>
  <nav id="nav" hidden>
    <a href="#/health" data-nav="health">Health</a>
    <a href="#/config" data-nav="config">Configuration</a>
    <form id="lookup">
      <select id="lookup-kind" aria-label="Identity kind"><option value="key">API key</option><option value="ip">IP address</option><option value="user">User (app)</option></select>
      <input id="lookup-value" placeholder="API key, IP or user" aria-label="API key, IP address or user" autocomplete="off" required>
      <button>Look up</button>
    </form>
    <button id="sign-out" type="button">Sign out</button>
  </nav>
  <span id="busy" role="status" hidden>waiting for the gate…</span>
</header>
<main>
  <section id="login" class="card" hidden>
    <h2>Sign in</h2>
    <form id="login-form">
      <label for="token">Admin token</label>
      <input id="token" type="password" autocomplete="off" required>
      <button class="primary">Sign in</button>
      <p id="login-error" class="bad" role="alert"></p>
    </form>
    <p class="muted">The token stays in this page's memory alone, until you sign out or leave or reload the page, and goes only to this gate's admin API, as a bearer token.</p>
  </section>
  <section id="view" aria-live="polite"></section>
</main>
<script>${CONSOLE_JS}</script>
</body>
</html>
`;

const base64 = (bytes: ArrayBuffer) => btoa(String.fromCharCode(...new Uint8Array(bytes)));
const digest = async (text: string) => `'sha256-${base64(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)))}'`;

let headers: Promise<Headers> | undefined;

/** The page's headers, hashes included: computed once per isolate. */
function pageHeaders(): Promise<Headers> {
  headers ??= (async () =>
    new Headers({
      "Content-Type": "text/html; charset=utf-8",
      "Cache-Control": "no-store",
      "Content-Security-Policy": [
        "default-src 'none'",
        `script-src ${await digest(CONSOLE_JS)}`,
        `style-src ${await digest(CONSOLE_CSS)}`,
        "connect-src 'self'",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
      ].join("; "),
      "X-Content-Type-Options": "nosniff",
      "Referrer-Policy": "no-referrer",
      "X-Frame-Options": "DENY",
      // The console shares its origin with the API behind the gate: a page of that origin (user
      // content, an XSS) that opened it, or that it was opened from, would otherwise hold its
      // window, and script its page (and read the token it holds). Same-origin
      // only: such an opener gets a closed window.
      "Cross-Origin-Opener-Policy": "same-origin",
    }))();
  return headers;
}

/** Whether a host (a name, an address, an IPv6 address in brackets) is this machine: localhost, 127.0.0.0/8, ::1 (or ::ffff:127.x), as `npm run keys` reads it. */
function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, "$1");
  if (bare.toLowerCase() === "localhost") return true;
  return ipaddr.isValid(bare) && ipaddr.process(bare).range() === "loopback";
}

/**
 * Where a browser that asked for the page over plain HTTP from another machine is sent — the
 * page's https:// URL — or undefined: served as asked. The operator types the admin token into
 * the page, which sends it with every call to its own origin: from an http:// page it would
 * cross the network in clear, which `npm run keys` refuses to do. A redirect of the page (a GET,
 * before any token) sends none; the admin calls, already carrying it, are answered as sent.
 * A browser on this machine is served over HTTP: the URL names it (npm run dev's gate, a
 * tunnel's end), or the client address does (wrangler dev rewrites the URL to the host of a
 * route in wrangler.toml, http://api.example.com/…, and gives CF-Connecting-IP as 127.0.0.1;
 * Cloudflare gives the visitor's, never this machine's).
 *
 * @example
 * secureConsoleUrl(new URL("http://api.example.com/__slidegate/"), "203.0.113.7"); // "https://api.example.com/__slidegate/"
 * secureConsoleUrl(new URL("http://127.0.0.1:8787/__slidegate/"), "127.0.0.1");   // undefined
 */
export function secureConsoleUrl(url: URL, client: string | null): string | undefined {
  if (url.protocol === "https:" || isLoopback(url.hostname) || (client !== null && isLoopback(client))) return undefined;
  // the port was HTTP's: HTTPS is on its own
  return `https://${url.hostname}${url.pathname}`;
}

export async function consolePage(method: string): Promise<Response> {
  return new Response(method === "HEAD" ? null : CONSOLE_HTML, { headers: await pageHeaders() });
}
