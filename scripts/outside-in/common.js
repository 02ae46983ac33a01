// Shared set-up for the KafkaJS outside-in scenarios.
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')
const BROKER = process.env.KOMPAKT_BROKER || '127.0.0.1:39092'
const ADMIN_URL = process.env.KOMPAKT_ADMIN || 'http://127.0.0.1:39644'
const kafka = new Kafka({ clientId: 'outside-in', brokers: [BROKER], logLevel: logLevel.NOTHING, retry: { retries: 3 } })
const sleep = ms => new Promise(r => setTimeout(r, ms))
const uniq = p => p + '-' + Date.now().toString(36) + Math.floor(Math.random() * 1000)
const j = x => JSON.stringify(x, (k, v) => typeof v === 'bigint' ? v.toString() : v)
const err = e => `${e.name}${e.type ? '/' + e.type : ''}: ${e.message}`
async function compact(topic, partition) {
  const r = await fetch(`${ADMIN_URL}/v1/compact`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(partition === undefined ? { topic } : { topic, partition }) })
  return [r.status, await r.text()]
}
// One result of POST /v1/compact, flattened: the clean's figures (records_read, records_written, ...) sit in its
// `stats` object, which is null when the partition was skipped.
const stat = r => ({ ...(r.stats || {}), status: r.status, reason: r.reason })
async function partitions() { return (await fetch(`${ADMIN_URL}/v1/partitions`)).json() }
function run(main) { main().then(() => process.exit(0), e => { console.error('FAILED', e); process.exit(1) }) }
module.exports = { kafka, Kafka, logLevel, CompressionTypes, BROKER, ADMIN_URL, sleep, uniq, j, err, compact, stat, partitions, run }
