// Fetch sizing (KIP-74: a batch bigger than maxBytesPerPartition is still returned), per-topic max.message.bytes,
// acks=0 errors (Kafka closes the connection) and the producer recovering afterwards.
const { kafka, run, uniq, j, err, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('fs'), c = uniq('fsc')
  const step = async (name, f) => { try { console.log(name, '->', j(await f())) } catch (e) { console.log(name, '=> ERROR', err(e)) } }
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '200000' }] }, { topic: c, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }] })
  const p = kafka.producer(); await p.connect()
  await step('150KB into max.message.bytes=200000', () => p.send({ topic: t, messages: [{ key: 'a', value: 'x'.repeat(150000), partition: 0 }] }))
  await step('250KB into max.message.bytes=200000', () => p.send({ topic: t, messages: [{ key: 'a', value: 'x'.repeat(250000), partition: 0 }] }))
  await step('small', () => p.send({ topic: t, messages: [...Array(5).keys()].map(i => ({ key: 'k' + i, value: 'y' + i, partition: i % 2 })) }))
  await step('acks=0 null key into compacted', () => p.send({ topic: c, acks: 0, messages: [{ value: 'nokey' }] }))
  await step('acks=-1 right after, same producer', () => p.send({ topic: c, acks: -1, messages: [{ key: 'k', value: 'v' }] }))
  await step('acks=0 too large', () => p.send({ topic: t, acks: 0, messages: [{ key: 'a', value: 'x'.repeat(250000), partition: 1 }] }))
  await step('acks=1 right after', () => p.send({ topic: t, acks: 1, messages: [{ key: 'b', value: 'z', partition: 1 }] }))
  await step('offsets', () => admin.fetchTopicOffsets(t))
  const cons = kafka.consumer({ groupId: uniq('fsg'), maxBytesPerPartition: 1000, maxBytes: 2000 }); await cons.connect(); await cons.subscribe({ topic: t, fromBeginning: true })
  const got = []
  await new Promise(async res => { const to = setTimeout(res, 10000); await cons.run({ eachMessage: async ({ partition, message }) => { got.push([partition, Number(message.offset), message.value.length]); if (got.length >= 7) { clearTimeout(to); res() } } }) })
  console.log('consumed with maxBytesPerPartition=1000', j(got))
  await cons.disconnect(); await p.disconnect(); await admin.disconnect()
})
