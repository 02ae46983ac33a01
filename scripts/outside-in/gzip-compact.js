// Compaction of gzip batches that are partly superseded: KafkaJS must read exactly the survivors, also when it starts
// (seek) in the middle of a rewritten batch.
const { kafka, run, uniq, j, sleep, compact, CompressionTypes, stat } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('gzc')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '600' }, { name: 'min.cleanable.dirty.ratio', value: '0.99' }, { name: 'delete.retention.ms', value: '0' }] }] })
  const p = kafka.producer(); await p.connect()
  const latest = new Map()
  for (let b = 0; b < 12; b++) {
    const msgs = [...Array(8).keys()].map(i => ({ key: 'k' + ((b * 3 + i) % 10), value: (b === 6 && i === 2) ? null : `b${b}i${i}`, headers: { h: String(b) } }))
    msgs.forEach(m => latest.set(m.key, m.value))
    await p.send({ topic: t, compression: CompressionTypes.GZIP, messages: msgs })
  }
  await p.send({ topic: t, messages: [{ key: 'end', value: 'end' }] }); latest.set('end', 'end')
  for (let i = 0; i < 2; i++) { const r = await compact(t, 0); const x = stat(JSON.parse(r[1]).results[0]); console.log('compact', x.status, x.records_read, '->', x.records_written, 'tombstones removed', x.tombstones_removed) }
  const read = async seek => {
    const c = kafka.consumer({ groupId: uniq('gzr') }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
    const got = []
    await new Promise(async res => { const to = setTimeout(res, 8000); await c.run({ eachMessage: async ({ message }) => { got.push([Number(message.offset), message.key.toString(), message.value && message.value.toString(), message.headers.h && message.headers.h.toString()]); if (message.key.toString() === 'end') { clearTimeout(to); res() } } }); if (seek !== undefined) c.seek({ topic: t, partition: 0, offset: String(seek) }) })
    await c.disconnect(); return got
  }
  const all = await read()
  const m = new Map(); all.forEach(([o, k, v]) => m.set(k, v))
  const wrong = [...latest].filter(([k, v]) => m.get(k) !== v && !(v === null && !m.has(k)))
  console.log('from beginning:', all.length, 'records, offsets', all.map(x => x[0]).join(','), 'mismatches', j(wrong))
  console.log('increasing?', all.every((x, i) => i === 0 || x[0] > all[i - 1][0]))
  const mid = all[Math.floor(all.length / 2)][0] + 1
  const fromMid = await read(mid)
  console.log('seek', mid, '->', fromMid.map(x => x[0]).join(','), 'expected', all.filter(x => x[0] >= mid).map(x => x[0]).join(','))
  await p.disconnect(); await admin.disconnect()
})
