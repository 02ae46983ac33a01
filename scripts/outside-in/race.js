// Races against a running compaction (slow with the Spark engine): delete + recreate the topic under the same name,
// deleteTopicRecords, produce. After it, the new topic must hold only its own records, and the log must be readable.
const { kafka, run, uniq, j, err, sleep, compact, partitions, CompressionTypes } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('race')
  const mode = process.argv[2] || 'recreate'
  const N = Number(process.env.N || 100000)
  // mode 'retention': records stamped so that they pass retention.ms=RET ms a few seconds into the clean
  // (needs the broker's log.retention.check.interval.ms small, e.g. 1000)
  const RET = Number(process.env.RET || 60000), stampAge = RET - Number(process.env.EXPIRE_IN || 8000)
  const cfg = [{ name: 'cleanup.policy', value: mode === 'deleterecords' || mode === 'retention' ? 'compact,delete' : 'compact' }, ...(mode === 'retention' ? [{ name: 'retention.ms', value: String(RET) }] : []), { name: 'segment.bytes', value: String(256 << 10) }, { name: 'min.cleanable.dirty.ratio', value: '0.99' }]
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: cfg }] })
  const p = kafka.producer(); await p.connect()
  for (let i = 0; i < N; i += 5000) await p.send({ topic: t, compression: CompressionTypes.GZIP, messages: [...Array(5000).keys()].map(k => ({ key: 'old' + ((i + k) % 3000), value: 'OLD-' + (i + k), ...(mode === 'retention' && i + k < N - 5000 ? { timestamp: String(Date.now() - stampAge) } : {}) })) })
  console.log('old topic', j(await admin.fetchTopicOffsets(t)))
  const t0 = Date.now()
  const compaction = compact(t, 0).then(r => { console.log('compaction finished after', Date.now() - t0, 'ms', r[0], r[1].slice(0, 300).replace(/\s+/g, ' ')); return r })
  await sleep(Number(process.env.DELAY || 300))
  if (mode === 'recreate') {
    await admin.deleteTopics({ topics: [t] }); console.log('deleted at', Date.now() - t0)
    await sleep(200)
    await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: cfg }] }); console.log('recreated at', Date.now() - t0)
    await p.send({ topic: t, messages: [{ key: 'new1', value: 'NEW-1' }, { key: 'new2', value: 'NEW-2' }] })
  } else if (mode === 'deleterecords') {
    await admin.fetchTopicMetadata({ topics: [t] })
    await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 0, offset: String(N - 10) }] }); console.log('deleteRecords to', N - 10, 'at', Date.now() - t0)
    await p.send({ topic: t, messages: [{ key: 'new1', value: 'NEW-1' }] })
  } else if (mode === 'alter') {
    await admin.alterConfigs({ resources: [{ type: 2, name: t, configEntries: [{ name: 'cleanup.policy', value: 'delete' }] }] }); console.log('policy -> delete at', Date.now() - t0)
  }
  await compaction
  await sleep(1000)
  console.log('offsets now', j(await admin.fetchTopicOffsets(t)))
  const c = kafka.consumer({ groupId: uniq('rc'), maxBytes: 10 << 20 }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  const vals = []
  const end = Number((await admin.fetchTopicOffsets(t))[0].high)
  let crash = null; c.on(c.events.CRASH, e => { crash = e.payload.error.message })
  await new Promise(async res => { const to = setTimeout(res, 20000); await c.run({ eachMessage: async ({ message }) => { vals.push(message.value && message.value.toString()); if (Number(message.offset) >= end - 1) { clearTimeout(to); res() } } }) })
  await c.disconnect()
  console.log('read back', vals.length, 'records; OLD ones', vals.filter(v => v && v.startsWith('OLD')).length, 'NEW ones', vals.filter(v => v && v.startsWith('NEW')).length, crash ? 'consumer crash: ' + crash : '')
  const pv = await partitions(); console.log('admin view', j((pv.partitions || pv).filter(x => x.topic === t).map(x => [x.log_start_offset, x.log_end_offset, x.segments, x.uncleanable_reason])))
  await p.disconnect(); await admin.disconnect()
})
