import type { ChildProcess } from "node:child_process";

/**
 * Stops a command a test started detached (`npx …`, `npm run …`): npm, its shell and the
 * program itself are one process group, and all of it goes, so no shim outlives its test.
 *
 * @example
 * const shim = spawn("npx", ["slidegate-shim"], { detached: true });
 * afterAll(() => stopGroup(shim));
 */
export async function stopGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  process.kill(-child.pid!, "SIGTERM");
  await exited;
}
