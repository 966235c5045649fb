import { Redis } from "@upstash/redis";
import { describe, expect, it } from "vitest";
import { services } from "../helpers/shim.ts";

const CLIENTS = 50;
const COMMANDS = 10_000;

/**
 * One client's share of the load: a mix of commands on keys of its own, each result checked
 * against what the client itself wrote. Returns how many commands it sent.
 */
async function client(id: number, commands: number): Promise<number> {
  const redis = new Redis({ url: services().shimUrl, token: services().shimToken, enableTelemetry: false, enableAutoPipelining: false });
  const base = `load:${crypto.randomUUID()}:${id}`;
  let counter = 0;
  let sent = 0;
  for (let i = 0; sent < commands; i++) {
    switch (i % 6) {
      case 0: {
        const value = `v/${id}+${i}=ü`;
        expect(await redis.set(`${base}:s`, value)).toBe("OK");
        expect(await redis.get(`${base}:s`)).toBe(value);
        sent += 2;
        break;
      }
      case 1: {
        const by = 2 ** 33 + i;
        counter += by;
        expect(await redis.incrby(`${base}:n`, by)).toBe(counter);
        sent += 1;
        break;
      }
      case 2: {
        expect(await redis.hset(`${base}:h`, { [`f${i}`]: `x${i}` })).toBe(1);
        expect(await redis.hget(`${base}:h`, `f${i}`)).toBe(`x${i}`);
        sent += 2;
        break;
      }
      case 3: {
        await redis.zadd(`${base}:z`, { score: i, member: `m${i}` });
        expect(await redis.zscore(`${base}:z`, `m${i}`)).toBe(i);
        sent += 2;
        break;
      }
      case 4: {
        const p = redis.pipeline();
        p.set(`${base}:p`, i);
        p.incr(`${base}:p`);
        p.get(`${base}:p`);
        expect(await p.exec()).toEqual(["OK", i + 1, i + 1]);
        sent += 3;
        break;
      }
      case 5: {
        expect(await redis.eval("return {KEYS[1], tonumber(ARGV[1]) * 2}", [`${base}:e`], [i])).toEqual([`${base}:e`, i * 2]);
        sent += 1;
        break;
      }
    }
  }
  return sent;
}

describe("shim under load", () => {
  it(`answers ${COMMANDS} mixed commands over ${CLIENTS} concurrent clients, every result checked`, async () => {
    const sent = await Promise.all(Array.from({ length: CLIENTS }, (_, id) => client(id, COMMANDS / CLIENTS)));
    expect(sent.reduce((a, b) => a + b)).toBeGreaterThanOrEqual(COMMANDS);
  }, 120_000);
});
