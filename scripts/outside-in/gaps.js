// Offsets with gaps after compaction: seek into a gap, a committed offset inside a removed range, a whole segment removed;
// then an idempotent producer whose earlier batches were all compacted away keeps producing across a broker restart
// (Kafka's cleaner keeps each producer's last batch so its sequence state survives).
const { kafka, run, uniq, j, err, sleep, compact, stat } = require('./common')
const { execSync } = require('child_process')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('gap'), g = uniq('gg')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '500' }, { name: 'min.cleanable.dirty.ratio', value: '0.99' }] }] })
  const ip = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 20, initialRetryTime: 300 } }); await ip.connect()
  // offsets 0..29: key 'a' repeated (all but the last get removed), then 30..39 distinct keys, 40: 'a' again
  for (let i = 0; i < 30; i++) await ip.send({ topic: t, messages: [{ key: 'a', value: 'a' + i }] })
  for (let i = 0; i < 10; i++) await ip.send({ topic: t, messages: [{ key: 'k' + i, value: 'k' + i }] })
  await ip.send({ topic: t, messages: [{ key: 'a', value: 'a-last' }] })
  await ip.send({ topic: t, messages: [{ key: 'z', value: 'z' }] })
  await admin.setOffsets({ groupId: g, topic: t, partitions: [{ partition: 0, offset: '12' }] })
  const r = stat(JSON.parse((await compact(t, 0))[1]).results[0])
  console.log('compact', r.status, r.records_read, '->', r.records_written, 'segments', r.segments_before, '->', r.segments_after)
  const readFrom = async (label, start) => {
    const c = kafka.consumer({ groupId: start === undefined ? g : uniq('gs') }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
    const got = []
    await new Promise(async res => { const to = setTimeout(res, 8000); await c.run({ eachMessage: async ({ message }) => { got.push(Number(message.offset) + ':' + message.value.toString()); if (message.value.toString() === 'z') { clearTimeout(to); res() } } }); if (start !== undefined) c.seek({ topic: t, partition: 0, offset: String(start) }) })
    await c.disconnect()
    console.log(label, got.join(' '))
  }
  await readFrom('group committed 12 (in removed range)')
  await readFrom('seek 5 (gap)', 5)
  await readFrom('seek 0', 0)
  await readFrom('seek 35', 35)
  console.log('offsets', j(await admin.fetchTopicOffsets(t)))
  if (process.env.KOMPAKT_RESTART !== '0') {
    console.log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh TERM').toString().trim())
    console.log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
  }
  for (let i = 0; i < 3; i++) { try { console.log('idempotent send after compaction+restart', j(await ip.send({ topic: t, messages: [{ key: 'a', value: 'after' + i }] }))) } catch (e) { console.log('idempotent send after compaction+restart => ERROR', err(e)) } }
  await readFrom('seek 40 after', 40)
  await ip.disconnect(); await admin.disconnect()
})
