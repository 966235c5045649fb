import { createServer, type IncomingMessage, type OutgoingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface ServedApp {
  url: string;
  close(): Promise<void>;
}

/**
 * `app` (a Hono application, or anything with its `fetch`) served over HTTP on a free loopback
 * port, as @hono/node-server serves one: each request handed to `app.fetch` as a Request, with
 * `{ incoming }` (the node:http request, its socket and remote address) as `c.env`. A request
 * whose `fetch` rejects (a value thrown that is no Error, which Hono hands no `app.onError`)
 * is answered 500, as that server answers it, and reported to `onRejected`.
 */
export async function serveHono(
  app: { fetch(request: Request, env: { incoming: IncomingMessage }): Response | Promise<Response> },
  onRejected: (reason: unknown) => void = () => {},
): Promise<ServedApp> {
  const server = createServer(async (req, res) => {
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const headers = new Headers();
      for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
      const method = req.method ?? "GET";
      const body = method === "GET" || method === "HEAD" ? undefined : Buffer.concat(chunks);
      const response = await app.fetch(new Request(`http://${req.headers.host ?? "app"}${req.url ?? "/"}`, { method, headers, body }), { incoming: req });
      const out: OutgoingHttpHeaders = Object.fromEntries(response.headers);
      res.writeHead(response.status, out);
      res.end(Buffer.from(await response.arrayBuffer()));
    } catch (reason) {
      onRejected(reason);
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end("Internal Server Error");
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
