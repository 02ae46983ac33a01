// A topic with many partitions (N, default 2000): create, produce one record to each, read them back; the broker's open
// file descriptors are printed by the caller (ls /proc/PID/fd | wc -l) before and after.
const { kafka, run, uniq, j, err, sleep } = require('./common')
run(async () => {
  const N = Number(process.env.N || 2000)
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('many')
  const t0 = Date.now()
  try { await admin.createTopics({ waitForLeaders: true, timeout: 60000, topics: [{ topic: t, numPartitions: N }] }) } catch (e) { console.log('create', err(e)) }
  console.log('created', N, 'partitions in', Date.now() - t0, 'ms')
  const p = kafka.producer(); await p.connect()
  const t1 = Date.now()
  try { await p.send({ topic: t, messages: [...Array(N).keys()].map(i => ({ key: 'k' + i, value: 'v' + i, partition: i })) }) } catch (e) { console.log('send', err(e)) }
  console.log('produced', N, 'in', Date.now() - t1, 'ms', 'offsets sum', (await admin.fetchTopicOffsets(t)).reduce((a, x) => a + Number(x.high), 0))
  const c = kafka.consumer({ groupId: uniq('mg'), maxWaitTimeInMs: 500 }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  let n = 0; const t2 = Date.now()
  await new Promise(async res => { const to = setTimeout(res, 60000); await c.run({ partitionsConsumedConcurrently: 4, eachMessage: async () => { if (++n === N) { clearTimeout(to); res() } } }) })
  console.log('consumed', n, 'in', Date.now() - t2, 'ms')
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
