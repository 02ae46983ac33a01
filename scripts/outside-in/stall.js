// Does a big compaction stall the broker? A probe sends a 1-record produce every 100 ms to another topic and records the
// worst latency while POST /v1/compact cleans a large compacted topic. A group member with sessionTimeout 6s must not be kicked.
const { kafka, run, uniq, j, sleep, compact, CompressionTypes, stat } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const big = uniq('big'), probe = uniq('probe')
  const N = Number(process.env.N || 200000)
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: big, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: String(1 << 20) }, { name: 'min.cleanable.dirty.ratio', value: '0.99' }] }, { topic: probe }] })
  const p = kafka.producer(); await p.connect()
  for (let i = 0; i < N; i += 5000) await p.send({ topic: big, compression: CompressionTypes.GZIP, messages: [...Array(5000).keys()].map(k => ({ key: 'key' + ((i + k) % 5000), value: 'value-' + (i + k) + '-' + 'p'.repeat(40) })) })
  console.log('produced', N, j(await admin.fetchTopicOffsets(big)))
  const g = uniq('sg')
  const c = kafka.consumer({ groupId: g, sessionTimeout: 6000, heartbeatInterval: 500 }); await c.connect(); await c.subscribe({ topic: probe })
  const joins = []; c.on(c.events.GROUP_JOIN, e => joins.push(Date.now()))
  let consumed = 0; await c.run({ eachMessage: async () => { consumed++ } })
  await sleep(3000)
  let stop = false, worst = 0, sent = 0
  const probing = (async () => { while (!stop) { const t0 = Date.now(); await p.send({ topic: probe, messages: [{ value: 'x' }] }); worst = Math.max(worst, Date.now() - t0); sent++; await sleep(100) } })()
  const t0 = Date.now()
  const r = await compact(big, 0)
  const body = JSON.parse(r[1]), res = stat(body.results[0])
  console.log('compaction', r[0], res.status, 'engine', body.engine, 'read', res.records_read, 'written', res.records_written, 'took', Date.now() - t0, 'ms')
  await sleep(2000); stop = true; await probing
  await sleep(2000)
  console.log('probe: sent', sent, 'consumed', consumed, 'worst produce latency', worst, 'ms; group joins', joins.length, '(1 = never kicked)')
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
