/**
 * Commands the shim will not run on a shared connection: they change the connection's
 * state for every request that shares it, or block it for everyone.
 */
const CONNECTION_STATE = ["MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "SELECT", "AUTH", "HELLO", "RESET", "QUIT", "MONITOR", "SYNC", "PSYNC"];
const SUBSCRIBE = ["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"];
const BLOCKING = ["BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP", "WAIT", "WAITAOF"];
const REFUSED = new Set([...CONNECTION_STATE, ...SUBSCRIBE, ...BLOCKING]);

/** Why `command` is refused, or undefined when it may run. */
export function refusal(command: readonly string[]): string | undefined {
  const [name, ...args] = command;
  const sub = args[0]?.toUpperCase();
  const blockingRead = (name === "XREAD" || name === "XREADGROUP") && args.some((a) => a.toUpperCase() === "BLOCK");
  const clientReply = name === "CLIENT" && (sub === "REPLY" || sub === "SETNAME" || sub === "TRACKING");
  if (!REFUSED.has(name!) && !blockingRead && !clientReply) return undefined;
  const label = clientReply ? `CLIENT ${sub}` : blockingRead ? `${name} BLOCK` : name;
  return `ERR ${label} is not allowed over REST: it would hold or change a connection other requests share`;
}
