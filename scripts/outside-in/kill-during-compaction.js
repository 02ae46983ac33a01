// SIGKILL (or SIGTERM) the broker while a compaction of a big topic runs, restart it, and check the topic holds exactly the
// latest value of every key (nothing lost, nothing resurrected) and that no temporary cleaner files are left.
// KOMPAKT_STOP_CMD / KOMPAKT_START_CMD as in restart.js; DELAY = ms after POST /v1/compact before the kill.
const { kafka, run, uniq, j, err, sleep, compact, CompressionTypes } = require('./common')
const { execSync } = require('child_process')
const fs = require('fs')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('kdc'), N = Number(process.env.N || 100000), K = 3000
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'segment.bytes', value: String(128 << 10) }, { name: 'min.cleanable.dirty.ratio', value: '0.99' }, { name: 'delete.retention.ms', value: '0' }] }] })
  const p = kafka.producer(); await p.connect()
  const latest = new Map()
  for (let i = 0; i < N; i += 5000) {
    const msgs = [...Array(5000).keys()].map(k => { const n = i + k, key = 'key' + (n * 7919 % K); const v = n % 97 === 0 ? null : 'v' + n; latest.set(key, v); return { key, value: v } })
    await p.send({ topic: t, compression: CompressionTypes.GZIP, messages: msgs })
  }
  await p.send({ topic: t, messages: [{ key: 'END', value: 'END' }] }); latest.set('END', 'END')
  await p.disconnect()
  const t0 = Date.now()
  compact(t, 0).then(r => console.log('compact answered', r[0], 'after', Date.now() - t0), e => console.log('compact request ended:', e.message, 'after', Date.now() - t0))
  const dir = (process.env.KOMPAKT_DATA || '/tmp/hunt-data') + '/' + t + '-0'
  if (process.env.KILL_ON_FILE) {  // wait until the cleaner's temporary files appear (e.g. "cleaned" or "swap")
    for (let i = 0; i < 1200 && !fs.readdirSync(dir).some(f => f.includes(process.env.KILL_ON_FILE)); i++) await sleep(100)
    console.log('saw', fs.readdirSync(dir).filter(f => f.includes(process.env.KILL_ON_FILE)).join(' '))
    await sleep(Number(process.env.DELAY || 0))
  } else await sleep(Number(process.env.DELAY || 4000))
  console.log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh KILL').toString().trim(), 'at', Date.now() - t0)
  console.log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
  console.log('files', fs.readdirSync(dir).filter(f => !/^\d{20}\.(log|index|timeindex)$/.test(f)).join(' '))
  const c = kafka.consumer({ groupId: uniq('kdg'), maxBytes: 20 << 20 }); await c.connect(); await c.subscribe({ topic: t, fromBeginning: true })
  const got = new Map(); let n = 0, last = -1, nonInc = 0
  await new Promise(async res => { const to = setTimeout(res, 60000); await c.run({ eachMessage: async ({ message }) => { n++; const o = Number(message.offset); if (o <= last) nonInc++; last = o; got.set(message.key.toString(), message.value && message.value.toString()); if (message.key.toString() === 'END') { clearTimeout(to); res() } } }) })
  await c.disconnect()
  let wrong = 0; for (const [k, v] of latest) { const g = got.get(k); if (!(g === v || (v === null && g === undefined))) { wrong++; if (wrong < 4) console.log('MISMATCH', k, v, g) } }
  console.log('read', n, 'records,', got.size, 'keys; wrong latest values', wrong, 'non-increasing offsets', nonInc)
  await admin.disconnect()
})
