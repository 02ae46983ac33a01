// message.timestamp.type=LogAppendTime (plain and gzip batches): the produce response carries logAppendTime and consumers
// see the broker's time, not the producer's; message.timestamp.difference.max.ms / before / after refuse out-of-range
// CreateTime timestamps with INVALID_TIMESTAMP (Kafka LogValidator).
const { kafka, run, uniq, j, err, CompressionTypes, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const step = async (name, f) => { try { console.log(name, '->', j(await f())) } catch (e) { console.log(name, '=> ERROR', err(e)) } }
  const t = uniq('lat'), d = uniq('tsd')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] }] })
  await step('create topic with message.timestamp.difference.max.ms=60000, before=60000, after=60000', () => admin.createTopics({ waitForLeaders: true, topics: [{ topic: d, configEntries: [{ name: 'message.timestamp.difference.max.ms', value: '60000' }] }] }))
  const d2 = uniq('tsba')
  await step('create topic with before/after.max.ms=60000', () => admin.createTopics({ waitForLeaders: true, topics: [{ topic: d2, configEntries: [{ name: 'message.timestamp.before.max.ms', value: '60000' }, { name: 'message.timestamp.after.max.ms', value: '60000' }] }] }))
  const p = kafka.producer(); await p.connect()
  const before = Date.now()
  await step('LogAppendTime plain', () => p.send({ topic: t, messages: [{ key: 'a', value: '1', timestamp: '1000' }, { key: 'b', value: '2', timestamp: '2000' }] }))
  await step('LogAppendTime gzip', () => p.send({ topic: t, compression: CompressionTypes.GZIP, messages: [{ key: 'c', value: '3', timestamp: '1000' }, { key: 'd', value: '4', timestamp: '2000' }] }))
  await step('diff.max 60000: ts=1000', () => p.send({ topic: d, messages: [{ key: 'a', value: '1', timestamp: '1000' }] }))
  await step('diff.max 60000: ts=now', () => p.send({ topic: d, messages: [{ key: 'a', value: '1' }] }))
  await step('before.max 60000: ts=1000', () => p.send({ topic: d2, messages: [{ key: 'a', value: '1', timestamp: '1000' }] }))
  await step('after.max 60000: ts=year 2500', () => p.send({ topic: d2, messages: [{ key: 'a', value: '1', timestamp: String(Date.UTC(2500, 0, 1)) }] }))
  const c = kafka.consumer({ groupId: uniq('latg') }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  const got = []
  await new Promise(async res => { const to = setTimeout(res, 8000); await c.run({ eachMessage: async ({ message }) => { got.push([message.key.toString(), message.timestamp]); if (got.length === 4) { clearTimeout(to); res() } } }) })
  console.log('consumed LogAppendTime timestamps (expect all >=', before, ')', j(got))
  console.log('fetchTopicOffsetsByTimestamp(t, 1500) (expect 0: every record has append time)', j(await admin.fetchTopicOffsetsByTimestamp(t, 1500)))
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
