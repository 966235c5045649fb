/** The console's stylesheet: system fonts, one column on narrow screens, no external resource. */
export const CONSOLE_CSS = `
:root { --fg: #1d2330; --muted: #5f6b7a; --line: #d9dee5; --bg: #f6f7f9; --card: #fff; --accent: #2457c5; --bad: #b3261e; --ok: #1e7d3a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 12px 20px; align-items: center; padding: 10px 20px; background: #17202e; color: #fff; }
header h1 { font-size: 16px; margin: 0; letter-spacing: .02em; }
header h1 span { color: #8fb3ff; font-weight: 400; }
nav { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: center; flex: 1; }
nav a { color: #dbe6ff; text-decoration: none; }
nav a:hover, nav a.current { color: #fff; text-decoration: underline; }
nav form { display: flex; flex-wrap: wrap; gap: 6px; margin-left: auto; max-width: 100%; }
nav form input { flex: 1 1 10em; min-width: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 16px 20px 40px; }
h2 { font-size: 18px; margin: 8px 0 12px; }
h3 { font-size: 14px; margin: 0 0 8px; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: .04em; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px; margin-bottom: 16px; }
/* a table as wide as its columns (a rule's ten) scrolls in its card on a phone, the page stays its width */
.card:has(> table) { overflow-x: auto; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 10px; }
.stat { border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; background: #fbfcfd; }
.stat dt { color: var(--muted); font-size: 12px; }
.stat dd { margin: 0; font-size: 20px; font-variant-numeric: tabular-nums; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(360px, 100%), 1fr)); gap: 0 16px; }
.charts .wide { grid-column: 1 / -1; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart text { font-size: 11px; fill: var(--muted); }
svg.chart .grid-line { stroke: var(--line); }
.legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 6px 0 0; padding: 0; list-style: none; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; word-break: break-all; }
a { color: var(--accent); }
button { font: inherit; padding: 5px 12px; border-radius: 6px; border: 1px solid #b8c2cf; background: #fff; cursor: pointer; }
button:hover { border-color: var(--accent); }
button.danger { border-color: #e2b4b0; color: var(--bad); }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
input, select { font: inherit; padding: 4px 8px; border: 1px solid #b8c2cf; border-radius: 6px; background: #fff; }
.actions { display: flex; flex-wrap: wrap; gap: 10px 14px; align-items: center; }
.actions form { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; }
/* what the registry names a key by (a label, up to 200 characters of anything) breaks where it
   must: one long word would widen its table past the page, and the tier and counts beside it with it */
.label, h2, .result { overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.bad { color: var(--bad); }
.ok { color: var(--ok); }
.result { white-space: pre-wrap; margin: 10px 0 0; padding: 8px 10px; border-radius: 6px; background: #f1f4f8; min-height: 1em; }
.result:empty { display: none; }
#login { max-width: 420px; margin: 60px auto; }
#login form { display: grid; gap: 10px; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; background: #eef2f7; }
.pill.bad { background: #fbe9e7; }
/* a call in flight: said in the header (a slow store must not look like a click that did nothing) */
#busy { font-size: 12px; color: #ffd47a; }
/* the view being left while the next one loads: seen as such, and not acted on */
[inert] { opacity: .55; cursor: progress; }
button:disabled { opacity: .55; cursor: progress; }
[hidden] { display: none !important; }
`;
