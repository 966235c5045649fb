/**
 * An origin that is a Hono application deployed as a Worker, with Hono's method-override
 * middleware as its documentation sets it up (`methodOverride({ app })`: `_method` in a form
 * body). workerd hands a Worker the body of a HEAD, and the middleware passes over a GET alone,
 * so a HEAD with a form body runs the handler of the method it names. Each handler says which
 * it is in `x-handler`. Built and run by `startHonoWorkerOrigin` (test/helpers/framework-origin.ts).
 */
import { Hono } from "hono";
import { methodOverride } from "hono/method-override";

const app = new Hono();
app.use("*", methodOverride({ app }));
const handler = (name: string) => () => new Response(name, { headers: { "x-handler": name } });
app.get("/v1/users/:id", handler("get-user"));
app.delete("/v1/users/:id", handler("delete-user"));
app.all("*", handler("echo"));

export default app;
