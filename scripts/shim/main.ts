#!/usr/bin/env node
/**
 * `npm run shim` (or `npx slidegate-shim`): the Upstash REST API in front of a Redis, for
 * local development and self-hosting. Environment: SHIM_TOKEN (required; at least 32
 * characters unless SHIM_HOST is loopback), SHIM_PREVIOUS_TOKEN (also accepted, while
 * clients rotate), REDIS_URL, or REDIS_CLUSTER_NODES (host:port,host:port,… for a Redis
 * Cluster) with REDIS_CLUSTER_USERNAME and REDIS_CLUSTER_PASSWORD when its nodes ask, SHIM_HOST, SHIM_PORT, SHIM_BODY_LIMIT (bytes), SHIM_MAX_TRANSACTIONS,
 * SHIM_MAX_STREAMS, SHIM_MAX_CONNECTIONS, and SHIM_TLS_CERT + SHIM_TLS_KEY (PEM files) for HTTPS.
 */
import { readFileSync } from "node:fs";
import { DEFAULT_MAX_CONNECTIONS, DEFAULT_REDIS_URL, startShim, unpresentableToken, weakToken } from "./server.ts";

function fail(message: string): never {
  console.error(`slidegate shim: ${message}`);
  process.exit(1);
}

function integerEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) fail(`${name} must be a whole number, not "${raw}"`);
  return Number(raw);
}

const USAGE = `Usage: slidegate-shim
The Upstash REST API in front of a Redis. It takes no arguments: it reads the environment.
  SHIM_TOKEN                 the bearer token clients must send (required; at least 32
                             characters unless SHIM_HOST is loopback): openssl rand -hex 32
  SHIM_PREVIOUS_TOKEN        a second token also accepted, while clients move to a new one
  REDIS_URL                  the Redis behind it (default ${DEFAULT_REDIS_URL})
  REDIS_CLUSTER_NODES        host:port,host:port,… of a Redis Cluster, instead of REDIS_URL
  REDIS_CLUSTER_USERNAME, REDIS_CLUSTER_PASSWORD   what the cluster's nodes ask to AUTH with
  SHIM_HOST, SHIM_PORT       where it listens (default 127.0.0.1, 8079)
  SHIM_TLS_CERT, SHIM_TLS_KEY   PEM certificate chain and key: HTTPS instead of HTTP
  SHIM_BODY_LIMIT            largest request body, in bytes (default 1048576)
  SHIM_MAX_TRANSACTIONS      /multi-exec calls holding a Redis connection at once (default 16)
  SHIM_MAX_STREAMS           open /subscribe, /psubscribe and /monitor streams (default 64)
  SHIM_MAX_CONNECTIONS       client connections open at once (default ${DEFAULT_MAX_CONNECTIONS})
Example: SHIM_TOKEN=$(openssl rand -hex 32) REDIS_URL=redis://127.0.0.1:6379 npx slidegate-shim`;

// An argument would be ignored: with SHIM_TOKEN set, `--help` started a shim, and `--port 9000`
// one on another port than the user asked for.
const [arg] = process.argv.slice(2);
if (arg === "--help" || arg === "-h") {
  console.log(USAGE);
  process.exit(0);
}
if (arg !== undefined) {
  console.error(`slidegate shim: takes no arguments (not ${JSON.stringify(arg)}): it reads environment variables, such as SHIM_PORT; --help lists them`);
  process.exit(2);
}

// The installed package is plain JavaScript, so an older Node runs it: without JSON.rawJSON
// (Node 22) every integer reply would throw after Redis had run the command, a write the client
// sees as a failure. Refuse to start instead.
if (typeof (JSON as { rawJSON?: unknown }).rawJSON !== "function") fail(`needs Node.js 22.12 or later (JSON.rawJSON), not ${process.version}`);

const clusterNodes = process.env.REDIS_CLUSTER_NODES?.split(",")
  .map((n) => n.trim())
  .filter(Boolean);
const badNode = clusterNodes?.find((n) => !/^[^\s:]+:\d{1,5}$/.test(n));
if (badNode !== undefined) fail(`REDIS_CLUSTER_NODES: "${badNode}" is not host:port (give a comma-separated list like 10.0.0.1:7000,10.0.0.2:7000)`);
// a cluster's nodes take one password (and ACL user) for all; a single Redis takes them in its URL
const clusterAuth = { username: process.env.REDIS_CLUSTER_USERNAME || undefined, password: process.env.REDIS_CLUSTER_PASSWORD || undefined };
for (const [name, value] of [
  ["REDIS_CLUSTER_USERNAME", clusterAuth.username],
  ["REDIS_CLUSTER_PASSWORD", clusterAuth.password],
] as const) {
  if (value !== undefined && !clusterNodes?.length)
    fail(`${name} goes with REDIS_CLUSTER_NODES; a single Redis takes its credentials in REDIS_URL (redis://user:password@host:port)`);
}

const token = process.env.SHIM_TOKEN;
// the same words however it was launched (npm run shim, npx slidegate-shim, a service manager)
if (!token) fail("SHIM_TOKEN is not set. Every client must present it as a bearer token; set it to a long random value, e.g. SHIM_TOKEN=$(openssl rand -hex 32)");
const host = process.env.SHIM_HOST || "127.0.0.1";
const previousToken = process.env.SHIM_PREVIOUS_TOKEN || undefined;
const weak =
  unpresentableToken("SHIM_TOKEN", token) ??
  unpresentableToken("SHIM_PREVIOUS_TOKEN", previousToken) ??
  weakToken("SHIM_TOKEN", token, host) ??
  weakToken("SHIM_PREVIOUS_TOKEN", previousToken, host);
if (weak) fail(weak);

function pem(name: string): Buffer {
  try {
    return readFileSync(process.env[name]!);
  } catch (e) {
    fail(`${name}: cannot read "${process.env[name]}" (${(e as Error).message})`);
  }
}
const { SHIM_TLS_CERT: certFile, SHIM_TLS_KEY: keyFile } = process.env;
if (!!certFile !== !!keyFile) fail(`HTTPS needs both SHIM_TLS_CERT and SHIM_TLS_KEY (PEM files); only ${certFile ? "SHIM_TLS_CERT" : "SHIM_TLS_KEY"} is set`);
const tls = certFile ? { cert: pem("SHIM_TLS_CERT"), key: pem("SHIM_TLS_KEY") } : undefined;

function positiveEnv(name: string, fallback: number): number {
  const value = integerEnv(name, fallback);
  if (value < 1) fail(`${name} must be at least 1, not ${value}`);
  return value;
}

const shim = await startShim({
  token,
  redisUrl: process.env.REDIS_URL || DEFAULT_REDIS_URL,
  clusterNodes,
  clusterAuth,
  host,
  port: integerEnv("SHIM_PORT", 8079),
  bodyLimit: positiveEnv("SHIM_BODY_LIMIT", 1024 * 1024),
  previousToken,
  maxTransactions: positiveEnv("SHIM_MAX_TRANSACTIONS", 16),
  maxStreams: positiveEnv("SHIM_MAX_STREAMS", 64),
  maxConnections: positiveEnv("SHIM_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS),
  tls,
}).catch((e: Error) => fail(`cannot start: ${e.message}${e.message.startsWith("cannot reach Redis") ? ": start it there, or set REDIS_URL to the Redis to use" : ""}`));

console.log(`slidegate shim listening on ${shim.url} -> ${shim.redis}`);

for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    void shim.close().then(() => process.exit(0));
  });
}
