// Delete a topic while a group consumes it and a producer writes it; the same group also consumes a second topic.
// Expected (Kafka): the group's offsets for the deleted topic vanish, the other topic's offsets and consumption go on,
// producing to the deleted topic fails with UNKNOWN_TOPIC_OR_PARTITION (no auto-create from the admin's delete),
// and recreating the topic starts from offset 0 with no old data.
const { kafka, run, uniq, j, err, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('dl'), keep = uniq('dk'), g = uniq('dg')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 2 }, { topic: keep, numPartitions: 1 }] })
  const p = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 2 } }); await p.connect()
  let stop = false, sendErr = new Map()
  const producing = (async () => { let i = 0; while (!stop) { for (const topic of [t, keep]) { try { await p.send({ topic, messages: [{ key: 'k' + i, value: topic + ':' + i }] }) } catch (e) { const k = topic === t ? 'deleted' : 'kept'; sendErr.set(k + ' ' + (e.type || e.message), (sendErr.get(k + ' ' + (e.type || e.message)) || 0) + 1) } } i++; await sleep(50) } })()
  const c = kafka.consumer({ groupId: g, heartbeatInterval: 1000 })
  const got = { [t]: 0, [keep]: 0 }; const crashes = []
  c.on(c.events.CRASH, e => crashes.push(e.payload.error.message))
  await c.connect(); await c.subscribe({ topics: [t, keep], fromBeginning: true })
  await c.run({ autoCommitInterval: 300, eachMessage: async ({ topic }) => { got[topic]++ } })
  await sleep(4000)
  console.log('before delete: consumed', j(got), 'offsets', j(await admin.fetchOffsets({ groupId: g, topics: [t, keep] })))
  await admin.deleteTopics({ topics: [t] })
  const keptBefore = got[keep]
  await sleep(6000)
  console.log('after delete: consumed', j(got), 'kept topic still consumed:', got[keep] > keptBefore, 'crashes', j(crashes), 'send errors', j([...sendErr]))
  console.log('group offsets', j(await admin.fetchOffsets({ groupId: g })))
  console.log('listTopics has deleted?', (await admin.listTopics()).includes(t))
  stop = true; await producing
  await c.disconnect()
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 1 }] })
  console.log('recreated offsets', j(await admin.fetchTopicOffsets(t)), 'group offsets for it', j(await admin.fetchOffsets({ groupId: g, topics: [t] })))
  await p.disconnect(); await admin.disconnect()
})
