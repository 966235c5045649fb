import { spawn, type ChildProcess } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { freePort, isListening } from "../../scripts/lib/ports.ts";

interface Ready {
  gate: string;
  mode: string;
  ports: number[];
  pids: number[];
  processGroup: number;
}

let dev: ChildProcess | undefined;
afterAll(() => {
  if (dev && dev.exitCode === null) dev.kill("SIGKILL");
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe("npm run dev", () => {
  it("brings the stack up, serves the six-request demo, and leaves nothing behind on Ctrl-C", async () => {
    dev = spawn(process.execPath, ["scripts/dev.ts", "--ready-json"], {
      // a fresh Redis of its own; no developer .dev.vars (and no Upstash secrets) in play
      env: { ...process.env, GATE_PORT: String(await freePort()), REDIS_URL: "", ORIGIN_URL: "", DEV_VARS_FILE: "/dev/null" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    const ready = await new Promise<Ready>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`not ready in 90 s:\n${output}`)), 90_000);
      dev!.stderr!.on("data", (c: Buffer) => (output += c.toString()));
      dev!.stdout!.on("data", (c: Buffer) => {
        output += c.toString();
        const line = /^SLIDEGATE_READY (.*)$/m.exec(output);
        if (line) {
          clearTimeout(timer);
          resolve(JSON.parse(line[1]!));
        }
      });
      dev!.once("exit", (code) => reject(new Error(`exited with ${code}:\n${output}`)));
    });
    expect(ready.mode).toBe("local");
    expect(output).toMatch(/Local mode/);

    const codes: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 6; i++) {
      last = await fetch(`${ready.gate}/`);
      codes.push(last.status);
      if (i < 5) await last.arrayBuffer();
    }
    expect(codes).toEqual([200, 200, 200, 200, 200, 429]);
    expect(last!.headers.get("Retry-After")).toMatch(/^(9|10)$/);
    expect(last!.headers.get("X-RateLimit-Limit")).toBe("5");
    expect(last!.headers.get("X-RateLimit-Remaining")).toBe("0");
    expect(last!.headers.get("RateLimit-Policy")).toBe('"default";q=5;w=10');
    expect(last!.headers.get("Content-Type")).toBe("application/problem+json");

    const exited = new Promise<number | null>((resolve) => dev!.once("exit", resolve));
    dev.kill("SIGINT");
    expect(await exited).toBe(0);
    for (const pid of [...ready.pids, dev.pid!]) expect(alive(pid), `pid ${pid}`).toBe(false);
    expect(alive(-ready.processGroup), "wrangler's process group").toBe(false);
    for (const port of ready.ports) expect(await isListening(port), `port ${port}`).toBe(false);
  }, 120_000);
});
