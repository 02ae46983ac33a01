// End-to-end latency: a consumer long-polling (maxWaitTimeInMs 5000, minBytes 1) must get a record as soon as it is
// appended (Kafka completes the delayed fetch on append), not at the end of maxWait. Also with 2 partitions, one idle.
const { kafka, run, uniq, j, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('lat')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 2 }] })
  const p = kafka.producer(); await p.connect()
  const c = kafka.consumer({ groupId: uniq('lg'), maxWaitTimeInMs: 5000, minBytes: 1 }); await c.connect(); await c.subscribe({ topic: t })
  const lat = []
  await c.run({ eachMessage: async ({ message }) => { lat.push(Date.now() - Number(message.value.toString())) } })
  await sleep(5000)
  for (let i = 0; i < 10; i++) { await sleep(700 + Math.random() * 600); await p.send({ topic: t, messages: [{ value: String(Date.now()), partition: 0 }] }) }
  await sleep(6000)
  console.log('latencies ms', j(lat), 'max', Math.max(...lat))
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
