import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * An HTTP proxy to place between the Worker and the shim that breaks the exchange on
 * command, so tests see what the gate does when its store misbehaves in each way.
 */
export type Fault =
  | { kind: "none" }
  | { kind: "status"; status: number; body?: string } // the shim answers an error status (with this JSON body; default: an Upstash-style error)
  | { kind: "slow"; ms: number } // the shim answers, late
  | { kind: "malformed" } // 200 with a body that is not JSON
  | { kind: "wrong-shape" } // 200 with JSON the script never returns
  | { kind: "reply"; result: unknown } // 200 with this result: well-typed, and wrong
  | { kind: "body"; body: string } // 200 with this body, as it is
  | { kind: "echo"; status: number; pad?: number } // a page that quotes the credentials it was sent (ECHO_PREFIX, then the Authorization header), after `pad` characters
  | { kind: "redirect"; status: number; location: string } // a redirect elsewhere, as a proxy in front of the store may answer
  | { kind: "drop" } // the connection is cut
  | { kind: "lost-reply" }; // the shim answers, and the connection is cut before the answer reaches the client

/** What an "echo" fault's page says before the Authorization header it quotes. */
export const ECHO_PREFIX = "Refused credentials: ";

export interface FaultProxy {
  url: string;
  /** breaks every call from now on, but those whose body `spare` accepts (they reach the shim as they are) */
  set(fault: Fault, spare?: (body: string) => boolean): void;
  /**
   * Holds the store's answer to the next call that `match` accepts, by its body and the answer's:
   * the call reaches the shim and is answered there, and the answer waits here until `release()`. `answered` resolves
   * once the store has answered, so a test orders what happens between a store's decision and
   * the moment the gate learns it, without racing a timer.
   */
  hold(match: (body: string, answer: string) => boolean): { answered: Promise<void>; release(): void };
  /** requests that met a fault so far */
  readonly faulted: number;
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function startFaultProxy(target: string): Promise<FaultProxy> {
  let fault: Fault = { kind: "none" };
  let spared: ((body: string) => boolean) | undefined;
  let faulted = 0;
  const holds: { match: (body: string, answer: string) => boolean; answered: () => void; released: Promise<void> }[] = [];
  const server = createServer(async (req, res) => {
    const payload = await body(req);
    const current: Fault = spared?.(payload.toString()) ? { kind: "none" } : fault;
    if (current.kind !== "none") faulted++;
    switch (current.kind) {
      case "status":
        return res.writeHead(current.status, { "content-type": "application/json" }).end(current.body ?? '{"error":"injected fault"}');
      case "malformed":
        return res.writeHead(200, { "content-type": "application/json" }).end('{"result": [1, 2');
      case "wrong-shape":
        return res.writeHead(200, { "content-type": "application/json" }).end('{"result":"surprise"}');
      case "reply":
        return res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ result: current.result }));
      case "body":
        return res.writeHead(200, { "content-type": "application/json" }).end(current.body);
      case "echo":
        return res.writeHead(current.status, { "content-type": "text/plain" }).end(`${"-".repeat(current.pad ?? 0)}${ECHO_PREFIX}${req.headers.authorization}`);
      case "redirect":
        return res.writeHead(current.status, { location: current.location }).end();
      case "drop":
        return req.socket.destroy();
      case "slow":
        await new Promise((r) => setTimeout(r, current.ms));
    }
    try {
      const upstream = await fetch(target + (req.url ?? "/"), {
        method: req.method,
        headers: Object.fromEntries(Object.entries(req.headers).filter(([k]) => k !== "host" && k !== "content-length")) as Record<string, string>,
        body: req.method === "GET" ? undefined : payload,
      });
      const reply = Buffer.from(await upstream.arrayBuffer());
      if (current.kind === "lost-reply") return req.socket.destroy();
      const held = holds.findIndex((h) => h.match(payload.toString(), reply.toString()));
      if (held >= 0) {
        const [hold] = holds.splice(held, 1);
        hold!.answered();
        await hold!.released;
      }
      res.writeHead(upstream.status, Object.fromEntries(upstream.headers));
      res.end(reply);
    } catch {
      if (!res.headersSent) res.writeHead(502).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    set: (next, spare) => {
      fault = next;
      spared = spare;
    },
    hold: (match) => {
      let answered!: () => void;
      let release!: () => void;
      const reached = new Promise<void>((resolve) => {
        answered = resolve;
      });
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      holds.push({ match, answered, released });
      return { answered: reached, release };
    },
    get faulted() {
      return faulted;
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
