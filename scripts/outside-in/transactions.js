// Transactions with KafkaJS (issue 15): a transactional producer that reads an input topic record by record,
// writes each one transformed to an output topic and commits the input offset with sendOffsets, every third
// transaction aborted (its input redone by the next one); then a read_committed consumer (KafkaJS default) and a
// readUncommitted one read the output, the group's offsets are fetched, and a second producer with the same
// transactionalId fences the first (Kafka: the zombie's send/commit fails with PRODUCER_FENCED /
// INVALID_PRODUCER_EPOCH, none of its records visible to read_committed).
const { kafka, run, uniq, j, err } = require('./common')
const N = Number(process.env.KOMPAKT_TXNS || 60)
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const input = uniq('txin'), output = uniq('txout'), group = uniq('txg'), tid = uniq('txid')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: input, numPartitions: 1 }, { topic: output, numPartitions: 1 }] })
  const plain = kafka.producer(); await plain.connect()
  const inputs = N - Math.floor(N / 3) + 1
  await plain.send({ topic: input, messages: [...Array(inputs).keys()].map(i => ({ value: 'in-' + i })) })
  await plain.disconnect()
  const consumer = kafka.consumer({ groupId: uniq('txread') })
  await consumer.connect(); await consumer.subscribe({ topic: input, fromBeginning: true })
  const queue = []
  await consumer.run({ autoCommit: false, eachMessage: async ({ message }) => { queue.push(message) } })
  while (queue.length < inputs) await new Promise(r => setTimeout(r, 50))
  await consumer.disconnect()

  const producer = kafka.producer({ transactionalId: tid, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let next = 0, committed = 0, aborted = 0
  const t0 = Date.now()
  for (let t = 0; t < N; t++) {
    const m = queue[next]
    const txn = await producer.transaction()
    await txn.send({ topic: output, messages: [{ value: m.value.toString() + '|t' + t }] })
    await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic: input, partitions: [{ partition: 0, offset: String(Number(m.offset) + 1) }] }] })
    if (t % 3 === 2) { await txn.abort(); aborted++ } else { await txn.commit(); committed++; next++ }
  }
  console.log('transactions', N, 'committed', committed, 'aborted', aborted, 'in', Date.now() - t0, 'ms')

  const read = async readUncommitted => {
    const c = kafka.consumer({ groupId: uniq('txcheck'), readUncommitted })
    await c.connect(); await c.subscribe({ topic: output, fromBeginning: true })
    const got = []
    const want = readUncommitted ? N : committed
    await new Promise(async res => {
      const to = setTimeout(res, 15000)
      await c.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()); if (got.length >= want) { clearTimeout(to); setTimeout(res, 500) } } })
    })
    await c.disconnect()
    return got
  }
  const rc = await read(false), ru = await read(true)
  const rcInputs = rc.map(v => v.split('|t')[0])
  const rcAborted = rc.filter(v => Number(v.split('|t')[1]) % 3 === 2)
  const unique = new Set(rcInputs)
  console.log('read_committed records', rc.length, '(expect', committed + ')', 'distinct inputs', unique.size,
    'from aborted txns', rcAborted.length, '(expect 0)')
  console.log('read_uncommitted records', ru.length, '(expect', N + ')')
  console.log('exactly once', rc.length === committed && unique.size === committed && rcAborted.length === 0 ? 'yes' : 'NO')
  console.log('group offsets', j(await admin.fetchOffsets({ groupId: group, topics: [input] })), '(expect offset', committed + ')')

  // zombie fencing
  const zombie = kafka.producer({ transactionalId: tid, idempotent: true, maxInFlightRequests: 1 })
  await zombie.connect()
  // the same id as `producer`, whose epoch the new one's InitProducerId bumps: `producer` is now the zombie
  const fresh = await zombie.transaction()
  await fresh.send({ topic: output, messages: [{ value: 'fresh' }] }); await fresh.commit()
  const fenced = await producer.transaction().then(async txn => {
    try { await txn.send({ topic: output, messages: [{ value: 'zombie' }] }); await txn.commit(); return 'zombie committed (WRONG)' } catch (e) { return err(e) }
  }, e => err(e))
  console.log('zombie send/commit ->', fenced)
  const after = await read(false)
  console.log('read_committed after fencing: zombie records', after.filter(v => v === 'zombie').length, '(expect 0), fresh', after.filter(v => v === 'fresh').length, '(expect 1)')
  await zombie.disconnect(); await producer.disconnect().catch(() => {}); await admin.disconnect()
})
