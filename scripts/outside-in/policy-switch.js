// A delete topic with unkeyed records is switched to compact (Kafka's cleaner drops records without a key and carries on),
// then compacted; deleteTopicRecords on a compact-only topic is refused with POLICY_VIOLATION (UnifiedLog.deleteRecords).
const { kafka, run, uniq, j, err, sleep, compact, stat } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('sw')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'segment.bytes', value: '300' }] }] })
  const p = kafka.producer(); await p.connect()
  for (let i = 0; i < 20; i++) await p.send({ topic: t, messages: [{ key: i % 3 === 0 ? null : 'k' + (i % 4), value: 'v' + i }] })
  await admin.alterConfigs({ resources: [{ type: 2, name: t, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: '300' }] }] })
  try { await p.send({ topic: t, messages: [{ value: 'nokey-after-switch' }] }); console.log('null key after switch accepted?!') } catch (e) { console.log('null key after switch refused:', e.type) }
  const r = stat(JSON.parse((await compact(t, 0))[1]).results[0])
  console.log('compact', r.status, r.records_read, '->', r.records_written, 'unkeyed_removed', r.unkeyed_removed, r.reason || '')
  await admin.fetchTopicMetadata({ topics: [t] })
  try { await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 0, offset: '5' }] }); console.log('deleteRecords on compact topic accepted?!') } catch (e) { console.log('deleteRecords on compact topic:', e.cause ? j(e.cause.partitions.map(x => x.error.type)) : err(e)) }
  const c = kafka.consumer({ groupId: uniq('swg') }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  const got = []
  await new Promise(async res => { const to = setTimeout(res, 6000); await c.run({ eachMessage: async ({ message }) => { got.push(Number(message.offset) + ':' + (message.key ? message.key.toString() : 'NULL')) } }) })
  console.log('read after compaction', got.join(' '))
  const pv = await (await fetch(require('./common').ADMIN_URL + '/v1/partitions')).json()
  console.log('uncleanable?', j(pv.partitions.filter(x => x.topic === t).map(x => x.uncleanable_reason)))
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
