import { READ_KEY_JS } from "./key-reading.ts";

/**
 * The console's script, as the page inlines it (plain ES2020, no build step, no dependency).
 * Every value from the gate is put in the page as text (textContent, SVG attributes), never
 * as markup. The admin token lives in this page's memory alone (no storage, no cookie, no URL),
 * and goes only into the Authorization header of calls to this gate's admin routes.
 *
 * Views, by the URL's fragment (which never holds the token): #/health, #/config,
 * #/identity/hash/<sha256 hex>, #/identity/tag/<address tag>.
 */
export const CONSOLE_JS = String.raw`
"use strict";
(function () {
  // where an earlier build kept the token, in the tab's session storage
  var STORE = "slidegate.adminToken";
  // fixed, never read from the page's own path: that path may be a crafted spelling that
  // would make the calls (and the token) go to another host
  var BASE = "/__slidegate/";
  var COLORS = { admitted: "#2e7d32", denied: "#c62828", "shadow-denied": "#ef6c00", blocked: "#6a1b9a", "failed-open": "#f9a825",
    "failed-closed": "#4e342e", "failed-shadow": "#9e9d24", allowlisted: "#00838f", denylisted: "#37474f", "unknown-key": "#8d6e63", "disabled-key": "#ad1457",
    "ambiguous-key": "#5d4037", "key-required": "#546e7a", "store failures": "#d84315" };
  var refreshTimer = 0;
  var configuration = null;
  // Counts the views route() has drawn. A view's answers arrive when they will: one for a view
  // the operator has left (a slow usage call, an action's reply) would replace the view now
  // shown, its buttons acting on the identity left while the address names another.
  var drawn = 0;
  // Admin calls in flight, shown in the header while there are any: on a slow store a click
  // that seems to do nothing is clicked again.
  var inFlight = 0;
  // Whether a health view's figures are on their way: Refresh and the 15 s refresh ask for
  // them once, not again over the answer still coming.
  var healthLoading = -1;

  function $(id) { return document.getElementById(id); }
  // The admin token, in this page's memory and nowhere else. Every storage a page has
  // (sessionStorage, localStorage, cookies, IndexedDB) belongs to the origin, which the console
  // shares with the API behind the gate: a page of the API opened in this tab or another (user
  // content, an XSS, a third-party script) would read the token there. So a reload, or a new
  // tab, asks for it again.
  var adminToken = null;
  function token() { return adminToken; }

  /** An element with attributes (text: its text) and children (nodes or strings, as text). */
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAll(node, attrs);
    append(node, children);
    return node;
  }
  function svg(tag, attrs, children) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    setAll(node, attrs);
    append(node, children);
    return node;
  }
  function setAll(node, attrs) {
    for (var name in attrs || {}) {
      var value = attrs[name];
      if (value === undefined || value === null || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else if (name === "onclick" || name === "onsubmit" || name === "onchange") node[name] = value;
      else node.setAttribute(name, String(value));
    }
  }
  function append(node, children) {
    (children || []).forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    });
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return "—";
    if (ms === 0) return "0";
    var units = [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000]];
    for (var i = 0; i < units.length; i++) if (ms % units[i][1] === 0) return ms / units[i][1] + units[i][0];
    return ms + "ms";
  }
  function clock(iso) {
    var d = new Date(iso);
    return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
  }

  /**
   * One admin call. A refused token signs out; any answer is returned with its status. Signed
   * out, no call is made ("Bearer null" would be a failed sign-in counted against this address),
   * and an answer that arrives after a sign-out is dropped: the view it was for must not be
   * drawn (with its figures) under the sign-in form, nor arm its refresh again.
   */
  async function call(route, body) {
    var sent = token();
    if (!sent) throw new Error("signed out");
    var res, text;
    inFlight++;
    showBusy();
    try {
      res = await fetch(BASE + route, {
        method: "POST", cache: "no-store", credentials: "omit",
        headers: { "Authorization": "Bearer " + sent, "Content-Type": "application/json" },
        body: JSON.stringify(body || {}),
      });
      text = await res.text();
    } finally {
      inFlight--;
      showBusy();
    }
    if (token() !== sent) throw new Error("signed out");
    var data;
    try { data = JSON.parse(text); } catch (e) { data = { detail: text }; }
    if (res.status === 401) {
      signOut("The admin token was refused.");
      throw new Error("unauthorized");
    }
    if (res.status === 429 && data && data.type === "urn:slidegate:too-many-attempts") {
      signOut("Too many failed sign-ins from this address: wait " + (res.headers.get("Retry-After") || "a while") + " s.");
      throw new Error("throttled");
    }
    return { ok: res.ok, status: res.status, data: data };
  }
  /**
   * An answer as JSON, its bidirectional controls escaped as JSON may write them: quoted with a
   * label, one would reorder the rest of the line it is shown in.
   */
  function quoted(value) {
    return JSON.stringify(value).replace(/[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g, function (c) { return "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"); });
  }
  function problemText(r) {
    return r.status + " " + ((r.data && (r.data.detail || r.data.title)) || "");
  }
  /** A view's call the gate refused: an answer (a store failure is a 503), not a gate out of reach. */
  function refusal(r) {
    var e = new Error(problemText(r));
    e.status = r.status;
    e.detail = (r.data && (r.data.detail || r.data.title)) || "";
    return e;
  }

  /** Signed out, a call still on its way is no concern of the page: its answer is dropped. */
  function showBusy() { $("busy").hidden = !inFlight || !token(); }

  function signOut(message) {
    adminToken = null;
    showBusy();
    clearInterval(refreshTimer);
    configuration = null;
    $("nav").hidden = true;
    $("view").replaceChildren();
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("token").value = "";
    $("token").focus();
  }

  async function signIn(event) {
    event.preventDefault();
    var button = $("login-form").querySelector("button");
    if (button.disabled) return;
    adminToken = $("token").value;
    $("token").value = "";
    button.disabled = true;
    try {
      var r = await call("configuration", {});
      if (!r.ok) return signOut(problemText(r));
    } catch (e) {
      // a refused token has signed out already, with its reason; anything else must not leave the token behind
      if (token()) signOut("The gate did not answer: " + e.message);
      return;
    } finally {
      button.disabled = false;
    }
    $("login").hidden = true;
    $("nav").hidden = false;
    route();
  }

  function route() {
    clearInterval(refreshTimer);
    drawn++;
    if (!token()) return signOut("");
    $("login").hidden = true;
    $("nav").hidden = false;
    var parts = location.hash.replace(/^#\/?/, "").split("/");
    document.querySelectorAll("[data-nav]").forEach(function (a) { a.classList.toggle("current", a.getAttribute("data-nav") === parts[0]); });
    var view = $("view");
    // the view being left stays in sight until the next is drawn, but inert: its buttons act on
    // an identity the address no longer names, and their answer would be drawn nowhere
    Array.prototype.forEach.call(view.children, function (c) { c.inert = true; });
    if (parts[0] === "config") return showConfiguration(view);
    if (parts[0] === "identity" && parts[1] === "hash" && /^[0-9a-f]{64}$/.test(parts[2] || "")) return showIdentity(view, { hash: parts[2] });
    if (parts[0] === "identity" && parts[1] === "tag" && /^[iu][A-Za-z0-9_-]{22}$/.test(parts[2] || "")) return showIdentity(view, { tag: parts[2] });
    return showHealth(view);
  }

  /** A call ended by a sign-out (a refused token, a throttled address, another tab): nothing more to say. */
  function signedOut(e) {
    return e && (e.message === "unauthorized" || e.message === "throttled" || e.message === "signed out");
  }
  /** An answer is told from silence: a 503 sends the operator to the store, not to the network. */
  function failureText(e) {
    return e && e.status ? "The gate answered " + e.status + ": " + e.detail : "The gate could not be reached: " + (e && e.message);
  }

  function failed(view, e) {
    if (signedOut(e)) return;
    // the view can be asked for again: with the view went its own Refresh button
    view.replaceChildren(
      el("p", { class: "card bad", role: "alert", text: failureText(e) }),
      el("button", { type: "button", "data-action": "retry", text: "Try again", onclick: route }),
    );
  }

  async function config() {
    if (!configuration) {
      var r = await call("configuration", {});
      if (!r.ok) throw refusal(r);
      configuration = r.data;
    }
    return configuration;
  }

  /* ---------- charts: inline SVG ---------- */

  function niceMax(v) {
    if (v <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  /** A line chart of per-minute series (null: no value that minute), with a legend carrying each series' total. */
  function lineChart(name, title, labels, series, opts) {
    opts = opts || {};
    var W = opts.wide ? 1000 : 480, H = 190, L = 48, R = 10, T = 10, B = 24;
    var max = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v !== null && v > max) max = v; }); });
    max = niceMax(max);
    var n = labels.length;
    var x = function (i) { return L + (n <= 1 ? 0 : (i * (W - L - R)) / (n - 1)); };
    var y = function (v) { return T + (H - T - B) * (1 - v / max); };
    var nodes = [];
    [0, 0.5, 1].forEach(function (f) {
      nodes.push(svg("line", { class: "grid-line", x1: L, x2: W - R, y1: y(max * f), y2: y(max * f) }));
      nodes.push(svg("text", { x: L - 6, y: y(max * f) + 3, "text-anchor": "end", text: String(+(max * f).toFixed(2)) + (opts.unit || "") }));
    });
    [0, Math.floor((n - 1) / 2), n - 1].forEach(function (i) {
      if (labels[i]) nodes.push(svg("text", { x: x(i), y: H - 6, "text-anchor": i === 0 ? "start" : i === n - 1 ? "end" : "middle", text: clock(labels[i]) }));
    });
    series.forEach(function (s) {
      var d = "";
      var pen = false;
      s.values.forEach(function (v, i) {
        if (v === null) { pen = false; return; }
        d += (pen ? "L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      if (d) nodes.push(svg("path", { d: d, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-linejoin": "round" }, [svg("title", { text: s.name })]));
      s.values.forEach(function (v, i) {
        if (v !== null && v > 0) nodes.push(svg("circle", { cx: x(i), cy: y(v), r: 2.2, fill: s.color }, [svg("title", { text: s.name + " at " + clock(labels[i]) + ": " + v + (opts.unit || "") })]));
      });
    });
    var chart = svg("svg", { class: "chart", viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title }, nodes);
    var legend = el("ul", { class: "legend" }, series.map(function (s) {
      var swatch = el("i");
      swatch.style.background = s.color;
      return el("li", { "data-series": s.name, "data-sum": s.sum }, [swatch, s.name + (s.sum !== undefined ? ": " + s.sum : "")]);
    }));
    return el("div", { class: "card" + (opts.wide ? " wide" : ""), "data-chart": name }, [el("h3", { text: title }), chart, legend]);
  }

  /* ---------- health ---------- */

  /** Refresh and the 15 s refresh: a view whose figures are on their way is not asked for again. */
  function refreshHealth(view) { if (healthLoading !== drawn) showHealth(view); }

  async function showHealth(view) {
    var figures, mine = drawn;
    healthLoading = mine;
    if ($("refresh")) $("refresh").disabled = true;
    try {
      var r = await call("figures", { minutes: 60 });
      if (!r.ok) throw refusal(r);
      figures = r.data;
    } catch (e) {
      return mine === drawn && failed(view, e);
    } finally {
      if (healthLoading === mine) healthLoading = -1;
    }
    if (mine !== drawn) return;
    var t = figures.totals;
    var labels = figures.minutes.map(function (m) { return m.at; });
    var outcomes = Object.keys(t.decisions).filter(function (o) { return t.decisions[o] > 0 || o === "admitted" || o === "denied"; });
    var stats = el("dl", { class: "grid" }, outcomes.map(function (o) {
      return el("div", { class: "stat" }, [el("dt", { text: o }), el("dd", { "data-total": o, text: t.decisions[o] })]);
    }).concat([
      el("div", { class: "stat" }, [el("dt", { text: "all decisions" }), el("dd", { "data-total": "all", text: t.all })]),
      el("div", { class: "stat" }, [el("dt", { text: "fail-open" }), el("dd", { "data-total": "fail-open", class: t.decisions["failed-open"] ? "bad" : "", text: t.decisions["failed-open"] })]),
      // beside the outcomes, not one of them: a shadow call that failed next to an admission
      // leaves the decision "admitted", and only this shows the outage
      el("div", { class: "stat" }, [el("dt", { text: "store failures" }), el("dd", { "data-total": "store-failures", class: t.storeFailures ? "bad" : "", text: t.storeFailures })]),
      el("div", { class: "stat" }, [el("dt", { text: "store p50 / p99" }), el("dd", { "data-total": "latency", text: t.storeLatencyMs.count ? "≤" + t.storeLatencyMs.p50 + " / ≤" + t.storeLatencyMs.p99 + " ms" : "—" })]),
      el("div", { class: "stat" }, [el("dt", { text: "lost in flushes" }), el("dd", { "data-total": "lost", class: t.lost ? "bad" : "", text: t.lost })]),
    ]));
    var decisions = lineChart("decisions", "Decisions per minute, by outcome", labels, outcomes.map(function (o) {
      return { name: o, color: COLORS[o] || "#555", sum: t.decisions[o], values: figures.minutes.map(function (m) { return m.decisions[o]; }) };
    }), { wide: true });
    var failOpen = lineChart("fail-open", "Failed open and store failures per minute", labels, [{
      name: "failed-open", color: COLORS["failed-open"], sum: t.decisions["failed-open"], values: figures.minutes.map(function (m) { return m.decisions["failed-open"]; }),
    }, {
      name: "store failures", color: COLORS["store failures"], sum: t.storeFailures, values: figures.minutes.map(function (m) { return m.storeFailures; }),
    }]);
    var latency = lineChart("latency", "Store latency per minute (bucket upper bound)", labels, [
      { name: "p50", color: "#2457c5", values: figures.minutes.map(function (m) { return m.storeLatencyMs.p50; }) },
      { name: "p99", color: "#c62828", values: figures.minutes.map(function (m) { return m.storeLatencyMs.p99; }) },
    ], { unit: " ms" });

    var rows = figures.top.identities.map(function (id) {
      var target = id.kind === "key" ? "#/identity/hash/" + id.hash : "#/identity/tag/" + id.tag;
      return el("tr", { "data-identity": id.tag }, [
        el("td", {}, [el("a", { href: target, class: "mono", text: id.tag })]),
        el("td", { text: id.kind === "key" ? "API key" : id.kind === "user" ? "user" : "address" }),
        el("td", { class: "label", text: id.label || (id.registered ? "(no label)" : "") }),
        el("td", { text: id.tier }),
        el("td", { "data-refused": id.refused, text: id.refused }),
      ]);
    });
    var top = el("div", { class: "card", id: "top" }, [
      el("h3", { text: "Refused most — last " + figures.top.minutes + " minutes" }),
      rows.length
        ? el("table", {}, [el("thead", {}, [el("tr", {}, ["Identity", "Kind", "Label", "Tier", "Refused"].map(function (h) { return el("th", { text: h }); }))]), el("tbody", {}, rows)])
        : el("p", { class: "muted", text: "Nobody was refused." }),
    ]);
    var head = el("div", { class: "actions" }, [
      el("h2", { text: "Health — last 60 minutes" }),
      el("button", { id: "refresh", type: "button", text: "Refresh", onclick: function () { refreshHealth(view); } }),
      el("span", { class: "muted", id: "updated", text: "updated " + new Date(figures.generatedAt).toLocaleTimeString() + " · figures reach the console within seconds" }),
    ]);
    view.replaceChildren(head, el("div", { class: "card" }, [stats]), el("div", { class: "charts" }, [decisions, failOpen, latency]), top);
    clearInterval(refreshTimer);
    refreshTimer = setInterval(function () { refreshHealth(view); }, 15000);
  }

  /* ---------- identity ---------- */

  async function showIdentity(view, who) {
    var usage, cfg, mine = drawn;
    try {
      cfg = await config();
      var r = await call("usage", who);
      if (!r.ok) throw refusal(r);
      usage = r.data;
    } catch (e) {
      return mine === drawn && failed(view, e);
    }
    if (mine !== drawn) return;
    var entry = usage.registry;
    var isKey = !!who.hash;
    var result = el("p", { class: "result", id: "result", role: "status" });
    var blocked = usage.blockedForMs === null || usage.blockedForMs > 0;

    var acting = false;
    /** Asks, calls, shows the answer, and shows the identity again. */
    async function act(question, route, body) {
      if (acting || !confirm(question)) return;
      // one action at a time, said while its answer is on its way: on a slow store a second
      // click would send it again (a second registration, a block restarted)
      acting = true;
      view.querySelectorAll("button, input, select").forEach(function (c) { c.disabled = true; });
      result.textContent = route + ": sending…";
      result.className = "result";
      result.setAttribute("aria-busy", "true");
      var r;
      // an import names its key in its entries, and its body takes no other field: the route refuses one
      var sent = route === "keys/import" ? body : Object.assign({}, who, body || {});
      var unanswered = null;
      try { r = await call(route, sent); } catch (e) {
        if (e.message === "unauthorized" || e.message === "throttled" || e.message === "signed out") return;
        unanswered = e;
      }
      if (mine !== drawn) return;
      await showIdentity(view, who);
      if (mine !== drawn) return;
      // a change the store failed (a 5xx) or that was never answered may have landed all the
      // same: "refused" would tell the operator it did not, and a block thought missing is sent
      // again, one thought in place is not
      var text = unanswered ? "not confirmed — the gate could not be reached (" + unanswered.message + ")."
        : r.ok ? "done — " + quoted(r.data)
        : r.status >= 500 ? "not confirmed — " + problemText(r)
        : "refused — " + problemText(r);
      if (unanswered || r.status >= 500) text += " It may have landed all the same: send it again to know it did.";
      // the store that failed the change fails the view's own reading too, which then shows its
      // error in place of the view: the answer goes above it, never lost
      var shown = $("result");
      if (!shown) view.prepend(shown = el("p", { id: "result", role: "status" }));
      shown.textContent = route + ": " + text;
      shown.className = "result " + (r && r.ok ? "ok" : "bad");
      shown.removeAttribute("aria-busy");
    }

    // the label in an isolate of its own: its bidirectional controls (a right-to-left override
    // left open) would otherwise reorder the page's own words after it
    var name = isKey ? (entry && entry.label ? [el("bdi", { text: entry.label }), " (API key)"] : ["API key"]) : [usage.identity.kind === "user" ? "User" : "Address"];
    var facts = el("dl", { class: "grid" }, [
      el("div", { class: "stat" }, [el("dt", { text: "tag" }), el("dd", { class: "mono", "data-fact": "tag", text: usage.identity.tag })]),
      el("div", { class: "stat" }, [el("dt", { text: "tier" }), el("dd", { "data-fact": "tier", text: usage.tier })]),
      el("div", { class: "stat" }, [el("dt", { text: "block" }), el("dd", { "data-fact": "block", class: blocked ? "bad" : "", text: usage.blockedForMs === null ? "blocked, no end" : usage.blockedForMs > 0 ? "blocked for " + Math.ceil(usage.blockedForMs / 1000) + " s" : "not blocked" })]),
      isKey && el("div", { class: "stat" }, [el("dt", { text: "registry" }), el("dd", { "data-fact": "registry", class: entry && entry.disabled ? "bad" : "", text: entry ? (entry.disabled ? "disabled" : "registered") : usage.unknownKey === "reject" ? "not registered: refused (401)" : usage.unknownKey === "ip" ? "not registered: limited as its address" : "not registered" })]),
    ]);
    var overrides = (entry && entry.overrides) || {};
    function overrideCell(name) {
      var o = overrides[name];
      return el("td", {}, o ? [
        [o.limit !== undefined ? "limit " + o.limit : "", o.windowMs !== undefined ? "window " + duration(o.windowMs) : ""].filter(Boolean).join(", ") + " ",
        el("button", { type: "button", "data-action": "clear-override", text: "Clear", onclick: function () {
          act("Clear the override of rule \"" + name + "\" for this key?", "keys/override", { rule: name, clear: true });
        } }),
      ] : ["—"]);
    }
    var shownRules = usage.rules.map(function (rule) { return rule.name; });
    function usageRow(rule, address) {
      return el("tr", { "data-rule": (address ? "address/" : "") + rule.name }, [
        el("td", {}, [rule.name, address ? " " : null, address ? el("span", { class: "pill", text: "address rule" }) : null, rule.shadow ? " " : null, rule.shadow ? el("span", { class: "pill", text: "shadow" }) : null]),
        el("td", { "data-used": rule.used, text: rule.used }),
        el("td", { text: rule.limit }),
        el("td", { text: duration(rule.windowMs) }),
        el("td", { text: rule.remaining }),
        el("td", { text: rule.resetMs ? duration(Math.ceil(rule.resetMs / 1000) * 1000) : "—" }),
        address ? el("td", { text: "—" }) : overrideCell(rule.name),
      ]);
    }
    var rules = el("table", { id: "usage" }, [
      el("thead", {}, [el("tr", {}, ["Rule", "Used", "Limit", "Window", "Remaining", "Frees in", "Override"].map(function (h) { return el("th", { text: h }); }))]),
      // an address's address rules too: every request from it counts there, whatever key it
      // carries, so they are what stops a caller that rotates keys
      el("tbody", {}, usage.rules.map(function (rule) { return usageRow(rule, false); }).concat((usage.addressRules || []).map(function (rule) { return usageRow(rule, true); }), Object.keys(overrides).filter(function (name) { return shownRules.indexOf(name) < 0; }).map(function (name) {
        // an override of a rule another tier has (or none does now): it holds once the key moves
        // there, so it is shown, and can be cleared, as keys/get holds it
        return el("tr", { "data-rule": name }, [el("td", { text: name + " (not a rule of this tier)" }), "—", "—", "—", "—", "—"].map(function (c) {
          return typeof c === "string" ? el("td", { text: c }) : c;
        }).concat([overrideCell(name)]));
      }))),
    ]);

    // required: an empty field is Number("") = 0, a block "for 0 minutes" the gate refuses in seconds
    var minutes = el("input", { id: "block-minutes", type: "number", min: 1, max: 43200, step: 1, value: 10, required: true, "aria-label": "Block for minutes" });
    var controls = [
      el("form", { id: "block-form", onsubmit: function (e) {
        e.preventDefault();
        var m = Number(minutes.value);
        act("Block " + usage.identity.tag + " for " + m + " minutes? Its requests will be answered 403 everywhere.", "block", { seconds: Math.round(m * 60) });
      } }, [el("button", { class: "danger", "data-action": "block", text: "Block for" }), minutes, "minutes"]),
      el("button", { type: "button", "data-action": "unblock", text: "Unblock", onclick: function () { act("Lift the block of " + usage.identity.tag + "?", "unblock"); } }),
      el("button", { type: "button", "data-action": "reset", text: "Reset usage", onclick: function () { act("Clear every window of " + usage.identity.tag + "? Its counts start from zero.", "reset"); } }),
    ];
    if (isKey) {
      var tierOptions = Object.keys(cfg.tiers).map(function (t) { return el("option", { value: t, text: t, selected: t === usage.tier }); });
      // a tier the configuration no longer has: shown as the key's, not as the first configured
      // one, which "Set tier" would then move the key to
      if (Object.keys(cfg.tiers).indexOf(usage.tier) < 0) tierOptions.unshift(el("option", { value: "", text: usage.tier + " (not configured)", selected: true, disabled: true }));
      var tiers = el("select", { id: "tier-select", "aria-label": "Tier" }, tierOptions);
      controls.push(el("form", { id: "tier-form", onsubmit: function (e) {
        e.preventDefault();
        if (!tiers.value) return;
        // the tier alone: writing back the entry as this page read it would undo what changed
        // since, a key disabled meanwhile enabled again. keys/update for a key the registry held
        // (one write: a key deleted meanwhile stays deleted), a one-entry import (it merges) else
        var question = "Move this key to tier \"" + tiers.value + "\"?";
        if (entry) act(question, "keys/update", { tier: tiers.value });
        else act(question, "keys/import", { entries: [Object.assign({}, who, { tier: tiers.value })] });
      } }, [el("button", { "data-action": "tier", text: "Set tier" }), tiers]));
      // the flag alone, as the tier: keys/update for a key the registry holds, so a key deleted
      // meanwhile stays deleted; a key nobody registered is registered disabled (an import merges)
      // in the tier it is decided by now: without one the import takes the default tier, and a
      // key RATE_LIMITS.keys gives another would keep the default one once enabled (the
      // registry's entry wins). Not under unknownKeys "reject", where a key nobody knows is
      // refused (401) already: registered disabled, it would be one Enable away from admitted
      if (entry && entry.disabled) {
        controls.push(el("button", { type: "button", "data-action": "enable", text: "Enable", onclick: function () {
          act("Enable this key again? Its requests will be decided by its tier's rules.", "keys/update", { disabled: false });
        } }));
      } else if (entry) {
        controls.push(el("button", { type: "button", class: "danger", "data-action": "disable", text: "Disable", onclick: function () {
          act("Disable this key? Its requests will be answered 403 everywhere.", "keys/update", { disabled: true });
        } }));
      } else if (usage.unknownKey !== "reject") {
        controls.push(el("button", { type: "button", class: "danger", "data-action": "disable", text: "Disable", onclick: function () {
          act("Register this key disabled, in tier \"" + usage.tier + "\"? Its requests will be answered 403 everywhere.", "keys/import", {
            entries: [Object.assign({}, who, { tier: usage.tier, disabled: true })],
          });
        } }));
      }
      var ruleNames = [];
      Object.keys(cfg.tiers).forEach(function (t) { cfg.tiers[t].forEach(function (r) { if (ruleNames.indexOf(r.name) < 0) ruleNames.push(r.name); }); });
      var ruleSelect = el("select", { id: "override-rule", "aria-label": "Rule" }, ruleNames.map(function (n) { return el("option", { value: n, text: n }); }));
      var limit = el("input", { id: "override-limit", type: "number", min: 1, max: 1000000, placeholder: "limit", "aria-label": "Limit" });
      var windowText = el("input", { id: "override-window", placeholder: "window, e.g. 2m", size: 12, "aria-label": "Window" });
      controls.push(el("form", { id: "override-form", onsubmit: function (e) {
        e.preventDefault();
        var o = {};
        if (limit.value !== "") o.limit = Number(limit.value);
        if (windowText.value.trim() !== "") o.window = /^\d+$/.test(windowText.value.trim()) ? Number(windowText.value.trim()) : windowText.value.trim();
        var rule = ruleSelect.value;
        if (entry) return act("Set rule \"" + rule + "\" of this key to " + JSON.stringify(o) + "?", "keys/override", Object.assign({ rule: rule }, o));
        // registered as an import, which merges: an entry another operator made since this page
        // was drawn keeps its label and its disabled flag (keys/set would replace it whole)
        var created = Object.assign({}, who, { tier: usage.tier, overrides: {} });
        created.overrides[rule] = o;
        act("Register this key in tier \"" + usage.tier + "\" with rule \"" + rule + "\" set to " + JSON.stringify(o) + "?", "keys/import", { entries: [created] });
      } }, [el("button", { "data-action": "override", text: "Override" }), ruleSelect, limit, windowText]));
    }
    // append, not replaceChildren, which writes a null child as the word "null": an address has
    // no hash line
    view.replaceChildren();
    append(view, [
      el("p", {}, [el("a", { href: "#/health", text: "← Health" })]),
      el("h2", {}, name),
      isKey ? el("p", { class: "mono muted", text: "SHA-256 " + who.hash }) : null,
      el("div", { class: "card" }, [facts]),
      el("div", { class: "card" }, [el("h3", { text: "Usage per rule" }), rules]),
      el("div", { class: "card" }, [el("h3", { text: "Act" }), el("div", { class: "actions" }, controls), result]),
    ]);
  }

  /* ---------- configuration ---------- */

  async function showConfiguration(view) {
    var cfg, mine = drawn;
    try { cfg = await config(); } catch (e) { return mine === drawn && failed(view, e); }
    if (mine !== drawn) return;
    function ruleRows(scope, rules) {
      return rules.map(function (r) {
        return el("tr", { "data-rule": scope + "/" + r.name }, [scope, r.name, r.limit, duration(r.windowMs), r.cost, r.path || "any", r.methods ? r.methods.join(", ") : "any",
          r.fail, duration(r.timeoutMs), r.shadow ? "shadow" : "enforced"].map(function (v) { return el("td", { text: v }); }));
      });
    }
    var rows = [];
    Object.keys(cfg.tiers).forEach(function (t) { rows = rows.concat(ruleRows(t, cfg.tiers[t])); });
    rows = rows.concat(ruleRows("address", cfg.addressRules));
    var rulesTable = el("table", { id: "rules" }, [
      el("thead", {}, [el("tr", {}, ["Tier", "Rule", "Limit", "Window", "Cost", "Path", "Methods", "Fail", "Timeout", "Mode"].map(function (h) { return el("th", { text: h }); }))]),
      el("tbody", {}, rows),
    ]);
    function list(title, items) {
      return el("div", {}, [el("h3", { text: title }), items.length ? el("ul", {}, items.map(function (i) { return el("li", { class: "mono", text: i }); })) : el("p", { class: "muted", text: "none" })]);
    }
    function yes(v) { return v ? "yes" : "no"; }
    var settings = [
      ["identity header", cfg.identity.header || "none (client IP)"], ["key required", yes(cfg.identity.required)], ["unknown keys", cfg.identity.unknownKeys],
      ["default tier", cfg.defaultTier], ["fail", cfg.fail], ["timeout", duration(cfg.timeoutMs)], ["denial cache", cfg.denialCacheSize + " identities, " + duration(cfg.denialCacheMaxAgeMs)],
      ["clock", cfg.clock], ["IPv6 prefix", "/" + cfg.ipv6Prefix], ["case-sensitive paths", yes(cfg.caseSensitivePaths)], ["client address, to the origin in", cfg.clientIpHeader],
      ["pass forwarded headers", yes(cfg.passForwardedHeaders)], ["origin time limit", cfg.originTimeoutMs === null ? "none" : duration(cfg.originTimeoutMs)], ["key prefix", cfg.prefix],
      ["CORS", cfg.cors ? cfg.cors.origins.join(", ") + (cfg.cors.credentials ? " (credentials)" : "") : "off"],
    ];
    view.replaceChildren(
      el("h2", { text: "Configuration (read-only)" }),
      el("div", { class: "card" }, [el("h3", { text: "Rules" }), rulesTable]),
      el("div", { class: "card" }, [list("Shadow rules", cfg.shadowRules)]),
      el("div", { class: "card" }, [el("h3", { text: "Settings" }), el("table", { id: "settings" }, [el("tbody", {}, settings.map(function (s) { return el("tr", {}, [el("th", { text: s[0] }), el("td", { text: s[1] })]); }))])]),
      el("div", { class: "card grid" }, [
        list("Configured keys (SHA-256 → tier)", Object.keys(cfg.keys).map(function (h) { return h + " → " + cfg.keys[h]; })),
        list("Allow: keys", cfg.allow.keys), list("Allow: addresses", cfg.allow.ips), list("Deny: keys", cfg.deny.keys), list("Deny: addresses", cfg.deny.ips),
      ]),
    );
  }

  /* ---------- lookup ---------- */

  /** The view target names, drawn again when the address names it already (no hashchange then). */
  function go(target) {
    if (location.hash === target) route();
    else location.hash = target;
  }

  /**
   * A look-up that found nobody, shown in place of the view. What was typed stays in the field to
   * be corrected; Try again repeats this look-up where its answer may differ (a store failure, a
   * gate out of reach), never for a value the gate refused, which would be refused again; Back
   * draws again the view the address names.
   */
  function lookUpFailed(message, again) {
    // what is shown is no longer the view the address names: none of its late answers or
    // refreshes may replace this one
    clearInterval(refreshTimer);
    drawn++;
    var view = $("view");
    view.replaceChildren();
    append(view, [
      el("p", { class: "card bad", role: "alert", text: message }),
      again ? el("button", { type: "button", "data-action": "retry", text: "Try again", onclick: again }) : null,
      el("button", { type: "button", "data-action": "back", text: "Back", onclick: route }),
    ]);
    if (!again) $("lookup-value").focus();
  }

  async function lookUp(event) {
    event.preventDefault();
    var value = $("lookup-value").value.trim();
    if (value) await find($("lookup-kind").value, value);
  }

  async function find(kind, value) {
    var button = $("lookup").querySelector("button");
    if (button.disabled) return;
    button.disabled = true;
    var target;
    try {
      if (kind === "key") {
        // read as the gate reads its key header (padded, or Bearer <token> from Authorization), and
        // hashed here: the raw key never leaves the browser
        var header = (await config()).identity.header || "";
        var read = readKey(header, value);
        if (read.kind !== "key") {
          return lookUpFailed("The gate reads no single key from that: it refuses a key with a comma" + (header === "authorization" ? ", more words than a scheme and a token, or a ; in the token." : "."), null);
        }
        var digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(read.key)));
        target = "#/identity/hash/" + Array.from(digest, function (b) { return b.toString(16).padStart(2, "0"); }).join("");
      } else {
        // an address or an application's user: the raw value goes only into this call, the view is by tag
        var r = await call("usage", kind === "user" ? { user: value } : { ip: value });
        if (!r.ok) throw refusal(r);
        target = "#/identity/tag/" + r.data.identity.tag;
      }
    } catch (e) {
      if (signedOut(e)) return;
      return lookUpFailed(failureText(e), e.status && e.status < 500 ? null : function () { find(kind, value); });
    } finally {
      button.disabled = false;
    }
    // found: what was looked up leaves the field (a raw key is not left in sight), what was typed since stays
    if ($("lookup-value").value.trim() === value) $("lookup-value").value = "";
    go(target);
  }

  $("login-form").onsubmit = signIn;
  ${READ_KEY_JS}

  $("lookup").onsubmit = lookUp;
  // Each tab of the console is signed in on its own; signing out of one must forget the token
  // in every one, or it stays in the browser the operator thinks is clear.
  var tabs = typeof BroadcastChannel === "function" ? new BroadcastChannel("slidegate.console") : null;
  if (tabs) tabs.onmessage = function (event) { if (event.data === "sign-out" && token()) signOut("Signed out in another tab."); };
  $("sign-out").onclick = function () {
    signOut("Signed out.");
    if (tabs) tabs.postMessage("sign-out");
  };
  window.addEventListener("hashchange", route);
  // Leaving the page forgets the token. The browser may keep the page left, its memory with it,
  // to show it again on Back (the back/forward cache): whoever presses Back at this browser
  // after the operator went on to another page would be signed in. Signed out before the page is
  // put away, it is kept showing the sign-in form, and no figures.
  window.addEventListener("pagehide", function () { if (token()) signOut("You left the console: sign in again."); });
  // An earlier build kept the token in this tab's session storage, where any page of the origin
  // opened in the tab reads it: it is removed, not read. Storage the browser refuses holds none.
  try { sessionStorage.removeItem(STORE); } catch (e) {}
  route();
})();
`;
