// One consumer group member, run as a child process by groups.js: prints JSON lines of what it consumed and its assignments.
const { kafka, j } = require('./common')
const [topic, groupId, name, sessionTimeout] = process.argv.slice(2)
const c = kafka.consumer({ groupId, sessionTimeout: Number(sessionTimeout || 10000), heartbeatInterval: 1000, rebalanceTimeout: 20000 })
const out = o => process.stdout.write(j({ name, ...o }) + '\n')
c.on(c.events.GROUP_JOIN, e => out({ ev: 'join', gen: e.payload.groupId && e.payload.memberAssignment && e.payload.memberAssignment[topic] }))
c.on(c.events.CRASH, e => out({ ev: 'crash', err: e.payload.error && e.payload.error.message }))
;(async () => {
  await c.connect()
  await c.subscribe({ topic, fromBeginning: true })
  await c.run({ autoCommitInterval: 500, eachMessage: async ({ partition, message }) => { out({ ev: 'msg', p: partition, o: message.offset, k: message.key.toString(), v: message.value && message.value.toString() }) } })
  process.on('SIGTERM', async () => { await c.disconnect(); out({ ev: 'left' }); process.exit(0) })
})().catch(e => { out({ ev: 'fatal', err: e.message }); process.exit(1) })
