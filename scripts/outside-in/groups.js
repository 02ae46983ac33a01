// Consumer group of 3 child processes: rebalances on join, clean leave (SIGTERM), crash (SIGKILL -> session timeout).
// Checks every produced record is consumed at least once and committed offsets end at the log end; other group untouched.
const { kafka, run, uniq, j, sleep } = require('./common')
const { spawn } = require('child_process')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const t = uniq('grp'), g = uniq('g'), other = uniq('og')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t, numPartitions: 6 }] })
  const p = kafka.producer(); await p.connect()
  let sent = 0
  const produce = async n => { for (let i = 0; i < n; i++) { await p.send({ topic: t, messages: [{ key: 'k' + sent, value: String(sent), partition: sent % 6 }] }); sent++ } }
  // another group with committed offsets, which nothing here should touch
  await admin.setOffsets({ groupId: other, topic: t, partitions: [{ partition: 0, offset: '0' }, { partition: 3, offset: '0' }] })
  const seen = new Map(), members = {}, events = []
  const start = (name, st) => {
    const ch = spawn(process.execPath, [__dirname + '/group-member.js', t, g, name, st || '10000'], { env: process.env })
    let buf = ''
    ch.stdout.on('data', d => { buf += d; let i; while ((i = buf.indexOf('\n')) >= 0) { const line = buf.slice(0, i); buf = buf.slice(i + 1); const o = JSON.parse(line); if (o.ev === 'msg') seen.set(o.v, (seen.get(o.v) || 0) + 1); else { events.push(o); console.log(Date.now() % 100000, j(o)) } } })
    ch.stderr.on('data', d => process.stderr.write(name + ': ' + d))
    members[name] = ch
  }
  const desc = async () => { const d = (await admin.describeGroups([g])).groups[0]; return [d.state, d.members.map(m => m.clientId + ':' + m.memberId.slice(-6))] }
  start('A'); await sleep(4000); await produce(30)
  start('B'); start('C'); await sleep(8000); await produce(30)
  console.log('describe', j(await desc()))
  members.B.kill('SIGTERM'); await sleep(5000); await produce(30)
  console.log('after B left', j(await desc()))
  const tk = Date.now(); members.C.kill('SIGKILL'); await produce(30)
  // wait until all consumed
  for (let i = 0; i < 60 && seen.size < sent; i++) await sleep(500)
  console.log('after C killed: all consumed after', Date.now() - tk, 'ms;', seen.size, '/', sent, 'dups', [...seen.values()].filter(x => x > 1).length)
  console.log('describe', j(await desc()))
  await sleep(2000)
  const offs = await admin.fetchOffsets({ groupId: g, topics: [t] })
  console.log('committed', j(offs[0].partitions.map(x => [x.partition, x.offset])), 'log end', j((await admin.fetchTopicOffsets(t)).map(x => [x.partition, x.high])))
  members.A.kill('SIGTERM'); await sleep(3000)
  console.log('final describe', j(await desc()))
  console.log('other group offsets (expect p0=0,p3=0 only)', j((await admin.fetchOffsets({ groupId: other, topics: [t] }))[0].partitions))
  console.log('listGroups', j((await admin.listGroups()).groups.filter(x => x.groupId === g || x.groupId === other)))
  await p.disconnect(); await admin.disconnect()
})
