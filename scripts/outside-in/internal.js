// What a client can do to __consumer_offsets, where kompakt keeps group offsets. Kafka refuses appends to internal topics
// from clients (INVALID_TOPIC_EXCEPTION), deleting them, and deleteRecords on them; then a group's offsets must survive a restart.
const { kafka, run, uniq, j, err, sleep } = require('./common')
const { execSync } = require('child_process')
run(async () => {
  const admin = kafka.admin(); await admin.connect()
  const step = async (name, f) => { try { console.log(name, '->', j(await f()).slice(0, 300)) } catch (e) { console.log(name, '=> ERROR', err(e), e.errors ? j(e.errors) : '') } }
  const t = uniq('int'), g = uniq('ig')
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: t }] })
  await admin.setOffsets({ groupId: g, topic: t, partitions: [{ partition: 0, offset: '7' }] })
  const md = await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] })
  console.log('__consumer_offsets partitions', md.topics[0].partitions.length)
  const p = kafka.producer({ retry: { retries: 1 } }); await p.connect()
  await step('produce garbage to __consumer_offsets (all partitions)', async () => { const out = []; for (let i = 0; i < md.topics[0].partitions.length; i++) out.push(...await p.send({ topic: '__consumer_offsets', messages: [{ key: Buffer.from([0, 1, 2]), value: 'garbage', partition: i }] })); return out.length })
  await step('describeConfigs __consumer_offsets', async () => (await admin.describeConfigs({ resources: [{ type: 2, name: '__consumer_offsets', configNames: ['cleanup.policy', 'segment.bytes'] }] })).resources[0].configEntries.map(c => [c.configName, c.configValue]))
  await step('alterConfigs __consumer_offsets cleanup.policy=delete retention.ms=1', () => admin.alterConfigs({ resources: [{ type: 2, name: '__consumer_offsets', configEntries: [{ name: 'cleanup.policy', value: 'delete' }, { name: 'retention.ms', value: '1' }] }] }))
  await step('deleteTopicRecords __consumer_offsets', async () => { const out = []; for (let i = 0; i < md.topics[0].partitions.length; i++) out.push(await admin.deleteTopicRecords({ topic: '__consumer_offsets', partitions: [{ partition: i, offset: '-1' }] }).then(() => 'ok', e => e.message)); return out })
  await step('createPartitions __consumer_offsets', () => admin.createPartitions({ topicPartitions: [{ topic: '__consumer_offsets', count: md.topics[0].partitions.length + 1 }] }))
  await step('fetchOffsets g', async () => (await admin.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions)
  if (process.env.KOMPAKT_RESTART !== '0') {
    console.log(execSync(process.env.KOMPAKT_STOP_CMD || '/tmp/hunt/stop.sh TERM').toString().trim())
    console.log(execSync(process.env.KOMPAKT_START_CMD || '/tmp/hunt/start.sh local').toString().trim())
    await sleep(1000)
  }
  await step('fetchOffsets g after restart (expect 7)', async () => (await admin.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions)
  await step('deleteTopics __consumer_offsets', () => admin.deleteTopics({ topics: ['__consumer_offsets'] }))
  await step('listTopics', async () => (await admin.listTopics()).filter(x => x.startsWith('__')))
  await step('fetchOffsets g after delete attempt', async () => (await admin.fetchOffsets({ groupId: g, topics: [t] }))[0].partitions)
  await p.disconnect(); await admin.disconnect()
})
