// A member stuck in eachMessage longer than its rebalanceTimeout while another member joins: Kafka removes the stuck member
// when the rebalance times out, completes the rebalance without it, and rejects its late commit (ILLEGAL_GENERATION /
// UNKNOWN_MEMBER_ID) so it cannot overwrite the new owner's offsets.
const { kafka, run, uniq, j, err, sleep } = require('./common')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('slow'), g = uniq('sg')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 2 }] })
  const p = kafka.producer(); await p.connect()
  await p.send({ topic: t, messages: [...Array(20).keys()].map(i => ({ key: 'k' + i, value: String(i), partition: i % 2 })) })
  const log = (...a) => console.log(((Date.now() / 1000) % 1000).toFixed(1), ...a)
  const A = kafka.consumer({ groupId: g, sessionTimeout: 30000, rebalanceTimeout: 6000, heartbeatInterval: 1000 })
  const B = kafka.consumer({ groupId: g, sessionTimeout: 30000, rebalanceTimeout: 6000, heartbeatInterval: 1000 })
  for (const [n, c] of [['A', A], ['B', B]]) {
    c.on(c.events.GROUP_JOIN, e => log(n, 'joined gen', e.payload.memberId.slice(-6), j(e.payload.memberAssignment)))
    c.on(c.events.CRASH, e => log(n, 'CRASH', e.payload.error.message))
    c.on(c.events.COMMIT_OFFSETS, e => log(n, 'committed', j(e.payload.topics[0].partitions)))
  }
  await A.connect(); await A.subscribe({ topic: t, fromBeginning: true })
  let stuck = true
  await A.run({ autoCommit: false, eachMessage: async ({ partition, message }) => {
    if (stuck && partition === 0 && message.offset === '0') {
      log('A stuck on p0/0 for 15 s'); await sleep(15000); stuck = false; log('A unstuck, committing p0=10 and p1=10')
      try { await A.commitOffsets([{ topic: t, partition: 0, offset: '10' }, { topic: t, partition: 1, offset: '10' }]); log('A late commit accepted') } catch (e) { log('A late commit refused:', err(e)) }
    }
  } })
  await sleep(2000)
  await B.connect(); await B.subscribe({ topic: t, fromBeginning: true })
  let bseen = 0
  await B.run({ autoCommit: false, eachMessage: async ({ partition, message }) => { bseen++; await B.commitOffsets([{ topic: t, partition, offset: String(Number(message.offset) + 1) }]) } })
  for (let i = 0; i < 10; i++) { await sleep(2000); const d = (await admin.describeGroups([g])).groups[0]; log('group', d.state, 'members', d.members.length, 'B consumed', bseen) }
  log('offsets', j((await admin.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions.map(x => [x.partition, x.offset])))
  await A.disconnect(); await B.disconnect(); await p.disconnect(); await admin.disconnect()
})
