/**
 * The denied floor of the gateway benchmark: a Worker that answers every request with the
 * same 429 and does nothing else. No gate answers a denied caller faster on this stack.
 * Built by the benchmark only; not part of slidegate.
 */
export default {
  fetch: (): Response => new Response("Too Many Requests", { status: 429 }),
};
