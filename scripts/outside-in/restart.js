// Broker restart while producing and consuming: KOMPAKT_STOP_CMD (e.g. SIGTERM or SIGKILL the broker) then KOMPAKT_START_CMD.
// Checks: every acked record (acks=-1) is there after restart, the consumer group resumes from its committed offsets
// without losing records, the compacted topic's data and another group's offsets survive.
const { kafka, run, uniq, j, sleep } = require('./common')
const { execSync } = require('child_process')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('rst'), g = uniq('rg'), og = uniq('rog')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 3, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '4096' }] }] })
  await admin.setOffsets({ groupId: og, topic: t, partitions: [{ partition: 1, offset: '0' }] })
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 30, initialRetryTime: 300, maxRetryTime: 2000 } }); await p.connect()
  const acked = new Set(); let stop = false, sendErrs = 0
  const producing = (async () => { let i = 0; while (!stop) { try { await p.send({ topic: t, acks: -1, messages: [{ key: 'u' + i, value: 'v' + i }] }); acked.add('v' + i) } catch (e) { sendErrs++; console.log('send error', e.message) } i++; await sleep(20) } })()
  const c = kafka.consumer({ groupId: g, sessionTimeout: 10000, heartbeatInterval: 1000, retry: { retries: 30, initialRetryTime: 300, maxRetryTime: 2000 } })
  const got = new Set(); const crashes = []
  c.on(c.events.CRASH, e => { crashes.push(e.payload.error.message); console.log('consumer CRASH', e.payload.error.message, 'restart:', e.payload.restart) })
  await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  await c.run({ autoCommitInterval: 200, eachMessage: async ({ message }) => { got.add(message.value.toString()) } })
  await sleep(4000)
  console.log('before restart: acked', acked.size, 'consumed', got.size)
  console.log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh TERM').toString().trim())
  await sleep(1000)
  console.log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
  await sleep(6000)
  stop = true; await producing
  const ends = await admin.fetchTopicOffsets(t)
  for (let i = 0; i < 60 && [...acked].some(v => !got.has(v)); i++) await sleep(500)
  const missing = [...acked].filter(v => !got.has(v))
  console.log('after restart: acked', acked.size, 'consumed', got.size, 'missing from consumer', missing.length, missing.slice(0, 5), 'send errors', sendErrs, 'crashes', crashes.length)
  await c.disconnect()
  // verify via a fresh consumer what is in the log
  const c2 = kafka.consumer({ groupId: uniq('rv') }); await c2.connect(); await c2.subscribe({ topic: t, fromBeginning: true })
  const inlog = new Set(); const last = {}; let records = 0
  await new Promise(async res => { const to = setTimeout(res, 15000); await c2.run({ eachMessage: async ({ partition, message }) => { records++; inlog.add(message.value.toString()); last[partition] = Number(message.offset); if (ends.every(e => Number(e.high) === 0 || last[e.partition] >= Number(e.high) - 1)) { clearTimeout(to); res() } } }) })
  await c2.disconnect()
  const lost = [...acked].filter(v => !inlog.has(v))
  console.log('log holds', records, 'records,', inlog.size, 'distinct (duplicates:', records - inlog.size, '),', 'acked-but-lost', lost.length, lost.slice(0, 5), 'ends', j(ends.map(e => e.high)))
  console.log('group offsets', j((await admin.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions.map(x => x.offset)), 'other group', j((await admin.fetchOffsets({ groupId: og, topics: [t] }))[0].partitions.map(x => x.offset)))
  await p.disconnect(); await admin.disconnect()
})
