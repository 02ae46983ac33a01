// Time retention with odd producer timestamps (retention.ms=10000, broker log.retention.check.interval.ms=2000).
// Kafka: a segment is deleted when its LARGEST timestamp is older than retention.ms; the active segment is rolled
// when every segment is deletable. So: topic A (all records ts=0) is emptied; topic B whose middle segment holds a
// year-2500 record keeps that segment and everything after it; compact,delete topic C behaves like A.
const { kafka, run, uniq, j, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const A = uniq('retA'), B = uniq('retB'), C = uniq('retC'), K = uniq('retKeep')
  // message.timestamp.after.max.ms lifted: Kafka 4 refuses CreateTimes over 1 h ahead by default (KIP-1030)
  const cfg = x => [{ name: 'retention.ms', value: '10000' }, { name: 'segment.bytes', value: '200' }, { name: 'message.timestamp.after.max.ms', value: '9223372036854775807' }, ...(x || [])]
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: A, configEntries: cfg() }, { topic: B, configEntries: cfg() }, { topic: C, configEntries: cfg([{ name: 'cleanup.policy', value: 'compact,delete' }]) }, { topic: K, configEntries: [{ name: 'segment.bytes', value: '200' }] }] })
  const p = kafka.producer(); await p.connect()
  for (let i = 0; i < 10; i++) await p.send({ topic: A, messages: [{ key: 'k' + i, value: 'old', timestamp: '0' }] })
  for (let i = 0; i < 10; i++) await p.send({ topic: C, messages: [{ key: 'k' + i, value: 'old', timestamp: '1000' }] })
  for (let i = 0; i < 10; i++) await p.send({ topic: K, messages: [{ key: 'k' + i, value: 'old', timestamp: '0' }] })
  for (let i = 0; i < 10; i++) await p.send({ topic: B, messages: [{ key: 'k' + i, value: 'x', timestamp: i === 5 ? String(Date.UTC(2500, 0, 1)) : '0' }] })
  console.log('t=0', j({ A: await admin.fetchTopicOffsets(A), B: await admin.fetchTopicOffsets(B), C: await admin.fetchTopicOffsets(C), K: await admin.fetchTopicOffsets(K) }))
  await sleep(8000)
  const lo = async t => (await admin.fetchTopicOffsets(t)).map(x => x.low + '..' + x.high).join()
  console.log('t=8s  A', await lo(A), 'B', await lo(B), 'C', await lo(C), 'K (no retention.ms override, 7 days)', await lo(K))
  console.log('expected (Kafka): A 10..10, B 5..10 (segment holding the year-2500 record and later kept), C 10..10, K 10..10 (7 days is also long past for ts=0)')
  await p.disconnect(); await admin.disconnect()
})
