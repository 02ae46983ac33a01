// Compaction while a group consumes (eachBatch, manual commits), then a fresh consumer reads the compacted topic from the
// beginning (offset gaps) and must see exactly the latest value per key; tombstones kept; other topic untouched.
const { kafka, run, uniq, j, sleep, compact, partitions, stat } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('cmp'), other = uniq('cmpo')
  await admin.createTopics({ waitForLeaders: true, topics: [
    { topic: t, numPartitions: 2, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '2048' }, { name: 'min.cleanable.dirty.ratio', value: '0.01' }, { name: 'delete.retention.ms', value: '86400000' }] },
    { topic: other, numPartitions: 1, configEntries: [{ name: 'segment.bytes', value: '2048' }] }] })
  const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 }); await p.connect()
  const latest = new Map()
  let n = 0
  const produce = async rounds => {
    for (let r = 0; r < rounds; r++) {
      const msgs = []
      for (let i = 0; i < 20; i++) { const k = 'key' + ((n * 7) % 25); const v = (n % 13 === 0) ? null : 'val' + n; msgs.push({ key: k, value: v }); latest.set(k, v); n++ }
      await p.send({ topic: t, messages: msgs })
      await p.send({ topic: other, messages: msgs.map(m => ({ key: m.key, value: m.value === null ? 'x' : m.value })) })
    }
  }
  await produce(20)
  const otherBefore = await admin.fetchTopicOffsets(other)
  // a consumer with eachBatch and manual commit, consuming slowly while we compact
  const g = uniq('cg')
  const c = kafka.consumer({ groupId: g, maxBytesPerPartition: 300 }); await c.connect()
  await c.subscribe({ topic: t, fromBeginning: true })
  const got = new Map(), seenOffsets = []
  let lastErr = null
  c.on(c.events.CRASH, e => { lastErr = e.payload.error.message; console.log('CRASH', lastErr) })
  await c.run({ autoCommit: false, eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary }) => {
    for (const m of batch.messages) { got.set(batch.partition + '/' + m.key.toString(), m.value && m.value.toString()); seenOffsets.push([batch.partition, Number(m.offset)]); resolveOffset(m.offset) }
    await c.commitOffsets([{ topic: t, partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) }])
    await heartbeat(); await sleep(150)
  } })
  await sleep(1500)
  console.log('compact while consuming', j((await compact(t)).map(x => typeof x === 'string' ? JSON.parse(x).results.map(r => [r.partition, r.status, stat(r).records_read, stat(r).records_written]) : x)))
  await produce(10)
  console.log('compact again', j((await compact(t)).map(x => typeof x === 'string' ? JSON.parse(x).results.map(r => [r.partition, r.status, stat(r).records_read, stat(r).records_written]) : x)))
  for (let i = 0; i < 80; i++) { const o = await admin.fetchOffsets({ groupId: g, topics: [t] }); const e = await admin.fetchTopicOffsets(t); if (o[0].partitions.every(x => e.find(y => y.partition === x.partition).high === x.offset)) break; await sleep(500) }
  await c.disconnect()
  // monotonic offsets per partition in what the consumer saw?
  const back = seenOffsets.filter((x, i) => seenOffsets.slice(0, i).some(y => y[0] === x[0] && y[1] >= x[1]))
  console.log('consumer1 records', seenOffsets.length, 'non-increasing offsets seen', back.length, lastErr ? 'err ' + lastErr : '')
  // fresh read from beginning
  const c2 = kafka.consumer({ groupId: uniq('cg2') }); await c2.connect()
  await c2.subscribe({ topic: t, fromBeginning: true })
  const final = new Map(); let cnt = 0
  const ends = await admin.fetchTopicOffsets(t)
  const lastOff = {}
  await new Promise(async res => { const to = setTimeout(res, 15000); await c2.run({ eachMessage: async ({ partition, message }) => { cnt++; final.set(message.key.toString(), message.value && message.value.toString()); lastOff[partition] = Number(message.offset); if (ends.every(e => lastOff[e.partition] === Number(e.high) - 1)) { clearTimeout(to); res() } } }) })
  await c2.disconnect()
  // Kafka's default partitioner: key->partition fixed, so per-key latest is the last write
  let wrong = 0
  for (const [k, v] of latest) if (final.get(k) !== v) { wrong++; if (wrong < 5) console.log('MISMATCH', k, 'expected', v, 'got', final.get(k)) }
  console.log('fresh read', cnt, 'records,', final.size, 'keys, expected', latest.size, 'mismatches', wrong)
  console.log('partitions view', j((await partitions()).partitions ? (await partitions()).partitions.filter(x => x.topic === t || x.topic === other) : (await partitions())))
  const otherAfter = await admin.fetchTopicOffsets(other)
  console.log('other topic before/after', j(otherBefore), j(otherAfter))
  await p.disconnect(); await admin.disconnect()
})
