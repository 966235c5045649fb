import Redis, { Cluster, type RedisOptions } from "ioredis";
import type { Command } from "./codec.ts";

/** Redis could not be reached (down, restarting, too slow): the shim answers 503. */
export class RedisUnavailable extends Error {}

/** Every transaction connection is busy and the queue for one is full or too slow: 503. */
export class ShimBusy extends Error {}

/**
 * A replica's refusal of a write: on a connection the shim opened to the primary, a failover
 * has demoted that server. Its address (a DNS name, a floating address) now leads to the new
 * primary, but the connections already open stay with the old one, which does not close them.
 */
const DEMOTED = /^READONLY /;

/** How often a shared connection may be replaced for meeting a demoted primary. */
const REOPEN_AT_MOST_EVERY_MS = 1000;

/** Redis's answers to a wrong password or user (WRONGPASS) and to none where one is needed (NOAUTH). */
const AUTH_REFUSED = /^(WRONGPASS|NOAUTH)\b/;

/**
 * Why a first connection failed: ioredis rejects connect() with "Connection is closed." once
 * Redis has refused its AUTH, or once the connection could not be made at all (nothing listens,
 * a name that does not resolve), so what it reported as an error event is named instead.
 */
function startError(error: unknown, refusal: Error | undefined, unreachable: Error | undefined, where = "the user name and password in the Redis URL"): unknown {
  if (refusal) return new Error(`Redis refused the shim's credentials (${refusal.message}): check ${where}`);
  if (unreachable) return new RedisUnavailable(unreachable.message);
  return error;
}

/** Replies in order, one [error, reply] pair per command. */
export type Replies = [Error | null, unknown][];

/**
 * How the shim reaches Redis. `exec` runs commands in order (a pipeline on one connection for
 * a single Redis); `transaction` runs MULTI … EXEC on a connection of its own.
 *
 * Commands fail at once while Redis is away (no offline queue, no retries): the shim answers
 * 503 promptly, and the connections reconnect on their own when Redis is back.
 */
export interface RedisPool {
  exec(commands: Command[]): Promise<Replies>;
  transaction(commands: Command[]): Promise<Replies>;
  /**
   * SCRIPT LOAD wherever a script may run (every master of a cluster); its SHA1. Throws
   * Redis's refusal as it came (a ReplyError), or RedisUnavailable.
   */
  loadScript(script: string): Promise<string>;
  /** A connection of the caller's own (for a stream), not yet connected, that never reconnects. */
  dedicated(): Redis;
  /** transaction connections in use, and requests waiting for one */
  stats(): { active: number; waiting: number };
  close(): Promise<void>;
}

export interface PoolOptions {
  size?: number;
  commandTimeoutMs?: number;
  /** most transactions holding a connection of their own at once (default 16) */
  maxTransactions?: number;
  /** most transactions waiting for one (default 4 × maxTransactions); more answer 503 at once */
  transactionQueue?: number;
  onStatus?: (event: "lost" | "restored", detail: string) => void;
}

/** What every node of a Redis Cluster asks a client to AUTH with (a single Redis takes them in its URL). */
export interface ClusterAuth {
  username?: string;
  password?: string;
}

const MAX_IDLE_LEASES = 4;

function connectionOptions(options: PoolOptions): RedisOptions {
  return {
    lazyConnect: true,
    // The REST contract is RESP2 (ioredis 6 would speak RESP3 and pair up WITHSCORES replies).
    protocol: 2,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: options.commandTimeoutMs ?? 5000,
    // Integer replies as strings, turned into bigints below: a JavaScript number would round
    // anything past 2^53, and the REST reply must carry Redis's exact digits.
    stringNumbers: true,
    connectTimeout: 2000,
    // Retry soon and often: a Redis that comes back should serve again within a fraction of a
    // second; the first at once, for a connection closed on purpose on a Redis that is up (see `retire`).
    retryStrategy: (attempt) => Math.min((attempt - 1) * 50, 200),
  };
}

/**
 * A reply as the codec expects it: with `stringNumbers` and callBuffer, ioredis gives integers
 * as strings and every string reply as a Buffer, so a string here is always an integer.
 */
export function fromRedis(reply: unknown): unknown {
  if (typeof reply === "string") return BigInt(reply);
  if (Array.isArray(reply)) return reply.map(fromRedis);
  return reply;
}

/**
 * Most commands handed to ioredis at once. Each command it holds costs about 2.5 KB of heap
 * until its reply is in: a 900 KB body of 100,000 PINGs, under the default body limit, took
 * the shim 250 MB, and three at once ended a shim capped at 256 MB out of memory. A longer
 * list goes in slices, each sent once the one before has its replies: in order still.
 */
const SLICE = 1000;

/** `run` over `commands` in slices of SLICE, one after another, the replies joined in order. */
async function inSlices(commands: Command[], run: (slice: Command[]) => Promise<Replies>): Promise<Replies> {
  if (commands.length <= SLICE) return run(commands);
  const replies: Replies = [];
  for (let at = 0; at < commands.length; at += SLICE) replies.push(...(await run(commands.slice(at, at + SLICE))));
  return replies;
}

/** Upper-case names: ioredis reshapes some replies (HGETALL into an object), but only for its lower-case command names. */
async function pipelined(client: Redis | Cluster, commands: Command[]): Promise<Replies> {
  const batch = client.pipeline();
  for (const [name, ...args] of commands) batch.callBuffer(name, args);
  try {
    const replies = ((await batch.exec()) ?? []) as Replies;
    return replies.map(([error, reply]) => [error, fromRedis(reply)]);
  } catch (e) {
    throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
  }
}

/**
 * At most `max` holders at once; the next `queue` callers wait in turn, each for at most
 * `waitMs`; anyone beyond is refused at once. Bounds the Redis connections transactions open.
 */
function createLeases(max: number, queue: number, waitMs: number) {
  let active = 0;
  const waiting: { grant: () => void; timer: NodeJS.Timeout }[] = [];
  const busy = (why: string) => new ShimBusy(`ERR ${why}: this shim runs at most ${max} transactions at once (SHIM_MAX_TRANSACTIONS); retry shortly`);
  return {
    async acquire(): Promise<void> {
      if (active < max) {
        active++;
        return;
      }
      if (waiting.length >= queue) throw busy(`${waiting.length} transactions already waiting`);
      await new Promise<void>((resolve, reject) => {
        const entry = {
          grant: () => {
            clearTimeout(entry.timer);
            resolve();
          },
          timer: setTimeout(() => {
            waiting.splice(waiting.indexOf(entry), 1);
            reject(busy(`no transaction connection came free within ${waitMs} ms`));
          }, waitMs),
        };
        waiting.push(entry);
      });
    },
    /** hands the lease straight to the next waiter, if any */
    release() {
      const next = waiting.shift();
      if (next) next.grant();
      else active--;
    },
    stats: () => ({ active, waiting: waiting.length }),
  };
}

/** ioredis's refusal of a cluster pipeline (or transaction) whose keys are in more than one slot. */
const SPANS_SLOTS = /should belong to the same slots? allocation group/;

/** ioredis's error for a command past `commandTimeout`. */
const TIMED_OUT = /Command timed out/;

/** A single Redis: a few multiplexed connections, and leased ones for transactions. */
export async function createPool(url: string, options: PoolOptions = {}): Promise<RedisPool> {
  let healthy = true;
  // Until the pool is up, a failure is the start's error to report, not a connection "lost".
  let started = false;
  let closed = false;
  // Connections on which Redis answered READONLY: a failover demoted the server they reached,
  // and they would refuse every write until the shim restarts. A shared one is replaced (see
  // `replace`), a transaction's is not reused.
  const demoted = new WeakSet<Redis>();
  let shared: Redis[] = [];
  /** when each place in `shared` was last replaced (performance.now()) */
  const replacedAt = new Map<number, number>();
  const open = async () => {
    // ioredis's hook for a reply error; false: the connection stays as it is (closing it here
    // would cut off every command sent on it, the reads a gate makes after the refusal among them)
    const notice = (e: Error) => {
      if (DEMOTED.test(e.message)) {
        demoted.add(connection);
        replace(connection);
      }
      return false;
    };
    const connection: Redis = new Redis(url, { ...connectionOptions(options), reconnectOnError: notice });
    let refusal: Error | undefined;
    let unreachable: Error | undefined;
    connection.on("error", (e: Error) => {
      if (AUTH_REFUSED.test(e.message)) refusal = e;
      else unreachable ??= e;
      if (healthy && started) options.onStatus?.("lost", e.message);
      healthy = false;
    });
    connection.on("ready", () => {
      if (!healthy && started) options.onStatus?.("restored", "");
      healthy = true;
    });
    try {
      await connection.connect();
    } catch (e) {
      connection.disconnect(); // or it would keep reconnecting in the background
      throw startError(e, refusal, unreachable);
    }
    // ioredis reports a SELECT Redis refuses as an error event only, and serves database 0 in
    // its place: another application's data, perhaps
    const db = connection.options.db ?? 0;
    if (db !== 0) {
      try {
        await connection.select(db);
      } catch (e) {
        connection.disconnect();
        const why = e instanceof Error ? e.message : String(e);
        // a Redis Cluster's node refuses any SELECT: how many databases it has is not the question
        if (/cluster mode/i.test(why))
          throw new Error(
            `the Redis URL names database ${db}, but this Redis is a Redis Cluster's node (${why}), which has database 0 alone: set REDIS_CLUSTER_NODES to the cluster's nodes, and no database`,
          );
        throw new Error(`the Redis URL names database ${db}, which this Redis does not have (${why}): its databases setting says how many it has (16 unless set)`);
      }
    }
    return connection;
  };

  shared = await Promise.all(Array.from({ length: options.size ?? 4 }, open));
  started = true;

  /**
   * A shared connection that met a demoted primary is replaced by one opened afresh on the
   * same URL (whose name or address the failover moved to the new primary), and only then
   * closed, with QUIT, which Redis answers after every command sent before it: nothing sent on
   * it is cut off, and new commands go to the new one. Once a second at most for each place
   * in the pool: a URL that leads to a replica for good is answered READONLY as it stands, and
   * does not open a connection at every write. A replacement that cannot be opened leaves the
   * old one serving, to be tried again.
   */
  function replace(old: Redis): void {
    const place = shared.indexOf(old);
    if (place < 0 || closed || performance.now() - (replacedAt.get(place) ?? Number.NEGATIVE_INFINITY) < REOPEN_AT_MOST_EVERY_MS) return;
    replacedAt.set(place, performance.now());
    open().then(
      (fresh) => {
        if (closed || shared[place] !== old) {
          fresh.disconnect();
          return;
        }
        shared[place] = fresh;
        old.quit().catch(() => old.disconnect());
      },
      () => {},
    );
  }

  healthy = true;
  const idle: Redis[] = [];
  const maxTransactions = options.maxTransactions ?? 16;
  const leases = createLeases(maxTransactions, options.transactionQueue ?? 4 * maxTransactions, options.commandTimeoutMs ?? 5000);
  let next = 0;
  // Round robin over the connections that are up: after an outage they reconnect one by
  // one, and a request should not fail on one still down while another already serves.
  const pick = () => {
    for (let tried = 0; tried < shared.length; tried++) {
      const connection = shared[next++ % shared.length]!;
      if (connection.status === "ready" && !retiring.has(connection)) return connection;
    }
    return shared[next++ % shared.length]!;
  };
  // connections closed after a timeout: their socket may still read "ready" until Redis lets
  // go of what held them, and new commands sent on them would fail; skipped until they reconnect
  const retiring = new WeakSet<Redis>();
  const retire = (connection: Redis) => {
    retiring.add(connection);
    connection.once("ready", () => retiring.delete(connection));
    connection.disconnect(true);
  };

  /**
   * A command that timed out may still hold its connection inside Redis (a blocking form the
   * policy missed waits for ever, and every command queued behind it with it): the connection
   * is closed, which makes Redis drop what it was blocked on, and opened afresh.
   */
  const unwedge = (connection: Redis, replies: Replies) => {
    if (replies.some(([error]) => error !== null && TIMED_OUT.test(error.message))) retire(connection);
  };

  return {
    // each slice on a connection of its own choosing: the slices go one after another, so the
    // order holds, and a slice never goes to a connection the one before retired
    exec: (commands) =>
      inSlices(commands, async (slice) => {
        const connection = pick();
        try {
          const replies = await pipelined(connection, slice);
          unwedge(connection, replies);
          return replies;
        } catch (e) {
          if (e instanceof Error && TIMED_OUT.test(e.message)) retire(connection);
          throw e;
        }
      }),
    async transaction(commands) {
      await leases.acquire();
      try {
        const connection =
          idle.pop() ??
          (await open().catch((e: Error) => {
            throw new RedisUnavailable(e.message);
          }));
        let reusable = true;
        try {
          // the connection is this transaction's alone from MULTI to EXEC, so its commands
          // may be queued a slice at a time
          return await inSlices([["MULTI"], ...commands, ["EXEC"]], (slice) => pipelined(connection, slice));
        } catch (e) {
          reusable = false; // a broken transaction may leave the connection mid-MULTI
          throw e;
        } finally {
          if (reusable && !demoted.has(connection) && idle.length < MAX_IDLE_LEASES && connection.status === "ready") idle.push(connection);
          else connection.disconnect();
        }
      } finally {
        leases.release();
      }
    },
    async loadScript(script) {
      const [[error, sha]] = (await pipelined(pick(), [["SCRIPT", "LOAD", script]])) as [[Error | null, unknown]];
      if (error?.name === "ReplyError") throw error;
      if (error) throw new RedisUnavailable(error.message);
      return String(sha);
    },
    dedicated: () => new Redis(url, { ...connectionOptions(options), retryStrategy: () => null }),
    stats: leases.stats,
    async close() {
      closed = true;
      for (const c of [...shared, ...idle]) c.disconnect();
    },
  };
}

/**
 * A Redis Cluster through ioredis's cluster mode: each command goes to the master that owns
 * its slot. A batch may span slots, so its commands run one after another, in order; a
 * transaction (and a script) must keep to one slot, as Redis Cluster itself requires.
 */
export async function createClusterPool(nodes: string[], options: PoolOptions & ClusterAuth = {}): Promise<RedisPool> {
  const { lazyConnect: _, retryStrategy: __, ...connection } = connectionOptions(options);
  const redisOptions = { ...connection, username: options.username, password: options.password };
  const cluster = new Cluster(
    nodes.map((n) => {
      const [host, port] = n.split(":");
      return { host, port: Number(port) };
    }),
    {
      lazyConnect: true,
      enableOfflineQueue: false,
      redisOptions,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 500),
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      maxRedirections: 8,
      slotsRefreshTimeout: 1000,
    },
  );
  cluster.on("error", (e: Error) => options.onStatus?.("lost", e.message));
  // a refused AUTH reaches only the node's own error event; connect() says "None of startup nodes is available"
  let refusal: Error | undefined;
  cluster.on("node error", (e: Error) => {
    if (AUTH_REFUSED.test(e.message)) refusal ??= e;
  });
  // ioredis reads the slot map (CLUSTER SLOTS) on a duplicate of a node's connection, with its
  // options. With stringNumbers the ranges come as text, and a range such as "5461"–"10922" is
  // never filled ("5461" <= "10922" is false as text): a third of the slots went to a node at
  // random, each command of theirs redirected (MOVED), and a transaction there discarded
  // (EXECABORT) two times in three. The duplicate reads numbers as numbers.
  cluster.on("+node", (node: Redis) => {
    const duplicate = node.duplicate.bind(node);
    node.duplicate = (override) => duplicate({ ...override, stringNumbers: false });
  });
  try {
    await cluster.connect();
  } catch (e) {
    cluster.disconnect();
    throw startError(e, refusal, undefined, "REDIS_CLUSTER_USERNAME and REDIS_CLUSTER_PASSWORD");
  }
  return {
    async exec(commands) {
      const replies: Replies = [];
      for (const [name, ...args] of commands) {
        try {
          replies.push([null, fromRedis(await cluster.callBuffer(name, args))]);
        } catch (e) {
          if (e instanceof Error && e.name === "ReplyError") replies.push([e, null]);
          else throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
        }
      }
      return replies;
    },
    // MULTI … EXEC goes out as one write on the owning node's connection, which it never
    // holds past that: no connection of its own, so nothing to cap.
    async transaction(commands) {
      try {
        return await pipelined(cluster, [["MULTI"], ...commands, ["EXEC"]]);
      } catch (e) {
        // ioredis refuses, before sending anything, a transaction whose keys span slots: the
        // caller's mistake, answered in Redis Cluster's own words (a 400), never as Redis being away
        if (!(e instanceof RedisUnavailable && SPANS_SLOTS.test(e.message))) throw e;
        const crossSlot = Object.assign(new Error("CROSSSLOT Keys in request don't hash to the same slot"), { name: "ReplyError" });
        return [[crossSlot, null]];
      }
    },
    // Scripts are each node's own: a script loaded on one master is unknown to the others.
    async loadScript(script) {
      const masters = cluster.nodes("master");
      if (!masters.length) throw new RedisUnavailable("no master of the cluster is known");
      const shas = await Promise.all(
        masters.map((node) =>
          node.callBuffer("SCRIPT", ["LOAD", script]).catch((e: unknown) => {
            if (e instanceof Error && e.name === "ReplyError") throw e;
            throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
          }),
        ),
      );
      return String(shas[0]);
    },
    // Pub/sub messages reach every node of a cluster, so a stream may listen on any of them.
    dedicated: () => {
      const [host, port] = nodes[0]!.split(":");
      return new Redis({ ...redisOptions, host, port: Number(port), lazyConnect: true, retryStrategy: () => null });
    },
    stats: () => ({ active: 0, waiting: 0 }),
    async close() {
      cluster.disconnect();
    },
  };
}
