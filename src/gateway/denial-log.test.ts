import { describe, expect, it } from "vitest";
import { createDenialLog, type DenialLogOptions } from "./denial-log.ts";

const MINUTE = { name: "minute", windowMs: 60_000 };
const HOUR = { name: "hour", windowMs: 3_600_000 };

/** A denial log on a clock the test moves, writing into an array. */
function setup(options: Partial<DenialLogOptions> = {}) {
  const clock = { ms: Date.UTC(2026, 0, 1) };
  const lines: Record<string, unknown>[] = [];
  const log = createDenialLog({ write: (line) => lines.push(line), now: () => clock.ms, intervalMs: 10_000, ...options });
  const full = () => lines.filter((l) => l.event === "slidegate.denied");
  const summaries = () => lines.filter((l) => l.event === "slidegate.denied_summary");
  const total = () => summaries().reduce((sum, l) => sum + (l.denied as number), 0);
  return { clock, lines, log, full, summaries, total };
}

describe("denial log", () => {
  it("a flood of 5,000 denials of one identity writes one full line and one summary with the exact count", async () => {
    const { clock, lines, log } = setup();
    for (let i = 0; i < 5000; i++) {
      log.record({ tag: "iFlood", tier: "default", rules: [MINUTE], detail: { retryAfterMs: 30_000 } });
      clock.ms += 1; // 5 s of flood
      if (log.due()) await log.flush();
    }
    expect(lines).toEqual([{ event: "slidegate.denied", retryAfterMs: 30_000, tag: "iFlood", tier: "default", rules: ["minute"] }]);
    clock.ms += 10_000;
    expect(log.due()).toBe(true);
    await log.flush();
    expect(lines).toHaveLength(2);
    expect(lines[1]).toEqual({
      event: "slidegate.denied_summary",
      tag: "iFlood",
      tier: "default",
      denied: 5000,
      rules: { minute: 5000 },
      from: "2026-01-01T00:00:00.000Z",
      to: "2026-01-01T00:00:04.999Z",
    });
  });

  it("writes an identity's first denial by a rule in full again once that rule's window has passed", () => {
    const { clock, log, full } = setup();
    log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    clock.ms += 59_999;
    log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    expect(full()).toHaveLength(1);
    clock.ms += 1;
    log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    expect(full()).toHaveLength(2);
  });

  it("writes in full per identity and per rule: a new identity, or a rule not yet seen, gets its own full line", () => {
    const { log, full } = setup();
    log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    log.record({ tag: "iB", tier: "t", rules: [MINUTE] });
    log.record({ tag: "iA", tier: "t", rules: [MINUTE, HOUR] });
    log.record({ tag: "iA", tier: "t", rules: [HOUR] });
    expect(full().map((l) => [l.tag, l.rules])).toEqual([
      ["iA", ["minute"]],
      ["iB", ["minute"]],
      ["iA", ["minute", "hour"]],
    ]);
  });

  it("is due only once the interval has passed since the first denial a summary would count", async () => {
    const { clock, log } = setup();
    expect(log.due()).toBe(false);
    clock.ms += 60_000; // idle time before the first denial does not count
    log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    clock.ms += 9_999;
    expect(log.due()).toBe(false);
    clock.ms += 1;
    expect(log.due()).toBe(true);
    await log.flush();
    expect(log.due()).toBe(false);
    clock.ms += 60_000;
    expect(log.due()).toBe(false); // nothing to report
  });

  it("counts each refused request once per identity, with how many each rule denied, and starts afresh after a flush", async () => {
    const { clock, log, summaries, total } = setup();
    for (let i = 0; i < 7; i++) log.record({ tag: "iA", tier: "t", rules: [MINUTE] });
    for (let i = 0; i < 3; i++) log.record({ tag: "iA", tier: "t", rules: [MINUTE, HOUR] });
    for (let i = 0; i < 4; i++) log.record({ tag: "kB", tier: "paid", rules: [HOUR] });
    clock.ms += 10_000;
    await log.flush();
    const counted = () => summaries().map((l) => [l.tag, l.tier, l.denied, l.rules]);
    expect(counted()).toEqual([
      ["iA", "t", 10, { minute: 10, hour: 3 }],
      ["kB", "paid", 4, { hour: 4 }],
    ]);
    // 14 requests were refused: a request two rules denied is one request
    expect(total()).toBe(14);
    log.record({ tag: "kB", tier: "paid", rules: [HOUR] });
    clock.ms += 10_000;
    await log.flush();
    expect(counted().slice(2)).toEqual([["kB", "paid", 1, { hour: 1 }]]);
  });

  it("past the cap, keeps memory bounded, names the identities refused most and counts the rest exactly in one 'other' line", async () => {
    const { clock, log, full, summaries, total } = setup({ maxTracked: 4 });
    let denials = 0;
    for (let round = 0; round < 50; round++) {
      for (let id = 0; id < 10; id++) {
        log.record({ tag: `i${id}`, tier: "t", rules: [HOUR] });
        denials++;
      }
      // one identity floods: it is named whoever came first
      for (let i = 0; i < 5; i++) log.record({ tag: "iFlood", tier: "t", rules: [HOUR] });
      denials += 5;
      expect(log.tracked).toBeLessThanOrEqual(8);
    }
    clock.ms += 10_000;
    await log.flush();
    expect(full()).toHaveLength(4);
    const named = summaries().filter((l) => !l.other);
    expect(named[0]).toMatchObject({ tag: "iFlood", denied: 250 });
    expect(named.length).toBeLessThanOrEqual(4);
    expect(summaries().at(-1)).toMatchObject({ other: true });
    expect(total()).toBe(denials);
  });

  it("names the flooder even when a thousand decoys were refused before it in the interval", async () => {
    const { clock, log, summaries, total } = setup();
    for (let id = 0; id < 1000; id++) log.record({ tag: `iDecoy${id}`, tier: "t", rules: [HOUR] });
    for (let i = 0; i < 3000; i++) log.record({ tag: "iFlood", tier: "t", rules: [HOUR] });
    // decoys keep coming: they go, not the flooder
    for (let id = 1000; id < 3000; id++) log.record({ tag: `iDecoy${id}`, tier: "t", rules: [HOUR] });
    clock.ms += 10_000;
    await log.flush();
    expect(summaries()[0]).toMatchObject({ tag: "iFlood", denied: 3000 });
    expect(total()).toBe(6000);
  });

  it("writes at most maxSummaries named lines a flush, the most refused first, and the rest as one 'other' line", async () => {
    const { clock, log, summaries, total } = setup({ maxSummaries: 5 });
    for (let id = 0; id < 50; id++) for (let i = 0; i <= id; i++) log.record({ tag: `i${id}`, tier: "t", rules: [HOUR] });
    clock.ms += 10_000;
    await log.flush();
    expect(summaries().map((l) => l.tag ?? "other")).toEqual(["i49", "i48", "i47", "i46", "i45", "other"]);
    expect(total()).toBe((50 * 51) / 2);
  });

  it("counts an operator's blocks apart from denials: a full line per identity and interval, and a summary", async () => {
    const { clock, lines, log } = setup();
    for (let i = 0; i < 500; i++) log.record({ outcome: "blocked", tag: "iBad", tier: "t", rules: [], detail: { blockedForMs: 60_000 } });
    log.record({ tag: "iBad", tier: "t", rules: [MINUTE] });
    clock.ms += 10_000;
    await log.flush();
    expect(lines.map((l) => [l.event, l.blocked ?? l.denied ?? null])).toEqual([
      ["slidegate.blocked", null],
      ["slidegate.denied", null],
      ["slidegate.blocked_summary", 500],
      ["slidegate.denied_summary", 1],
    ]);
    expect(lines[0]).toEqual({ event: "slidegate.blocked", tag: "iBad", tier: "t", blockedForMs: 60_000 });
  });

  it("counts requests turned away before any rule without a line each: a summary per identity and reason, the rest per reason in 'other'", async () => {
    const { clock, lines, log } = setup({ maxSummaries: 2 });
    for (let i = 0; i < 3000; i++) log.record({ outcome: "key-required", tag: "iNoKey", tier: "t", rules: [] });
    for (let i = 0; i < 40; i++) log.record({ outcome: "ambiguous-key", tag: "iTwoKeys", tier: "t", rules: [] });
    // invented keys: each a new identity, refused once
    for (let i = 0; i < 30; i++) log.record({ outcome: "unknown-key", tag: `kInvented${i}`, tier: "t", rules: [] });
    log.record({ outcome: "denylisted", tag: "iListed", tier: "t", rules: [] });
    expect(lines).toEqual([]);
    clock.ms += 10_000;
    expect(log.due()).toBe(true);
    await log.flush();
    expect(lines.map(({ from, to, ...l }) => l)).toEqual([
      { event: "slidegate.refused_summary", reason: "key-required", tag: "iNoKey", tier: "t", refused: 3000 },
      { event: "slidegate.refused_summary", reason: "ambiguous-key", tag: "iTwoKeys", tier: "t", refused: 40 },
      { event: "slidegate.refused_summary", reason: "unknown-key", other: true, refused: 30 },
      { event: "slidegate.refused_summary", reason: "denylisted", other: true, refused: 1 },
    ]);
  });

  it("forgets, at a flush, identities whose window has passed", async () => {
    const { clock, log } = setup();
    for (let id = 0; id < 20; id++) log.record({ tag: `i${id}`, tier: "t", rules: [MINUTE] });
    expect(log.tracked).toBe(40);
    clock.ms += 10_000;
    await log.flush();
    expect(log.tracked).toBe(20); // the counts are written; the full-line memory lasts the window
    clock.ms += 60_000;
    log.record({ tag: "i0", tier: "t", rules: [MINUTE] });
    clock.ms += 10_000;
    await log.flush();
    expect(log.tracked).toBe(1);
  });

  it("keeps the identity fields of the full line whatever the detail says", () => {
    const { log, full } = setup();
    log.record({ tag: "iA", tier: "t", rules: [MINUTE], detail: { tag: "spoof", event: "other", fromDenialCache: true } });
    expect(full()[0]).toEqual({ event: "slidegate.denied", tag: "iA", tier: "t", rules: ["minute"], fromDenialCache: true });
  });
});
