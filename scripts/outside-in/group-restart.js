// A stable 2-member group across a broker restart (SIGTERM + start on the same data dir). Kafka persists the group's
// metadata (members, generation, assignment) in __consumer_offsets and reloads it, so members that keep heartbeating
// within their session timeout keep their generation and assignment: no rebalance. Prints joins and generations.
const { kafka, run, uniq, j, sleep } = require('./common')
const { execSync } = require('child_process')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('gr'), g = uniq('grg')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 4 }] })
  const log = (...a) => console.log(((Date.now() / 1000) % 1000).toFixed(1), ...a)
  const cs = []
  for (const n of ['A', 'B']) {
    const c = kafka.consumer({ groupId: g, sessionTimeout: 30000, heartbeatInterval: 1000, retry: { retries: 20, initialRetryTime: 300, maxRetryTime: 2000 } })
    c.on(c.events.GROUP_JOIN, e => log(n, 'JOIN generation', e.payload.groupId, j(e.payload.memberAssignment), 'leader', e.payload.isLeader))
    c.on(c.events.CRASH, e => log(n, 'CRASH', e.payload.error.message))
    await c.connect(); await c.subscribe({ topic: t }); await c.run({ eachMessage: async () => {} }); cs.push(c)
  }
  await sleep(8000)
  log('before restart', j((await admin.describeGroups([g])).groups.map(x => [x.state, x.members.length])))
  log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh TERM').toString().trim())
  log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
  await sleep(15000)
  log('after restart', j((await admin.describeGroups([g])).groups.map(x => [x.state, x.members.length])))
  for (const c of cs) await c.disconnect()
  await admin.disconnect()
})
