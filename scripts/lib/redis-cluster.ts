import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Redis from "ioredis";
import { freePort } from "./ports.ts";
import { type LocalRedis, startRedis } from "./redis-server.ts";

export interface LocalCluster {
  /** "127.0.0.1:port" of every node */
  nodes: string[];
  servers: LocalRedis[];
  /** the node ("127.0.0.1:port") that serves `slot` as master right now */
  masterOf(slot: number): Promise<string>;
  /** the slot of a key, as Redis computes it (hash tags included) */
  slotOf(key: string): Promise<number>;
  stop(): Promise<void>;
}

/** The node sees the cluster as ok and, if it is a replica, has finished syncing with its master. */
async function nodeReady(url: string): Promise<boolean> {
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on("error", () => {});
  try {
    await c.connect();
    const replication = (await c.call("INFO", "replication")) as string;
    const synced = !/role:slave/.test(replication) || /master_link_status:up/.test(replication);
    return synced && /cluster_state:ok/.test((await c.call("CLUSTER", "INFO")) as string);
  } catch {
    return false;
  } finally {
    c.disconnect();
  }
}

/**
 * A Redis Cluster on loopback: `masters` masters with `replicas` replicas each, every node a
 * redis-server of its own keeping nothing but its cluster file (in a temporary folder),
 * assembled with `redis-cli --cluster create`. `nodeTimeoutMs` is how long a silent master
 * has before its replica takes over.
 */
export async function startRedisCluster(options: { masters?: number; replicas?: number; nodeTimeoutMs?: number; password?: string } = {}): Promise<LocalCluster> {
  const masters = options.masters ?? 3;
  const replicas = options.replicas ?? 1;
  const dir = mkdtempSync(join(tmpdir(), "slidegate-cluster-"));
  const servers: LocalRedis[] = [];
  const stop = async () => {
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters * (1 + replicas); i++) {
      servers.push(
        await startRedis({
          password: options.password,
          args: [
            // a replica authenticates to its master with the same password
            ...(options.password ? ["--masterauth", options.password] : []),
            // the bus port of its own, from the range freePort keeps clear: by default it is the
            // port + 10,000, which can land in the ephemeral range another connection holds
            "--cluster-port",
            String(await freePort()),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            join(dir, `nodes-${i}.conf`),
            "--cluster-node-timeout",
            String(options.nodeTimeoutMs ?? 1000),
            "--dir",
            dir,
            // replicas sync at once (the default waits 5 s): a replica that never synced cannot take over
            "--repl-diskless-sync-delay",
            "0",
          ],
        }),
      );
    }
    const nodes = servers.map((s) => `127.0.0.1:${s.port}`);
    const auth = options.password ? ["-a", options.password, "--no-auth-warning"] : [];
    const create = spawnSync("redis-cli", [...auth, "--cluster", "create", ...nodes, "--cluster-replicas", String(replicas), "--cluster-yes"], { encoding: "utf8" });
    if (create.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${create.stdout}\n${create.stderr}`);
    const deadline = Date.now() + 20_000;
    while (!(await Promise.all(servers.map((s) => nodeReady(s.url)))).every(Boolean)) {
      if (Date.now() > deadline) throw new Error("the cluster did not reach cluster_state:ok with every replica in sync within 20 s");
      await new Promise((r) => setTimeout(r, 200));
    }
    const ask = async <T>(command: string, ...args: (string | number)[]): Promise<T> => {
      for (const s of servers) {
        if (s.pid === undefined) continue;
        const c = new Redis(s.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
        c.on("error", () => {});
        try {
          return (await c.call(command, ...args)) as T;
        } catch {
          // a stopped node: ask the next one
        } finally {
          c.disconnect();
        }
      }
      throw new Error("no cluster node answered");
    };
    return {
      nodes,
      servers,
      slotOf: (key) => ask<number>("CLUSTER", "KEYSLOT", key),
      async masterOf(slot) {
        // just after a failover the node asked may not list the slot yet (its old master failed,
        // the promotion not yet learnt): asked again for a few seconds before giving up
        const deadline = Date.now() + 5000;
        for (;;) {
          const ranges = await ask<[number, number, [string, number]][]>("CLUSTER", "SLOTS");
          const range = ranges.find(([from, to]) => slot >= from && slot <= to);
          if (range) return `${range[2][0]}:${range[2][1]}`;
          if (Date.now() > deadline) throw new Error(`no master serves slot ${slot}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      },
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
