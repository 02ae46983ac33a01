// Run when the broker is close to its open-files limit (see many-partitions.js): produce (acks=-1) to a topic with tiny
// segments so every few records roll a segment, and consume it. What does the client get when a roll cannot open files,
// and is everything that was acknowledged readable afterwards?
const { kafka, run, uniq, j, err, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = process.env.TOPIC || uniq('emf')
  try { await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 1, configEntries: [{ name: 'segment.bytes', value: '200' }] }] }); console.log('created', t) } catch (e) { console.log('create', err(e), j(e.errors && e.errors.map(x => x.type))) }
  const p = kafka.producer({ retry: { retries: 1 } }); await p.connect()
  const acked = []; const errs = {}
  for (let i = 0; i < 300; i++) { try { const r = await p.send({ topic: t, acks: -1, messages: [{ key: 'k' + i, value: 'v' + i }] }); acked.push(Number(r[0].baseOffset)) } catch (e) { errs[e.type || e.message] = (errs[e.type || e.message] || 0) + 1 } }
  console.log('acked', acked.length, 'errors', j(errs), 'offsets', j(await admin.fetchTopicOffsets(t).catch(e => err(e))))
  const c = kafka.consumer({ groupId: uniq('emg') }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  const got = new Set(); let crash = null; c.on(c.events.CRASH, e => { crash = e.payload.error.message })
  await new Promise(async res => { const to = setTimeout(res, 10000); await c.run({ eachMessage: async ({ message }) => { got.add(Number(message.offset)) } }) })
  console.log('read back', got.size, 'acked-but-unreadable', acked.filter(o => !got.has(o)).length, crash ? 'crash ' + crash : '')
  await c.disconnect(); await p.disconnect(); await admin.disconnect()
})
