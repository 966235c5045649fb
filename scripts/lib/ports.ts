import { createServer } from "node:net";

/**
 * Ports handed out come from below Linux's ephemeral range (32768–60999), where nothing that
 * binds port 0 is ever placed: a port found free here stays free until the process it is
 * meant for binds it, where a port the OS picked could be handed to the next port-0 listener
 * (a test's origin, a shim) in between.
 */
const LOW = 20_000;
const HIGH = 32_767;
const given = new Set<number>();

function tryListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A TCP port on 127.0.0.1 that is free now, and not handed out before by this process. */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW + 1));
    if (given.has(port)) continue;
    if (await tryListen(port)) {
      given.add(port);
      return port;
    }
  }
  throw new Error(`no free port between ${LOW} and ${HIGH} after 200 tries`);
}

/** Whether something accepts connections on host:port. */
export async function isListening(port: number, host = "127.0.0.1"): Promise<boolean> {
  const { connect } = await import("node:net");
  return new Promise((resolve) => {
    const socket = connect({ port, host });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
