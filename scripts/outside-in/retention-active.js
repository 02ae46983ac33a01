// Time retention on a quiet topic: retention.ms=5000, three records, then nothing. Kafka deletes the segment once its
// largest timestamp is older than retention.ms even when it is the active one (UnifiedLog.deleteSegments rolls a new
// empty segment first), so after ~5 s + log.retention.check.interval.ms the log is empty (low == high == 3).
// Needs the broker started with --override log.retention.check.interval.ms=2000.
const { kafka, run, uniq, j, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  // control: retention.bytes=1 keeps the single segment in Kafka too (deleteRetentionSizeBreachedSegments deletes a
  // segment only while size - retention.bytes >= the segment's size)
  const t = uniq('quiet'), b = uniq('quietb')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'retention.ms', value: '5000' }] }, { topic: b, configEntries: [{ name: 'retention.bytes', value: '1' }] }] })
  const p = kafka.producer(); await p.connect()
  for (const x of [t, b]) await p.send({ topic: x, messages: [{ key: 'a', value: '1' }, { key: 'b', value: '2' }, { key: 'c', value: '3' }] })
  for (const s of [0, 10, 20]) { if (s) await sleep(10000); console.log(`t=${s}s`, 'retention.ms=5000:', j(await admin.fetchTopicOffsets(t)), 'retention.bytes=1:', j(await admin.fetchTopicOffsets(b))) }
  await p.disconnect(); await admin.disconnect()
})
