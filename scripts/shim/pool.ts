import Redis, { Cluster, type RedisOptions } from "ioredis";
import type { Command } from "./codec.ts";

/** Redis could not be reached (down, restarting, too slow): the shim answers 503. */
export class RedisUnavailable extends Error {}

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
  close(): Promise<void>;
}

export interface PoolOptions {
  size?: number;
  commandTimeoutMs?: number;
  onStatus?: (event: "lost" | "restored", detail: string) => void;
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
    connectTimeout: 2000,
    // Retry soon and often: a Redis that comes back should serve again within a fraction of a second.
    retryStrategy: (attempt) => Math.min(attempt * 50, 200),
  };
}

/** Upper-case names: ioredis reshapes some replies (HGETALL into an object), but only for its lower-case command names. */
async function pipelined(client: Redis | Cluster, commands: Command[]): Promise<Replies> {
  const batch = client.pipeline();
  for (const [name, ...args] of commands) batch.callBuffer(name, args);
  try {
    return ((await batch.exec()) ?? []) as Replies;
  } catch (e) {
    throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
  }
}

/** A single Redis: a few multiplexed connections, and leased ones for transactions. */
export async function createPool(url: string, options: PoolOptions = {}): Promise<RedisPool> {
  let healthy = true;
  const open = async () => {
    const connection = new Redis(url, connectionOptions(options));
    connection.on("error", (e: Error) => {
      if (healthy) options.onStatus?.("lost", e.message);
      healthy = false;
    });
    connection.on("ready", () => {
      if (!healthy) options.onStatus?.("restored", "");
      healthy = true;
    });
    try {
      await connection.connect();
    } catch (e) {
      connection.disconnect(); // or it would keep reconnecting in the background
      throw e;
    }
    return connection;
  };

  const shared = await Promise.all(Array.from({ length: options.size ?? 4 }, open));
  const idle: Redis[] = [];
  let next = 0;
  // Round robin over the connections that are up: after an outage they reconnect one by
  // one, and a request should not fail on one still down while another already serves.
  const pick = () => {
    for (let tried = 0; tried < shared.length; tried++) {
      const connection = shared[next++ % shared.length]!;
      if (connection.status === "ready") return connection;
    }
    return shared[next++ % shared.length]!;
  };

  return {
    exec: (commands) => pipelined(pick(), commands),
    async transaction(commands) {
      const connection = idle.pop() ?? (await open().catch((e: Error) => {
        throw new RedisUnavailable(e.message);
      }));
      let reusable = true;
      try {
        return await pipelined(connection, [["MULTI"], ...commands, ["EXEC"]]);
      } catch (e) {
        reusable = false; // a broken transaction may leave the connection mid-MULTI
        throw e;
      } finally {
        if (reusable && idle.length < MAX_IDLE_LEASES && connection.status === "ready") idle.push(connection);
        else connection.disconnect();
      }
    },
    async close() {
      for (const c of [...shared, ...idle]) c.disconnect();
    },
  };
}

/**
 * A Redis Cluster through ioredis's cluster mode: each command goes to the master that owns
 * its slot. A batch may span slots, so its commands run one after another, in order; a
 * transaction (and a script) must keep to one slot, as Redis Cluster itself requires.
 */
export async function createClusterPool(nodes: string[], options: PoolOptions = {}): Promise<RedisPool> {
  const { lazyConnect: _, retryStrategy: __, ...redisOptions } = connectionOptions(options);
  const cluster = new Cluster(nodes.map((n) => {
    const [host, port] = n.split(":");
    return { host, port: Number(port) };
  }), {
    lazyConnect: true,
    enableOfflineQueue: false,
    redisOptions,
    clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 500),
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    maxRedirections: 8,
    slotsRefreshTimeout: 1000,
  });
  cluster.on("error", (e: Error) => options.onStatus?.("lost", e.message));
  try {
    await cluster.connect();
  } catch (e) {
    cluster.disconnect();
    throw e;
  }
  return {
    async exec(commands) {
      const replies: Replies = [];
      for (const [name, ...args] of commands) {
        try {
          replies.push([null, await cluster.callBuffer(name, args)]);
        } catch (e) {
          if (e instanceof Error && e.name === "ReplyError") replies.push([e, null]);
          else throw new RedisUnavailable(e instanceof Error ? e.message : String(e));
        }
      }
      return replies;
    },
    transaction: (commands) => pipelined(cluster, [["MULTI"], ...commands, ["EXEC"]]),
    async close() {
      cluster.disconnect();
    },
  };
}
