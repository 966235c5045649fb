import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { classify, isContainer, POLICY } from "../../scripts/shim/policy.ts";
import { type OwnShim, startOwnShim } from "../helpers/shim.ts";

// A Redis and shim of this file's own: the walk sends SHUTDOWN, FLUSHALL and the like, and
// counts what reached Redis in INFO commandstats, which no other file may disturb.
let own: OwnShim;
let listed: string[];
beforeAll(async () => {
  own = await startOwnShim();
  listed = ((await own.admin.call("COMMAND", "LIST")) as string[]).map((n) => n.toLowerCase()).sort();
});
afterAll(async () => {
  await own?.close();
});

/** Calls per command (`get`, `client|kill`) Redis has seen, accepted or rejected. */
async function commandStats(): Promise<Map<string, number>> {
  const info = (await own.admin.call("INFO", "commandstats")) as string;
  const stats = new Map<string, number>();
  for (const [, name, calls, rejected, failed] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)/gm)) {
    stats.set(name!, Number(calls) + Number(rejected) + Number(failed));
  }
  return stats;
}

/** How a REST client names a listed command: `client|kill` → ["CLIENT", "KILL"]. */
const asCommand = (name: string) => name.toUpperCase().split("|") as [string, ...string[]];

const isSubcommand = (name: string) => name.includes("|");
const refused = (name: string) => (!isSubcommand(name) && isContainer(name) ? true : classify(name) !== "allow");

describe("shim command policy", () => {
  it("classifies every command Redis reports, and lists no command Redis does not know", () => {
    expect(listed.length).toBeGreaterThan(200);
    const unclassified = listed.filter((name) => classify(name) === undefined && !(!isSubcommand(name) && isContainer(name)));
    expect(unclassified).toEqual([]);
    const unknown = [...POLICY.keys()].filter((name) => !name.endsWith("|*") && !listed.includes(name));
    expect(unknown).toEqual([]);
  });

  it("keeps what the gate and @upstash/ratelimit use allowed, and the server's controls refused", () => {
    for (const name of [
      "evalsha",
      "eval",
      "script|load",
      "script|exists",
      "script|flush",
      "time",
      "zadd",
      "zremrangebyscore",
      "zcard",
      "incrby",
      "pexpire",
      "get",
      "set",
      "hset",
      "hgetall",
      "ping",
      "dbsize",
      "info",
      "flushdb",
      "flushall",
      "fcall",
      "fcall_ro",
      "function|load",
      "publish",
    ]) {
      expect(classify(name), name).toBe("allow");
    }
    for (const name of [
      "shutdown",
      "config|set",
      "config|get",
      "acl|list",
      "acl|setuser",
      "client|kill",
      "client|pause",
      "client|no-evict",
      "debug",
      "swapdb",
      "monitor",
      "replicaof",
      "migrate",
      "module|load",
      "save",
      "bgsave",
      "select",
      "multi",
      "blpop",
    ]) {
      expect(classify(name), name).not.toBe("allow");
    }
  });

  it("answers every refused command with Upstash's error and never lets it reach Redis", async () => {
    const redis = own.client();
    const refusedNames = [...listed.filter(refused), "nosuchcommand"];
    expect(refusedNames).toContain("shutdown");
    const before = await commandStats();
    for (const name of refusedNames) {
      const command = asCommand(name);
      const label = command.join(" ");
      await expect(redis.exec(command), name).rejects.toThrow(`Command is not available: '${label}'`);
    }
    const after = await commandStats();
    const reached = refusedNames.filter((name) => (after.get(name) ?? 0) !== (before.get(name) ?? 0));
    expect(reached).toEqual([]);
    expect(await redis.ping()).toBe("PONG"); // SHUTDOWN and friends did nothing
  });

  it("passes every allowed command on to Redis", async () => {
    const redis = own.client({ responseEncoding: false });
    const allowed = listed.filter((name) => !refused(name));
    const before = await commandStats();
    for (const name of allowed) {
      await redis.exec(asCommand(name)).catch((e: Error) => expect(e.message, name).not.toMatch(/Command is not available/));
    }
    const after = await commandStats();
    // the shim runs FLUSHALL as FLUSHDB: one database, as at Upstash
    const ranAs = (name: string) => (name === "flushall" ? "flushdb" : name);
    const missed = allowed.filter((name) => (after.get(ranAs(name)) ?? 0) <= (before.get(ranAs(name)) ?? 0));
    expect(missed).toEqual([]);
  });

  it("refuses by argument: XREAD … BLOCK, COPY … DB, and a container without a subcommand", async () => {
    const redis = own.client();
    await expect(redis.exec(["XREAD", "BLOCK", "0", "STREAMS", "s", "$"])).rejects.toThrow("Command is not available: 'XREAD BLOCK' (it blocks a connection other requests share)");
    await expect(redis.exec(["COPY", "a", "b", "DB", "1"])).rejects.toThrow("Command is not available: 'COPY DB' (Upstash exposes a single database");
    await expect(redis.exec(["SCRIPT"])).rejects.toThrow("Command is not available: 'SCRIPT' (SCRIPT needs a subcommand)");
    await expect(redis.exec(["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "BLOCK", "10", "STREAMS", "s", ">"])).rejects.toThrow("'XREADGROUP BLOCK'");
    // options in any order, as Redis takes them: BLOCK before GROUP, or after COUNT or NOACK
    await expect(redis.exec(["XREADGROUP", "BLOCK", "0", "GROUP", "g", "c", "STREAMS", "s", ">"])).rejects.toThrow("'XREADGROUP BLOCK'");
    await expect(redis.exec(["XREADGROUP", "COUNT", "1", "BLOCK", "0", "GROUP", "g", "c", "STREAMS", "s", ">"])).rejects.toThrow("'XREADGROUP BLOCK'");
    await expect(redis.exec(["XREADGROUP", "GROUP", "g", "c", "NOACK", "block", "0", "STREAMS", "s", ">"])).rejects.toThrow("'XREADGROUP BLOCK'");
    await expect(redis.exec(["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "$"])).rejects.toThrow("'XREAD BLOCK'");
    // an option of a newer Redis (8.4's CLAIM): refused, since it could come with BLOCK after it
    await expect(redis.exec(["XREADGROUP", "GROUP", "g", "c", "CLAIM", "1000", "BLOCK", "0", "STREAMS", "s", ">"])).rejects.toThrow("'XREADGROUP CLAIM'");
    // names that spell BLOCK or DB are names, not options
    await expect(redis.exec(["XREADGROUP", "GROUP", "block", "block", "STREAMS", "block", ">"])).rejects.toThrow("NOGROUP");
    await redis.set("DB", "copied");
    expect(await redis.exec(["COPY", "DB", "policy:copy-of-db"])).toBe(1);
  });

  it("refuses inside a pipeline and a transaction, and runs the rest of the pipeline", async () => {
    const redis = own.client();
    const p = redis.pipeline();
    p.set("policy:k", "v");
    p.xread("policy:stream", "$", { blockMS: 60_000 });
    p.get("policy:k");
    const results = await p.exec({ keepErrors: true });
    expect(results[0]!.result).toBe("OK");
    expect(results[1]!.error).toMatch(/Command is not available: 'XREAD BLOCK'/);
    expect(results[2]!.result).toBe("v");

    const tx = redis.multi();
    tx.incr("policy:n");
    tx.xread("policy:stream", "$", { blockMS: 60_000 });
    await expect(tx.exec()).rejects.toThrow(/Command is not available: 'XREAD BLOCK'/);
    expect(await redis.get("policy:n")).toBeNull(); // refused before MULTI: nothing ran
  });

  it("leaves the server's settings alone when a leaked token tries to change them", async () => {
    const redis = own.client();
    const attempts: [string, ...string[]][] = [
      ["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
      ["CLIENT", "PAUSE", "3000", "ALL"],
      ["CLIENT", "NO-EVICT", "on"],
      ["ACL", "SETUSER", "intruder", "on", ">pw", "+@all"],
    ];
    for (const command of attempts) {
      await expect(redis.exec(command)).rejects.toThrow(`Command is not available: '${command[0]} ${command[1]}'`);
    }
    // a DUMP payload Redis checks only in part by default: a crafted one crashes the server later
    await expect(redis.exec(["RESTORE", "policy:restored", "0", "payload"])).rejects.toThrow("Command is not available: 'RESTORE' (a crafted payload can crash the Redis server)");
    expect(await own.admin.config("GET", "maxmemory-policy")).toEqual(["maxmemory-policy", "noeviction"]);
    expect(await own.admin.call("ACL", "USERS")).toEqual(["default"]);
  });

  it("runs FLUSHALL as FLUSHDB: the shim's database empties, the server's others keep their keys", async () => {
    await own.admin.select(1);
    await own.admin.set("other-database", "kept");
    await own.admin.select(0);
    const redis = own.client();
    await redis.set("policy:flush", "gone");
    expect(await redis.flushall()).toBe("OK");
    expect(await redis.dbsize()).toBe(0);
    await own.admin.select(1);
    expect(await own.admin.get("other-database")).toBe("kept");
    await own.admin.select(0);
  });
});
