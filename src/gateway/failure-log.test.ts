import { describe, expect, it } from "vitest";
import { createFailureLog, withoutSecret } from "./failure-log.ts";

function harness(intervalMs = 1000) {
  let t = 0;
  const lines: Record<string, unknown>[] = [];
  const log = createFailureLog({ event: "slidegate.store_failure", write: (l) => lines.push(l), now: () => t, intervalMs, maxErrorLength: 10 });
  const fail = (error = "down") => log.record({ error });
  const total = () => lines.reduce((n, l) => n + (l.event === "slidegate.store_failure" ? 1 : Number(l.failures)), 0);
  return { log, lines, fail, total, advance: (ms: number) => (t += ms) };
}

describe("store failure log", () => {
  it("writes the first failure of an interval in full and only counts the rest", () => {
    const h = harness();
    for (let i = 0; i < 5000; i++) h.fail();
    expect(h.lines).toEqual([{ event: "slidegate.store_failure", error: "down" }]);
    expect(h.log.due()).toBe(false);
  });

  it("accounts for every failure exactly once across full lines and summaries", () => {
    const h = harness();
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 100; i++) h.fail();
      h.advance(1000);
    }
    expect(h.log.due()).toBe(true);
    h.log.flush();
    expect(h.log.due()).toBe(false);
    expect(h.lines.map((l) => l.event)).toEqual([
      "slidegate.store_failure",
      "slidegate.store_failure_summary",
      "slidegate.store_failure",
      "slidegate.store_failure_summary",
      "slidegate.store_failure",
      "slidegate.store_failure_summary",
    ]);
    expect(h.total()).toBe(300);
  });

  it("cuts a long error text", () => {
    const h = harness();
    h.fail("x".repeat(10_000));
    expect(h.lines[0]!.error).toBe(`${"x".repeat(10)}…`);
  });

  it("has nothing to flush when every failure was written in full", () => {
    const h = harness();
    h.fail();
    h.advance(5000);
    expect(h.log.due()).toBe(false);
    h.log.flush();
    expect(h.lines).toHaveLength(1);
  });
});

describe("withoutSecret", () => {
  it("takes out every whole occurrence, and a start of the secret that ends the text where an excerpt cut it", () => {
    const secret = "0123456789abcdef";
    expect(withoutSecret(`a ${secret} b ${secret}`, secret)).toBe("a [redacted] b [redacted]");
    expect(withoutSecret("Bearer 012345678...", secret)).toBe("Bearer [redacted]...");
    expect(withoutSecret("Bearer 0123456…", secret)).toBe("Bearer [redacted]…");
    expect(withoutSecret("Bearer 01234", secret)).toBe("Bearer [redacted]");
    // three characters say little and match by chance
    expect(withoutSecret("code 012", secret)).toBe("code 012");
    expect(withoutSecret("no secret here", secret)).toBe("no secret here");
  });

  it("takes out the secret percent-encoded too, as a page quoting a URL or a form shows a token with = + or / in it", () => {
    const secret = "AXsAAIncDE+ab/cd12=";
    expect(withoutSecret("refused: /auth?token=AXsAAIncDE%2Bab%2Fcd12%3D&x=1", secret)).toBe("refused: /auth?token=[redacted]&x=1");
    expect(withoutSecret("refused: token=AXsAAIncDE%2bab%2fcd12%3d", secret)).toBe("refused: token=[redacted]");
    expect(withoutSecret("refused: token=AXsAAIncDE%2Bab%2Fc…", secret)).toBe("refused: token=[redacted]…");
  });

  it('takes out the secret as JSON writes it, once or twice over, as a line shows an odd reply that quotes a token holding " or \\', () => {
    const secret = 'tok"en\\0123456789';
    const once = JSON.stringify(secret).slice(1, -1);
    const twice = JSON.stringify(once).slice(1, -1);
    expect(withoutSecret(`unexpected reply: ["${once}",1]`, secret)).toBe('unexpected reply: ["[redacted]",1]');
    // a reply whose text is JSON that quotes the token, shown as JSON in turn
    expect(withoutSecret(`not framed: {"page":"{\\"t\\":\\"${twice}\\"}"}`, secret)).toBe('not framed: {"page":"{\\"t\\":\\"[redacted]\\"}"}');
    expect(withoutSecret(`unexpected reply: "${once.slice(0, 8)}…`, secret)).toBe('unexpected reply: "[redacted]…');
  });

  it("is applied before the line's own cut, which could leave a start of the secret", () => {
    const lines: Record<string, unknown>[] = [];
    const log = createFailureLog({ event: "e", write: (l) => lines.push(l), maxErrorLength: 12, secret: "0123456789abcdef" });
    log.record({ error: "Bearer 0123456789abcdef" });
    expect(lines[0]!.error).toBe("Bearer [reda…");
  });
});
