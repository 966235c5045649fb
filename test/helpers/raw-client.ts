import { createConnection, type Socket } from "node:net";

/** A connection of raw bytes to a gate, and everything it has received so far (as latin1). */
export interface RawConnection {
  socket: Socket;
  received: () => string;
}

/**
 * A raw connection to the gate at `base`, for what no HTTP client sends: a body cut off midway,
 * an upload in pieces far apart, a hang-up at a chosen byte. Once connected, an error on it (the
 * gate or the origin cutting it off) is for the test to read, never a failure of the test itself.
 *
 * @example
 * const client = await rawConnection(new URL(gateUrl));
 * client.socket.write(`GET / HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
 * await until("the answer has come whole", () => hasAnswer(client.received()));
 */
export function rawConnection(base: URL): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    let received = "";
    const socket = createConnection({ host: base.hostname, port: Number(base.port) }, () => {
      socket.off("error", reject);
      socket.on("error", () => {});
      resolve({ socket, received: () => received });
    });
    socket.on("data", (chunk: Buffer) => (received += chunk.toString("latin1")));
    socket.on("error", reject);
  });
}

/**
 * A connection that has sent the head of a `method` request for `path` from `ip`, framed by
 * `framing` (its Content-Length or Transfer-Encoding line), and `first`, the start of its body.
 */
export async function sendingBody(base: URL, request: { method?: string; path: string; ip: string; framing: string; first: Buffer | string }): Promise<RawConnection> {
  const client = await rawConnection(base);
  client.socket.write(`${request.method ?? "POST"} ${request.path} HTTP/1.1\r\nHost: ${base.host}\r\nCF-Connecting-IP: ${request.ip}\r\n${request.framing}\r\n\r\n`);
  client.socket.write(request.first);
  return client;
}

/** Whether `received` holds an answer with a whole JSON body. */
export const hasAnswer = (received: string) => /\r\n\r\n\{.*\}$/s.test(received);

/** The status and JSON body of the one answer `received` holds. */
export function answerIn(received: string): { status: number; body: Record<string, unknown> } {
  const [head, body] = received.split("\r\n\r\n") as [string, string];
  return { status: Number(head.split(" ")[1]), body: JSON.parse(body) as Record<string, unknown> };
}
