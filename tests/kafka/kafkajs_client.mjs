// kafkajs (the Node.js Kafka client) driven by tests/kafka/kafka_clients.py, one run per call:
//
//   node kafkajs_client.mjs produce BOOTSTRAP TOPIC CODEC < records.json
//   node kafkajs_client.mjs consume BOOTSTRAP TOPIC START COUNT ISOLATION > records.json
//
// Records travel as JSON: {offset, key, value, headers: [[name, value], ...], timestamp}, keys,
// values and header values in base64 (null stays null). `produce` writes them to partition 0,
// idempotently, with CODEC (none, gzip, or snappy when kafkajs-snappy is installed); `consume`
// joins a group of its own (kafkajs reads only as a group member), seeks partition 0 to START
// and prints COUNT records, or fewer if they do not come within the test's timeout. The
// modules come from $KAFKAJS_MODULES (scripts/setup.sh installs them under .venv/node).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.KAFKAJS_MODULES ?? ".", "kafkajs_client"));
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require("kafkajs");
try {
  CompressionCodecs[CompressionTypes.Snappy] = require("kafkajs-snappy");
} catch {
  // without kafkajs-snappy, kafkajs neither writes nor reads snappy
}

const TIMEOUT_MS = 15000;
const [mode, bootstrap, topic, ...rest] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: "tidelog-tests", brokers: bootstrap.split(","), logLevel: logLevel.NOTHING,
  requestTimeout: TIMEOUT_MS, retry: { retries: 5 },
});
const bytes = (text) => (text === null ? null : Buffer.from(text, "base64"));
const text = (buffer) => (buffer == null ? null : Buffer.from(buffer).toString("base64"));

// kafkajs takes headers as an object: a name given more than once becomes a list of values
// (so the values of one name come together, in the order given).
function headerObject(pairs) {
  const out = {};
  for (const [name, value] of pairs) {
    (out[name] ??= []).push(bytes(value));
  }
  return out;
}

function headerPairs(object) {
  return Object.entries(object ?? {}).flatMap(([name, value]) =>
    (Array.isArray(value) ? value : [value]).map((v) => [name, text(v)]));
}

async function produce(codec) {
  const compression = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP,
                        snappy: CompressionTypes.Snappy }[codec];
  if (compression === undefined) throw new Error(`kafkajs writes no ${codec}`);
  const records = JSON.parse(readFileSync(0, "utf8"));
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  try {
    await producer.send({
      topic, acks: -1, compression,
      messages: records.map((r) => ({
        partition: 0, key: bytes(r.key), value: bytes(r.value),
        timestamp: String(r.timestamp), headers: headerObject(r.headers),
      })),
    });
  } finally {
    await producer.disconnect();
  }
}

async function consume(start, count, isolation) {
  const consumer = kafka.consumer({
    groupId: `tidelog-tests-kafkajs-${process.pid}`,
    readUncommitted: isolation !== "read_committed",
  });
  const got = [];
  await consumer.connect();
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, TIMEOUT_MS);
      consumer.on(consumer.events.CRASH, (event) => reject(event.payload.error));
      consumer.subscribe({ topics: [topic] })
        .then(() => consumer.run({
          autoCommit: false,
          eachMessage: async ({ partition, message }) => {
            if (partition !== 0 || got.length >= count) return;
            got.push({
              offset: Number(message.offset), key: text(message.key),
              value: text(message.value), headers: headerPairs(message.headers),
              timestamp: Number(message.timestamp),
            });
            if (got.length >= count) {
              clearTimeout(timer);
              resolve();
            }
          },
        }))
        .then(() => consumer.seek({ topic, partition: 0, offset: String(start) }))
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  process.stdout.write(JSON.stringify(got));
}

if (mode === "produce") {
  await produce(rest[0]);
} else if (mode === "consume") {
  await consume(Number(rest[0]), Number(rest[1]), rest[2]);
} else {
  throw new Error(`unknown mode ${mode}`);
}
