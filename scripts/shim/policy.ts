/**
 * The command policy: which Redis commands the shim runs for a REST caller, and why it refuses
 * the rest. The aim is Upstash's surface, no more and no less: a token is the key to a
 * database, never to the server behind it. Everything is refused unless this table allows
 * it, so a command a newer Redis adds stays refused until someone decides otherwise here.
 *
 * Names are as `COMMAND LIST` prints them: lower case, a subcommand as `container|sub`,
 * `container|*` for every subcommand of a container. test/node/shim-policy.test.ts walks
 * every command the test redis-server reports and checks each one is classified here.
 *
 * Sources: Upstash's command reference and compatibility pages (upstash.com/docs/redis).
 * Where they say nothing, the row is refused and its comment says it is a guess.
 */

export interface Refusal {
  /** the reason, appended to Upstash's own "Command is not available" error */
  why: string;
}
export type Verdict = "allow" | Refusal;

const ALLOW = "allow" as const;

// --- why each refused family is refused -------------------------------------------------

/** SHUTDOWN stops Redis for every client (every gate in front of it then fails open); DEBUG
 * crashes, stalls or reloads it; CONFIG SET rewrites server settings (maxmemory-policy, or
 * dir + dbfilename to write files anywhere) and CONFIG GET reads requirepass; ACL creates
 * users and lists password hashes; MODULE loads native code into the server. Upstash runs
 * these on infrastructure of its own, never for a REST token. */
const SERVER_ADMIN: Refusal = { why: "it administers the Redis server behind the shim, which a REST token must never do" };

/** LATENCY and SLOWLOG reset server-wide statistics, and SLOWLOG GET shows other clients'
 * commands with their arguments; MEMORY DOCTOR/STATS/MALLOC-STATS/PURGE inspect or tune the
 * allocator of the whole server. Upstash serves none of them (it errors on MEMORY STATS and
 * SLOWLOG with this same message). */
const SERVER_DIAGNOSTICS: Refusal = { why: "it inspects or resets the whole server, not the database" };

/** SAVE blocks the server while it writes the dataset; BGSAVE and BGREWRITEAOF fork it;
 * LASTSAVE reports on that machinery. Upstash manages persistence itself. */
const PERSISTENCE: Refusal = { why: "it drives the server's own persistence (disk writes, forks)" };

/** Replication and cluster plumbing: REPLICAOF/SLAVEOF turn the server into a replica of
 * any host (and discard its data), FAILOVER swaps roles, SYNC/PSYNC/REPLCONF are the
 * replication stream itself, ROLE reports the topology, CLUSTER reconfigures slots and nodes,
 * ASKING/READONLY/READWRITE/RESTORE-ASKING are cluster client protocol, and MIGRATE sends keys
 * to another server of the caller's choosing. */
const REPLICATION: Refusal = { why: "it belongs to replication or cluster plumbing, not to a database client" };

/** Upstash exposes one logical database. SWAPDB and MOVE (and COPY … DB, below) reach the
 * server's other databases, which may hold another application's data. */
const OTHER_DATABASES: Refusal = { why: "Upstash exposes a single database and this reaches the server's others" };

/** The shim shares a few Redis connections between all requests, so a command that changes a
 * connection's state would change it for everyone: AUTH/HELLO/RESET/QUIT/SELECT change who it
 * is, which protocol and which database it speaks; CLIENT names, pauses (every client, for as
 * long as asked), kills (the shim's own pool), un-evicts or tracks connections and lists other
 * clients' addresses. Upstash serves these only over its TCP endpoint, not over REST. */
const CONNECTION_STATE: Refusal = { why: "it would change or end a connection other requests share; Upstash serves it over TCP only" };

/** A transaction needs a connection of its own from MULTI to EXEC: POST /multi-exec gives it
 * one. Over / or /pipeline these would leave a shared connection inside MULTI or WATCH. */
const TRANSACTION: Refusal = { why: "send a transaction as one body to POST /multi-exec" };

/** Subscriptions and MONITOR turn a connection into a stream: they are served as server-sent
 * events at POST /subscribe/<channel>, /psubscribe/<pattern> and /monitor, each on a Redis
 * connection of its own. Sharded pub/sub (SSUBSCRIBE) has no REST form at Upstash. */
const STREAMING: Refusal = { why: "streams are served at POST /subscribe/<channel>, /psubscribe/<pattern> and /monitor" };

/** Blocking pops (and XREAD/XREADGROUP … BLOCK, WAIT) hold a shared connection for up to
 * their timeout, stalling every request queued behind it. */
const BLOCKING: Refusal = { why: "it blocks a connection other requests share" };

/** RESTORE loads a value from DUMP's serialized form, which Redis checks only in part unless
 * `sanitize-dump-payload yes` is set: a crafted payload (a set with one member twice) is
 * accepted, and the next write to that key fails an assertion that stops the server. */
const UNCHECKED_PAYLOAD: Refusal = { why: "a crafted payload can crash the Redis server" };

/** Not among the commands Upstash lists: debugging aids (PFDEBUG, PFSELFTEST, SCRIPT DEBUG),
 * key internals (OBJECT), help texts of containers whose other subcommands are served,
 * FUNCTION DUMP/RESTORE, sharded publishing and LOLWUT. Refused as the safe guess; a harmless
 * one can be allowed here once Upstash is known to serve it. */
const NOT_AT_UPSTASH: Refusal = { why: "Upstash does not serve it" };

// --- the table ---------------------------------------------------------------------------

const ROWS: [Verdict, string][] = [
  // Data commands Upstash serves, non-blocking forms: strings, bitmaps, hashes, lists, sets,
  // sorted sets, geo, HyperLogLog, streams and generic key commands.
  [
    ALLOW,
    `append decr decrby get getdel getex getrange getset incr incrby incrbyfloat lcs mget mset
    msetnx psetex set setex setnx setrange strlen substr`,
  ],
  [ALLOW, "bitcount bitfield bitfield_ro bitop bitpos getbit setbit"],
  [
    ALLOW,
    `hdel hexists hget hgetall hincrby hincrbyfloat hkeys hlen hmget hmset hrandfield hscan hset
    hsetnx hstrlen hvals`,
  ],
  [
    ALLOW,
    `lindex linsert llen lmove lmpop lpop lpos lpush lpushx lrange lrem lset ltrim rpop rpoplpush
    rpush rpushx`,
  ],
  [
    ALLOW,
    `sadd scard sdiff sdiffstore sinter sintercard sinterstore sismember smembers smismember smove
    spop srandmember srem sscan sunion sunionstore`,
  ],
  [
    ALLOW,
    `zadd zcard zcount zdiff zdiffstore zincrby zinter zintercard zinterstore zlexcount zmpop
    zmscore zpopmax zpopmin zrandmember zrange zrangebylex zrangebyscore zrangestore zrank zrem
    zremrangebylex zremrangebyrank zremrangebyscore zrevrange zrevrangebylex zrevrangebyscore zrevrank
    zscan zscore zunion zunionstore`,
  ],
  [
    ALLOW,
    `geoadd geodist geohash geopos georadius georadius_ro georadiusbymember georadiusbymember_ro
    geosearch geosearchstore`,
  ],
  [ALLOW, "pfadd pfcount pfmerge"],
  // XREAD and XREADGROUP are refused with BLOCK (see ARGUMENT_RULES).
  [
    ALLOW,
    `xack xadd xautoclaim xclaim xdel xlen xpending xrange xread xreadgroup xrevrange xsetid xtrim
    xgroup|create xgroup|createconsumer xgroup|delconsumer xgroup|destroy xgroup|setid
    xinfo|consumers xinfo|groups xinfo|stream`,
  ],
  // COPY is refused with DB (see ARGUMENT_RULES); SCAN also takes Upstash's WITHTYPE.
  [
    ALLOW,
    `copy del dump exists expire expireat expiretime keys persist pexpire pexpireat pexpiretime
    pttl randomkey rename renamenx scan sort sort_ro touch ttl type unlink memory|usage`,
  ],
  // Scripting and functions, as far as Upstash lists them: the gate's EVALSHA/EVAL/SCRIPT
  // LOAD/EXISTS and @upstash/ratelimit's scripts live here. Lua can still call, from inside a
  // script, commands this table refuses when Redis allows them in scripts: see the README.
  [
    ALLOW,
    `eval eval_ro evalsha evalsha_ro script|exists script|flush script|kill script|load
    fcall fcall_ro function|delete function|flush function|kill function|list function|load
    function|stats`,
  ],
  // Publishing, and counting subscribers; subscribing itself is a stream (see STREAMING).
  [ALLOW, "publish pubsub|channels pubsub|numpat pubsub|numsub"],
  // Read-only introspection Upstash serves, and its whole-database flushes: FLUSHALL is run as
  // FLUSHDB, because on Upstash the one database is all there is.
  [ALLOW, "ping echo time dbsize info command|count command|docs command|getkeys command|getkeysandflags command|help command|info command|list"],
  [ALLOW, "flushdb flushall"],

  [SERVER_ADMIN, "shutdown debug config|* acl|* module|*"],
  [SERVER_DIAGNOSTICS, "latency|* slowlog|* memory|doctor memory|malloc-stats memory|purge memory|stats memory|help"],
  [PERSISTENCE, "save bgsave bgrewriteaof lastsave"],
  [
    REPLICATION,
    `replicaof slaveof failover sync psync replconf role cluster|* asking readonly readwrite
    restore-asking migrate`,
  ],
  [OTHER_DATABASES, "swapdb move"],
  [UNCHECKED_PAYLOAD, "restore"],
  [CONNECTION_STATE, "auth hello reset quit select client|*"],
  [TRANSACTION, "multi exec discard watch unwatch"],
  [STREAMING, "subscribe psubscribe unsubscribe punsubscribe ssubscribe sunsubscribe monitor"],
  [BLOCKING, "blpop brpop brpoplpush blmove blmpop bzpopmin bzpopmax bzmpop wait"],
  [
    NOT_AT_UPSTASH,
    `object|* lolwut pfdebug pfselftest spublish pubsub|shardchannels pubsub|shardnumsub
    pubsub|help script|debug script|help function|dump function|restore function|help xgroup|help
    xinfo|help`,
  ],
];

/** Rules that look past the name: a command allowed in general, refused in one form. */
const ARGUMENT_RULES: Record<string, (args: readonly string[]) => { label: string; refusal: Refusal } | undefined> = {
  xread: (args) => streamReadRefusal("XREAD", args, XREAD_OPTIONS),
  xreadgroup: (args) => streamReadRefusal("XREADGROUP", args, XREADGROUP_OPTIONS),
  copy: (args) => (hasWord(args.slice(2), "DB") ? { label: "COPY DB", refusal: OTHER_DATABASES } : undefined),
};

const hasWord = (args: readonly string[], word: string) => args.some((a) => a.toUpperCase() === word);

/** The options of XREAD and XREADGROUP before STREAMS, each with how many values follow it. */
const XREAD_OPTIONS: Record<string, number> = { COUNT: 1, BLOCK: 1 };
const XREADGROUP_OPTIONS: Record<string, number> = { GROUP: 2, COUNT: 1, BLOCK: 1, NOACK: 0 };

/** An option of XREAD or XREADGROUP this table does not know: a newer Redis may block on it. */
const UNKNOWN_OPTION: Refusal = { why: "an option this shim does not know to be safe on a shared connection" };

/**
 * Why a stream read is refused, reading its options as Redis does: in any order, each followed
 * by its values (`GROUP block block` names a group and a consumer), up to STREAMS, after which
 * come key names and IDs that may spell anything. BLOCK is refused; so is a word that is no
 * option known here (a newer Redis's, say), which an older Redis refuses as a syntax error.
 */
function streamReadRefusal(name: string, args: readonly string[], options: Record<string, number>) {
  for (let i = 0; i < args.length; i++) {
    const word = args[i]!.toUpperCase();
    if (word === "STREAMS") return undefined;
    if (word === "BLOCK") return { label: `${name} BLOCK`, refusal: BLOCKING };
    const values = options[word];
    if (values === undefined) return { label: `${name} ${word}`, refusal: UNKNOWN_OPTION };
    i += values;
  }
  return undefined;
}

/** The table, keyed by `name` or `container|sub`; built once, duplicates refused at load. */
export const POLICY: ReadonlyMap<string, Verdict> = (() => {
  const table = new Map<string, Verdict>();
  for (const [verdict, names] of ROWS) {
    for (const name of names.split(/\s+/).filter(Boolean)) {
      if (table.has(name)) throw new Error(`command policy: ${name} is listed twice`);
      table.set(name, verdict);
    }
  }
  return table;
})();

const CONTAINERS = new Set([...POLICY.keys()].filter((k) => k.includes("|")).map((k) => k.split("|")[0]!));

/** Whether `name` (lower case) needs a subcommand, like CLIENT or SCRIPT. */
export const isContainer = (name: string) => CONTAINERS.has(name);

/**
 * The verdict for a `COMMAND LIST` name (`get`, `client|kill`), or undefined when the table
 * does not classify it.
 */
export function classify(listed: string): Verdict | undefined {
  const [name, sub] = listed.toLowerCase().split("|") as [string, string | undefined];
  if (sub === undefined) return POLICY.get(name);
  return POLICY.get(`${name}|${sub}`) ?? POLICY.get(`${name}|*`);
}

/**
 * Why `command` (upper-case name first, as codec.toCommand gives it) is refused, in Upstash's
 * words with the reason after them; undefined when the shim may run it.
 *
 * @example
 * refusal(["GET", "k"]);            // undefined
 * refusal(["CONFIG", "SET", "x"]);  // "ERR Command is not available: 'CONFIG SET' (it administers …)"
 */
export function refusal(command: readonly string[]): string | undefined {
  const [upper, ...args] = command;
  const name = upper!.toLowerCase();
  let label = upper!;
  let verdict: Verdict | undefined;
  if (isContainer(name)) {
    const sub = args[0]?.toLowerCase();
    label = sub === undefined ? upper! : `${upper} ${sub.toUpperCase()}`;
    verdict = sub === undefined ? { why: `${upper} needs a subcommand` } : classify(`${name}|${sub}`);
  } else {
    verdict = POLICY.get(name);
  }
  if (verdict === "allow") {
    const rule = ARGUMENT_RULES[name]?.(args);
    if (!rule) return undefined;
    label = rule.label;
    verdict = rule.refusal;
  }
  const why = verdict?.why ?? "it is not a command this shim knows to be safe";
  return `ERR Command is not available: '${label}' (${why})`;
}
