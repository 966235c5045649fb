import Redis, { type RedisOptions } from "ioredis";

/**
 * Connections to one Redis. Single commands and pipelines share a few multiplexed
 * connections (a pipeline is written in one go, so it runs in order on one of them);
 * a transaction leases a connection of its own from MULTI to EXEC.
 *
 * Commands fail at once while Redis is away (no offline queue, no retries): the shim
 * answers 503 promptly, and the connections reconnect on their own when Redis is back.
 */
export interface RedisPool {
  shared(): Redis;
  lease<T>(use: (connection: Redis) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface PoolOptions {
  size?: number;
  commandTimeoutMs?: number;
  onStatus?: (event: "lost" | "restored", detail: string) => void;
}

const MAX_IDLE_LEASES = 4;

/** Redis could not be reached (down, restarting, too slow): the shim answers 503. */
export class RedisUnavailable extends Error {}

export async function createPool(url: string, options: PoolOptions = {}): Promise<RedisPool> {
  const connectionOptions: RedisOptions = {
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
  let healthy = true;
  const open = async () => {
    const connection = new Redis(url, connectionOptions);
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

  return {
    // Round robin over the connections that are up: after an outage they reconnect one by
    // one, and a request should not fail on one still down while another already serves.
    shared: () => {
      for (let tried = 0; tried < shared.length; tried++) {
        const connection = shared[next++ % shared.length]!;
        if (connection.status === "ready") return connection;
      }
      return shared[next++ % shared.length]!;
    },
    async lease(use) {
      const connection = idle.pop() ?? (await open().catch((e: Error) => {
        throw new RedisUnavailable(e.message);
      }));
      let reusable = true;
      try {
        return await use(connection);
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
