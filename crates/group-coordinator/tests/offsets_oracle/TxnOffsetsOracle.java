// The oracle of tests/txn_offsets_diff.rs: scenarios mixing TxnOffsetCommit, end-transaction
// markers, plain commits, fetches with and without require_stable, deletions and expiry,
// run against Kafka 4.4's own GroupCoordinatorShard as its runtime would drive it: a
// transactional commit's records replayed with the producer id, a marker replayed with
// replayEndTransactionMarker and taking one offset of the log. Built with OffsetsOracle.java,
// whose helpers it shares.
//
// stdin:  {"config": {prop: value}, "start_ms": ms, "scenarios": [[op, ...], ...]}
// stdout: [[{"response": ..., "records": [...]}, ...], ...]

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.message.OffsetFetchRequestData;
import org.apache.kafka.common.message.OffsetFetchResponseData;
import org.apache.kafka.common.message.TxnOffsetCommitRequestData;
import org.apache.kafka.common.message.TxnOffsetCommitResponseData;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.TransactionResult;
import org.apache.kafka.common.utils.internals.LogContext;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.common.runtime.CoordinatorResult;
import org.apache.kafka.coordinator.common.runtime.KRaftCoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.GroupConfigManager;
import org.apache.kafka.coordinator.group.GroupCoordinatorConfig;
import org.apache.kafka.coordinator.group.GroupCoordinatorShard;
import org.apache.kafka.coordinator.group.metrics.GroupCoordinatorMetrics;
import org.apache.kafka.coordinator.group.modern.share.ShareGroupConfig;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.timeline.SnapshotRegistry;

public class TxnOffsetsOracle {
    static final short PRODUCER_EPOCH = 0;

    public static void main(String[] args) throws Exception {
        JsonNode input = OffsetsOracle.M.readTree(System.in);
        Map<String, Object> props = new HashMap<>();
        input.get("config").fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
        GroupCoordinatorConfig config = GroupCoordinatorConfig.fromProps(props);
        ArrayNode out = OffsetsOracle.M.createArrayNode();
        for (JsonNode scenario : input.get("scenarios")) {
            out.add(run(config, props, scenario, input.get("start_ms").asLong()));
        }
        System.out.println(OffsetsOracle.M.writeValueAsString(out));
    }

    static ArrayNode run(GroupCoordinatorConfig config, Map<String, Object> props, JsonNode ops, long startMs) throws Exception {
        OffsetsOracle.ManualTime time = new OffsetsOracle.ManualTime(startMs);
        LogContext log = new LogContext();
        SnapshotRegistry registry = new SnapshotRegistry(log);
        GroupConfigManager gcm = new GroupConfigManager(config, ShareGroupConfig.fromProps(props));
        GroupCoordinatorShard.Builder builder = new GroupCoordinatorShard.Builder(config, gcm);
        builder.withAuthorizerPlugin(Optional.empty());
        GroupCoordinatorShard shard = builder
            .withLogContext(log)
            .withTime(time)
            .withTimer(new OffsetsOracle.NoTimer())
            .withExecutor(new OffsetsOracle.NoExecutor())
            .withCoordinatorMetrics(new GroupCoordinatorMetrics())
            .withTopicPartition(new TopicPartition("__consumer_offsets", 0))
            .withSnapshotRegistry(registry)
            .build();
        shard.onLoaded(new KRaftCoordinatorMetadataImage(MetadataImage.EMPTY));
        long[] next = {0};
        ArrayNode results = OffsetsOracle.M.createArrayNode();
        for (JsonNode op : ops) {
            ArrayNode records = OffsetsOracle.M.createArrayNode();
            JsonNode response;
            String kind = op.get("op").asText();
            switch (kind) {
                case "advance":
                    time.now += op.get("ms").asLong();
                    response = NullNode.getInstance();
                    break;
                case "commit":
                    response = OffsetsOracle.commit(shard, op, records, next);
                    break;
                case "txn_commit":
                    response = txnCommit(shard, op, records, next);
                    break;
                case "end_txn": {
                    long pid = op.get("pid").asLong();
                    boolean commit = op.get("commit").asBoolean();
                    shard.replayEndTransactionMarker(pid, PRODUCER_EPOCH,
                        commit ? TransactionResult.COMMIT : TransactionResult.ABORT);
                    next[0]++;
                    records.add(OffsetsOracle.M.createArrayNode().add("marker").add(pid).add(commit));
                    response = NullNode.getInstance();
                    break;
                }
                case "fetch":
                    response = fetch(shard, registry, op, next);
                    break;
                case "delete_offsets":
                    response = OffsetsOracle.deleteOffsets(shard, op, records, next);
                    break;
                case "delete_groups":
                    response = OffsetsOracle.deleteGroups(shard, op, records, next);
                    break;
                case "expire": {
                    CoordinatorResult<Void, CoordinatorRecord> r = shard.cleanupGroupMetadata();
                    OffsetsOracle.apply(shard, r.records(), records, next);
                    response = NullNode.getInstance();
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown op " + kind);
            }
            ObjectNode result = OffsetsOracle.M.createObjectNode();
            result.set("response", response);
            result.set("records", records);
            results.add(result);
        }
        return results;
    }

    static JsonNode txnCommit(GroupCoordinatorShard shard, JsonNode op, ArrayNode records, long[] next) {
        long pid = op.get("pid").asLong();
        TxnOffsetCommitRequestData req = new TxnOffsetCommitRequestData()
            .setTransactionalId("tx-" + pid)
            .setGroupId(op.get("group").asText())
            .setProducerId(pid)
            .setProducerEpoch(PRODUCER_EPOCH)
            .setGenerationIdOrMemberEpoch(op.get("generation").asInt())
            .setMemberId(op.get("member").asText())
            .setGroupInstanceId(null);
        for (JsonNode t : op.get("topics")) {
            TxnOffsetCommitRequestData.TxnOffsetCommitRequestTopic topic =
                new TxnOffsetCommitRequestData.TxnOffsetCommitRequestTopic().setName(t.get(0).asText());
            for (JsonNode p : t.get(1)) {
                topic.partitions().add(new TxnOffsetCommitRequestData.TxnOffsetCommitRequestPartition()
                    .setPartitionIndex(p.get(0).asInt())
                    .setCommittedOffset(p.get(1).asLong())
                    .setCommittedLeaderEpoch(p.get(2).asInt())
                    .setCommittedMetadata(p.get(3).isNull() ? null : p.get(3).asText()));
            }
            req.topics().add(topic);
        }
        ArrayNode answer = OffsetsOracle.M.createArrayNode();
        try {
            CoordinatorResult<TxnOffsetCommitResponseData, CoordinatorRecord> r =
                shard.commitTransactionalOffset(OffsetsOracle.context(op.get("v").asInt()), req);
            for (CoordinatorRecord rec : r.records()) {
                shard.replay(next[0]++, pid, PRODUCER_EPOCH, rec);
                records.add(OffsetsOracle.canonical(rec));
            }
            for (TxnOffsetCommitResponseData.TxnOffsetCommitResponseTopic t : r.response().topics())
                for (TxnOffsetCommitResponseData.TxnOffsetCommitResponsePartition p : t.partitions())
                    answer.add(OffsetsOracle.M.createArrayNode().add(t.name()).add(p.partitionIndex()).add(p.errorCode()));
        } catch (ApiException e) {
            short code = Errors.forException(e).code();
            for (TxnOffsetCommitRequestData.TxnOffsetCommitRequestTopic t : req.topics())
                for (TxnOffsetCommitRequestData.TxnOffsetCommitRequestPartition p : t.partitions())
                    answer.add(OffsetsOracle.M.createArrayNode().add(t.name()).add(p.partitionIndex()).add(code));
        }
        return answer;
    }

    // A require_stable fetch reads the latest state (Long.MAX_VALUE, as the service's write
    // does); another reads as of the committed offset, here everything written so far.
    static JsonNode fetch(GroupCoordinatorShard shard, SnapshotRegistry registry, JsonNode op, long[] next) {
        OffsetFetchRequestData.OffsetFetchRequestGroup req = new OffsetFetchRequestData.OffsetFetchRequestGroup()
            .setGroupId(op.get("group").asText())
            .setMemberEpoch(-1);
        if (op.get("topics").isNull()) {
            req.setTopics(null);
        } else {
            List<OffsetFetchRequestData.OffsetFetchRequestTopics> topics = new ArrayList<>();
            for (JsonNode t : op.get("topics")) {
                List<Integer> ps = new ArrayList<>();
                for (JsonNode p : t.get(1)) ps.add(p.asInt());
                topics.add(new OffsetFetchRequestData.OffsetFetchRequestTopics()
                    .setName(t.get(0).asText()).setPartitionIndexes(ps));
            }
            req.setTopics(topics);
        }
        long at = Long.MAX_VALUE;
        if (!op.get("stable").asBoolean()) {
            registry.idempotentCreateSnapshot(next[0]);
            at = next[0];
        }
        ArrayNode parts = OffsetsOracle.M.createArrayNode();
        short code = 0;
        try {
            OffsetFetchResponseData.OffsetFetchResponseGroup g = shard.fetchOffsets(req, at);
            code = g.errorCode();
            for (OffsetFetchResponseData.OffsetFetchResponseTopics t : g.topics())
                for (OffsetFetchResponseData.OffsetFetchResponsePartitions p : t.partitions())
                    parts.add(OffsetsOracle.M.createArrayNode().add(t.name()).add(p.partitionIndex())
                        .add(p.committedOffset()).add(p.committedLeaderEpoch())
                        .add(p.metadata()).add(p.errorCode()));
        } catch (ApiException e) {
            code = Errors.forException(e).code();
        }
        return OffsetsOracle.M.createArrayNode().add(code).add(parts);
    }
}
