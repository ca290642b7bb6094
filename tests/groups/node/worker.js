// Group consumer harness for kafkajs (its own group code: eager rebalances, the round-robin
// assigner, classic protocol only, no static membership).
//
//     node worker.js CONFIG_JSON
//
// CONFIG_JSON is the one every harness takes (tests/groups/README.md). kafkajs has no revoke
// callback: its REBALANCING event (emitted once fetching has stopped, before it rejoins) is
// reported as the revocation of everything owned, and a batch of a partition the member does
// not own at that moment is neither reported nor resolved. Per batch: each record is reported,
// then its next offset is committed; a failed commit stays pending and is retried with the next
// batch or at the revocation. SIGTERM: stop, commit what is pending, disconnect (leaves the
// group).
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const cfg = JSON.parse(process.argv[2] || 'null')
if (!cfg) {
  process.stderr.write('usage: node worker.js CONFIG_JSON\n')
  process.exit(2)
}
if (cfg.strategy !== 'roundrobin' || cfg.instance_id) {
  process.stderr.write(`kafkajs: unsupported ${cfg.strategy} / static membership\n`)
  process.exit(2)
}

const out = fs.openSync(cfg.report, 'a')
function report(ev, fields = {}) {
  fields.ev = ev
  fields.member = cfg.member
  fields.ts = Date.now()
  // one synchronous write per line: a SIGKILL loses at most the line being written
  fs.writeSync(out, JSON.stringify(fields) + '\n')
}

const kafka = new Kafka({
  clientId: cfg.member,
  brokers: [cfg.bootstrap],
  logLevel: process.env.GROUPS_DEBUG ? logLevel.INFO : logLevel.WARN,
  retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 1000 },
})
const consumer = kafka.consumer({
  groupId: cfg.group,
  sessionTimeout: cfg.session_timeout_ms,
  heartbeatInterval: cfg.heartbeat_interval_ms,
  metadataMaxAge: cfg.metadata_max_age_ms,
  maxWaitTimeInMs: 200,
})

const owned = new Set()
const pending = new Map() // partition -> next offset to commit

async function commit(parts) {
  const offs = []
  for (const [p, o] of pending) {
    if (!parts || parts.includes(p)) offs.push({ topic: cfg.topic, partition: p, offset: String(o) })
  }
  if (offs.length === 0) return
  try {
    await consumer.commitOffsets(offs)
  } catch (e) {
    // e.g. a rebalance in progress: the offsets stay pending and are committed later
    report('commit_failed', { error: String(e) })
    return
  }
  const done = {}
  for (const o of offs) {
    done[String(o.partition)] = Number(o.offset)
    if (pending.get(o.partition) === Number(o.offset)) pending.delete(o.partition)
  }
  report('commit', { gen: null, offsets: done })
}

function revokeAll() {
  if (owned.size === 0) return
  const parts = [...owned].sort((a, b) => a - b)
  owned.clear()
  // kafkajs has stopped fetching: drop what could not be committed, the next owner re-reads it
  for (const p of parts) pending.delete(p)
  report('revoked', { partitions: parts })
}

consumer.on(consumer.events.REBALANCING, () => revokeAll())
consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
  // a rejoin that did not come through REBALANCING (e.g. an unknown member id) also replaces
  // the whole assignment
  revokeAll()
  const parts = (payload.memberAssignment[cfg.topic] || []).slice().sort((a, b) => a - b)
  for (const p of parts) owned.add(p)
  if (parts.length > 0) report('assigned', { gen: null, partitions: parts })
})
consumer.on(consumer.events.CRASH, ({ payload }) => {
  process.stderr.write(`kafkajs consumer crashed: ${payload.error}\n`)
})

let stopping = false
async function stop() {
  if (stopping) return
  stopping = true
  report('closing')
  try {
    await consumer.stop()
    await commit(null)
    await consumer.disconnect()
  } finally {
    report('closed')
    process.exit(0)
  }
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)

async function main() {
  await consumer.connect()
  await consumer.subscribe({ topics: [cfg.topic], fromBeginning: true })
  report('start')
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      const p = batch.partition
      if (stopping || !owned.has(p)) return
      for (const m of batch.messages) {
        report('record', {
          gen: null, partition: p, offset: Number(m.offset),
          key: m.key === null ? null : m.key.toString(),
        })
        pending.set(p, Number(m.offset) + 1)
        resolveOffset(m.offset)
      }
      await commit([p])
      await heartbeat()
    },
  })
}

main().catch(e => {
  process.stderr.write(`kafkajs harness failed: ${e.stack || e}\n`)
  process.exit(1)
})
