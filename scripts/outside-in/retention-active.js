// Time retention on a quiet topic: retention.ms=5000, three records, then nothing. Kafka deletes the segment once its
// largest timestamp is older than retention.ms even when it is the active one (UnifiedLog.deleteSegments rolls a new
// empty segment first), so after ~5 s + log.retention.check.interval.ms the log is empty (low == high == 3).
// Needs the broker started with --override log.retention.check.interval.ms=2000.
const { kafka, run, uniq, j, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('quiet')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'retention.ms', value: '5000' }] }] })
  const p = kafka.producer(); await p.connect()
  await p.send({ topic: t, messages: [{ key: 'a', value: '1' }, { key: 'b', value: '2' }, { key: 'c', value: '3' }] })
  for (const s of [0, 10, 20]) { if (s) await sleep(10000); console.log(`t=${s}s`, j(await admin.fetchTopicOffsets(t))) }
  await p.disconnect(); await admin.disconnect()
})
