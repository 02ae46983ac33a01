// fetchTopicOffsetsByTimestamp with out-of-order timestamps (far future in the middle), across segments and after compaction.
const { kafka, run, uniq, j, err, compact, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('ts')
  // Kafka 4 refuses CreateTimes over 1 h ahead (message.timestamp.after.max.ms, KIP-1030): lift it for the year-2500 record
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '300' }, { name: 'min.cleanable.dirty.ratio', value: '0.01' }, { name: 'message.timestamp.after.max.ms', value: '9223372036854775807' }] }] })
  const p = kafka.producer(); await p.connect()
  // offsets 0..9: ts 1000..10000 ; offset 10: far future ; offsets 11..14: ts 20000..23000 ; offset 15: ts 5500 (late)
  for (let i = 0; i < 10; i++) await p.send({ topic: t, messages: [{ key: 'k' + i, value: 'v' + i, timestamp: String(1000 * (i + 1)) }] })
  await p.send({ topic: t, messages: [{ key: 'future', value: 'f', timestamp: String(Date.UTC(2500, 0, 1)) }] })
  for (let i = 0; i < 4; i++) await p.send({ topic: t, messages: [{ key: 'k' + i, value: 'w' + i, timestamp: String(20000 + 1000 * i) }] })
  await p.send({ topic: t, messages: [{ key: 'late', value: 'l', timestamp: '5500' }] })
  await p.send({ topic: t, messages: [{ key: 'active', value: 'a', timestamp: '30000' }] })
  const q = async label => {
    const out = {}
    for (const ts of [0, 1000, 1500, 5500, 5600, 10000, 10001, 20000, 23000, 23001, Date.now(), Date.UTC(2500, 0, 1), Date.UTC(2500, 0, 1) + 1]) out[ts] = (await admin.fetchTopicOffsetsByTimestamp(t, ts))[0].offset
    console.log(label, j(out))
  }
  // Kafka: first offset whose timestamp >= target, scanning in offset order
  await q('before compaction')
  console.log('compact', j(await compact(t, 0)))
  await sleep(500)
  await q('after compaction ')
  console.log('offsets', j(await admin.fetchTopicOffsets(t)))
  await p.disconnect(); await admin.disconnect()
})
