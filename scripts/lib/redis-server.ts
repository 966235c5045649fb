import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import Redis from "ioredis";
import { freePort } from "./ports.ts";

export interface LocalRedis {
  url: string;
  port: number;
  /** stops the server (SIGTERM) and waits until it is gone */
  stop(): Promise<void>;
  /** starts it again on the same port, empty (nothing is persisted) */
  start(): Promise<void>;
  /** the running server's process id */
  readonly pid: number | undefined;
}

/** Whether redis-server is on PATH. */
export function hasRedisServer(): boolean {
  return spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0;
}

/** Another process answers on the port: ours could not bind it. */
class PortTaken extends Error {}

/**
 * Waits until the server on `url` answers PING and is the process `pid`: a port found free
 * can be bound by another run's redis-server before ours binds it, and then PING alone would
 * hand the caller a server it did not start (and whose data it would flush).
 */
async function waitForServer(url: string, pid: number | undefined, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => {});
    let answering: number | undefined;
    try {
      await client.connect();
      if ((await client.ping()) === "PONG") answering = Number(/^process_id:(\d+)/m.exec(await client.info("server"))?.[1]);
    } catch {
      if (Date.now() > deadline) throw new Error(`redis-server at ${url} did not answer PING within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      client.disconnect();
    }
    if (answering === pid) return;
    if (answering !== undefined) throw new PortTaken(`another process (pid ${answering}) answers on ${new URL(url).host}, not the redis-server started there (pid ${pid})`);
  }
}

/**
 * A redis-server of our own on a free loopback port, keeping nothing on disk, so tests and
 * the dev stack never touch the data of a Redis they did not start.
 *
 * @example
 * const redis = await startRedis();
 * // … redis.url is redis://127.0.0.1:<port>
 * await redis.stop();
 */
/** Not yet exited, by its own hand or by a signal (a killed process has no exit code). */
const running = (proc: ChildProcess) => proc.exitCode === null && proc.signalCode === null;

export async function startRedis(options: { port?: number; args?: string[]; password?: string } = {}): Promise<LocalRedis> {
  let port = options.port ?? (await freePort());
  const urlOf = (p: number) => `redis://${options.password ? `:${encodeURIComponent(options.password)}@` : ""}127.0.0.1:${p}`;
  let child: ChildProcess | undefined;

  const start = async () => {
    if (child && running(child)) return; // already running
    // sanitize-dump-payload: a crafted RESTORE payload (from a Lua script, which the shim's policy cannot see into) is refused instead of crashing the server later
    const args = [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--daemonize",
      "no",
      "--sanitize-dump-payload",
      "yes",
      ...(options.password ? ["--requirepass", options.password] : []),
      ...(options.args ?? []),
    ];
    // Output is kept for an error message, never inherited: an inherited pipe would outlive the caller.
    const proc = spawn("redis-server", args, { stdio: ["ignore", "pipe", "ignore"] });
    child = proc;
    let output = "";
    proc.stdout.on("data", (chunk: Buffer) => (output = (output + chunk.toString()).slice(-2000)));
    const exited = new Promise<never>((_, reject) =>
      proc.once("exit", (code) => {
        const Failure = /Address already in use/i.test(output) ? PortTaken : Error;
        reject(new Failure(`redis-server on port ${port} exited at start-up (code ${code}):\n${output}`));
      }),
    );
    try {
      await Promise.race([waitForServer(urlOf(port), proc.pid, 10_000), exited]);
    } catch (error) {
      child = undefined;
      if (running(proc)) proc.kill("SIGKILL");
      throw error;
    }
  };
  const stop = async () => {
    const proc = child;
    child = undefined;
    if (!proc || !running(proc)) return;
    await new Promise<void>((resolve) => {
      proc.once("exit", () => resolve());
      proc.kill("SIGTERM");
    });
  };

  // A port this process picked that another run's server took first: pick another. A port the
  // caller named is theirs to free, so that is refused by name.
  for (let attempt = 1; ; attempt++) {
    try {
      await start();
      break;
    } catch (error) {
      if (!(error instanceof PortTaken) || options.port !== undefined || attempt === 5) throw error;
      port = await freePort();
    }
  }
  return {
    url: urlOf(port),
    port,
    start,
    stop,
    get pid() {
      return child?.pid;
    },
  };
}
