// SPDX-License-Identifier: MIT
// node-redis and ioredis, with their default options, against divvyd (issue #33): connect,
// one HIT, a pipeline of HITs and a MULTI/EXEC of HITs. Prints one JSON object per client:
// {"client": ..., "hit": reply, "pipeline": [replies], "multi": [replies]}; run by
// tests/integration/test_redis_clients.py with DIVVYD_PORT, DIVVYD_USER, NODE_PATH and
// DIVVYD_CLIENT_TIMEOUT_MS set.
"use strict";

const host = "127.0.0.1";
const port = Number(process.env.DIVVYD_PORT);
const user = process.env.DIVVYD_USER;
const hit = (who) => ["HIT", "path", "/probe", "user", user + "-" + who];

async function nodeRedis() {
  const { createClient } = require("redis");
  const client = createClient({ url: `redis://${host}:${port}` });
  client.on("error", (err) => console.error("node-redis error:", err.message));
  await client.connect();
  const out = { client: "node-redis" };
  out.hit = await client.sendCommand(hit("nr"));
  const pipe = client.multi();
  for (let i = 0; i < 3; i++) pipe.addCommand(hit("nr"));
  out.pipeline = await pipe.execAsPipeline();
  const multi = client.multi();
  for (let i = 0; i < 3; i++) multi.addCommand(hit("nr"));
  out.multi = await multi.exec();
  await client.quit();
  return out;
}

async function ioRedis() {
  const Redis = require("ioredis");
  const client = new Redis(port, host);
  client.on("error", (err) => console.error("ioredis error:", err.message));
  const out = { client: "ioredis" };
  out.hit = await client.call(...hit("io"));
  const pipe = client.pipeline();
  for (let i = 0; i < 3; i++) pipe.call(...hit("io"));
  out.pipeline = await pipe.exec();
  const multi = client.multi();
  for (let i = 0; i < 3; i++) multi.call(...hit("io"));
  out.multi = await multi.exec();
  await client.quit();
  return out;
}

async function main() {
  const which = process.argv[2];
  const run = { "node-redis": nodeRedis, ioredis: ioRedis }[which];
  if (!run) throw new Error("usage: clients.js node-redis|ioredis");
  console.log(JSON.stringify(await run()));
}

// connect (or a reply) that never comes: exit 2 within the test's own timeout
const limitMs = Number(process.env.DIVVYD_CLIENT_TIMEOUT_MS || 20000);
const timer = setTimeout(() => {
  console.error(`timed out: no reply within ${limitMs} ms`);
  process.exit(2);
}, limitMs);
main().then(
  () => clearTimeout(timer),
  (err) => {
    console.error("FAILED:", err && err.stack ? err.stack : err);
    process.exit(1);
  },
);
