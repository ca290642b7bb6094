// The oracle of tests/offsets_diff.rs: runs scenarios of offset requests against Kafka 4.4's
// own GroupCoordinatorShard (kafka-group-coordinator-4.4.0.jar), one fresh shard per
// scenario, replaying the records each request returns as the runtime would, and prints each
// answer and its records in a canonical JSON form the Rust test compares with Strom's.
//
// stdin:  {"config": {prop: value}, "scenarios": [[op, ...], ...]}
// stdout: [[{"response": ..., "records": [...]}, ...], ...]

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.NullNode;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.message.DeleteGroupsResponseData;
import org.apache.kafka.common.message.OffsetCommitRequestData;
import org.apache.kafka.common.message.OffsetCommitResponseData;
import org.apache.kafka.common.message.OffsetDeleteRequestData;
import org.apache.kafka.common.message.OffsetDeleteResponseData;
import org.apache.kafka.common.message.OffsetFetchRequestData;
import org.apache.kafka.common.message.OffsetFetchResponseData;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.internals.LogContext;
import org.apache.kafka.coordinator.common.runtime.CoordinatorExecutor;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.common.runtime.CoordinatorResult;
import org.apache.kafka.coordinator.common.runtime.CoordinatorTimer;
import org.apache.kafka.coordinator.common.runtime.KRaftCoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.GroupConfigManager;
import org.apache.kafka.coordinator.group.GroupCoordinatorConfig;
import org.apache.kafka.coordinator.group.GroupCoordinatorShard;
import org.apache.kafka.coordinator.group.generated.GroupMetadataKey;
import org.apache.kafka.coordinator.group.generated.OffsetCommitKey;
import org.apache.kafka.coordinator.group.generated.OffsetCommitValue;
import org.apache.kafka.coordinator.group.metrics.GroupCoordinatorMetrics;
import org.apache.kafka.coordinator.group.modern.share.ShareGroupConfig;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.timeline.SnapshotRegistry;

public class OffsetsOracle {
    static final ObjectMapper M = new ObjectMapper();

    static final class ManualTime implements Time {
        long now;
        ManualTime(long now) { this.now = now; }
        public long milliseconds() { return now; }
        public long nanoseconds() { return now * 1_000_000L; }
        public void sleep(long ms) { now += ms; }
        public void waitObject(Object o, Supplier<Boolean> c, long d) { }
    }

    // Timers are not run: the scenario triggers expiry itself.
    static final class NoTimer implements CoordinatorTimer<CoordinatorRecord> {
        public void schedule(String k, long d, TimeUnit u, boolean r, TimeoutOperation<CoordinatorRecord> op) { }
        public void schedule(String k, long d, TimeUnit u, boolean r, long b, TimeoutOperation<CoordinatorRecord> op) { }
        public void scheduleIfAbsent(String k, long d, TimeUnit u, boolean r, TimeoutOperation<CoordinatorRecord> op) { }
        public void cancel(String k) { }
        public boolean isScheduled(String k) { return false; }
    }

    static final class NoExecutor implements CoordinatorExecutor<CoordinatorRecord> {
        public <R> boolean schedule(String k, TaskRunnable<R> t, TaskOperation<CoordinatorRecord, R> op) { return false; }
        public boolean isScheduled(String k) { return false; }
        public void cancel(String k) { }
    }

    static AuthorizableRequestContext context(int version) {
        return new AuthorizableRequestContext() {
            public String listenerName() { return "PLAINTEXT"; }
            public SecurityProtocol securityProtocol() { return SecurityProtocol.PLAINTEXT; }
            public KafkaPrincipal principal() { return KafkaPrincipal.ANONYMOUS; }
            public InetAddress clientAddress() { return InetAddress.getLoopbackAddress(); }
            public int requestType() { return 8; }
            public int requestVersion() { return version; }
            public String clientId() { return "oracle"; }
            public int correlationId() { return 0; }
        };
    }

    public static void main(String[] args) throws Exception {
        JsonNode input = M.readTree(System.in);
        Map<String, Object> props = new HashMap<>();
        input.get("config").fields().forEachRemaining(e -> props.put(e.getKey(), e.getValue().asText()));
        GroupCoordinatorConfig config = GroupCoordinatorConfig.fromProps(props);
        ArrayNode out = M.createArrayNode();
        for (JsonNode scenario : input.get("scenarios")) {
            out.add(run(config, props, scenario, input.get("start_ms").asLong()));
        }
        System.out.println(M.writeValueAsString(out));
    }

    static ArrayNode run(GroupCoordinatorConfig config, Map<String, Object> props, JsonNode ops, long startMs) throws Exception {
        ManualTime time = new ManualTime(startMs);
        LogContext log = new LogContext();
        SnapshotRegistry registry = new SnapshotRegistry(log);
        GroupConfigManager gcm = new GroupConfigManager(config, ShareGroupConfig.fromProps(props));
        GroupCoordinatorShard.Builder builder = new GroupCoordinatorShard.Builder(config, gcm);
        builder.withAuthorizerPlugin(Optional.empty());
        GroupCoordinatorShard shard = builder
            .withLogContext(log)
            .withTime(time)
            .withTimer(new NoTimer())
            .withExecutor(new NoExecutor())
            .withCoordinatorMetrics(new GroupCoordinatorMetrics())
            .withTopicPartition(new TopicPartition("__consumer_offsets", 0))
            .withSnapshotRegistry(registry)
            .build();
        shard.onLoaded(new KRaftCoordinatorMetadataImage(MetadataImage.EMPTY));
        long[] nextOffset = {0};
        ArrayNode results = M.createArrayNode();
        for (JsonNode op : ops) {
            ArrayNode records = M.createArrayNode();
            JsonNode response;
            String kind = op.get("op").asText();
            switch (kind) {
                case "advance":
                    time.now += op.get("ms").asLong();
                    response = NullNode.getInstance();
                    break;
                case "commit":
                    response = commit(shard, op, records, nextOffset);
                    break;
                case "fetch":
                    response = fetch(shard, op);
                    break;
                case "delete_offsets":
                    response = deleteOffsets(shard, op, records, nextOffset);
                    break;
                case "delete_groups":
                    response = deleteGroups(shard, op, records, nextOffset);
                    break;
                case "expire": {
                    CoordinatorResult<Void, CoordinatorRecord> r = shard.cleanupGroupMetadata();
                    apply(shard, r.records(), records, nextOffset);
                    response = NullNode.getInstance();
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown op " + kind);
            }
            com.fasterxml.jackson.databind.node.ObjectNode result = M.createObjectNode();
            result.set("response", response);
            result.set("records", records);
            results.add(result);
        }
        return results;
    }

    static void apply(GroupCoordinatorShard shard, List<CoordinatorRecord> recs, ArrayNode out, long[] next) {
        for (CoordinatorRecord r : recs) {
            shard.replay(next[0]++, -1L, (short) -1, r);
            out.add(canonical(r));
        }
    }

    static JsonNode canonical(CoordinatorRecord r) {
        ArrayNode a = M.createArrayNode();
        if (r.key() instanceof OffsetCommitKey) {
            OffsetCommitKey k = (OffsetCommitKey) r.key();
            a.add("oc").add(k.group()).add(k.topic()).add(k.partition());
            if (r.value() == null) {
                a.addNull();
            } else {
                short v = r.value().version();
                OffsetCommitValue val = (OffsetCommitValue) r.value().message();
                // As written at that version: the leader epoch exists from v3, the expire
                // timestamp only in v1.
                a.add(M.createArrayNode().add(v).add(val.offset())
                    .add(v >= 3 ? val.leaderEpoch() : -1).add(val.metadata())
                    .add(val.commitTimestamp()).add(v == 1 ? val.expireTimestamp() : -1));
            }
        } else if (r.key() instanceof GroupMetadataKey) {
            a.add("gm").add(((GroupMetadataKey) r.key()).group()).add(r.value() == null);
        } else {
            a.add("other").add(r.key().getClass().getSimpleName());
        }
        return a;
    }

    static JsonNode commit(GroupCoordinatorShard shard, JsonNode op, ArrayNode records, long[] next) {
        OffsetCommitRequestData req = new OffsetCommitRequestData()
            .setGroupId(op.get("group").asText())
            .setGenerationIdOrMemberEpoch(-1)
            .setMemberId("")
            .setRetentionTimeMs(op.get("retention").asLong());
        for (JsonNode t : op.get("topics")) {
            OffsetCommitRequestData.OffsetCommitRequestTopic topic =
                new OffsetCommitRequestData.OffsetCommitRequestTopic().setName(t.get(0).asText());
            for (JsonNode p : t.get(1)) {
                topic.partitions().add(new OffsetCommitRequestData.OffsetCommitRequestPartition()
                    .setPartitionIndex(p.get(0).asInt())
                    .setCommittedOffset(p.get(1).asLong())
                    .setCommittedLeaderEpoch(p.get(2).asInt())
                    .setCommittedMetadata(p.get(3).isNull() ? null : p.get(3).asText()));
            }
            req.topics().add(topic);
        }
        ArrayNode answer = M.createArrayNode();
        try {
            CoordinatorResult<OffsetCommitResponseData, CoordinatorRecord> r =
                shard.commitOffset(context(op.get("v").asInt()), req);
            apply(shard, r.records(), records, next);
            for (OffsetCommitResponseData.OffsetCommitResponseTopic t : r.response().topics())
                for (OffsetCommitResponseData.OffsetCommitResponsePartition p : t.partitions())
                    answer.add(M.createArrayNode().add(t.name()).add(p.partitionIndex()).add(p.errorCode()));
        } catch (ApiException e) {
            // The service answers every partition with the error.
            short code = Errors.forException(e).code();
            for (OffsetCommitRequestData.OffsetCommitRequestTopic t : req.topics())
                for (OffsetCommitRequestData.OffsetCommitRequestPartition p : t.partitions())
                    answer.add(M.createArrayNode().add(t.name()).add(p.partitionIndex()).add(code));
        }
        return answer;
    }

    static JsonNode fetch(GroupCoordinatorShard shard, JsonNode op) {
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
        ArrayNode parts = M.createArrayNode();
        short code = 0;
        try {
            OffsetFetchResponseData.OffsetFetchResponseGroup g = shard.fetchOffsets(req, Long.MAX_VALUE);
            code = g.errorCode();
            for (OffsetFetchResponseData.OffsetFetchResponseTopics t : g.topics())
                for (OffsetFetchResponseData.OffsetFetchResponsePartitions p : t.partitions())
                    parts.add(M.createArrayNode().add(t.name()).add(p.partitionIndex())
                        .add(p.committedOffset()).add(p.committedLeaderEpoch())
                        .add(p.metadata()).add(p.errorCode()));
        } catch (ApiException e) {
            code = Errors.forException(e).code();
        }
        return M.createArrayNode().add(code).add(parts);
    }

    static JsonNode deleteOffsets(GroupCoordinatorShard shard, JsonNode op, ArrayNode records, long[] next) {
        OffsetDeleteRequestData req = new OffsetDeleteRequestData().setGroupId(op.get("group").asText());
        for (JsonNode t : op.get("topics")) {
            OffsetDeleteRequestData.OffsetDeleteRequestTopic topic =
                new OffsetDeleteRequestData.OffsetDeleteRequestTopic().setName(t.get(0).asText());
            for (JsonNode p : t.get(1))
                topic.partitions().add(new OffsetDeleteRequestData.OffsetDeleteRequestPartition().setPartitionIndex(p.asInt()));
            req.topics().add(topic);
        }
        ArrayNode parts = M.createArrayNode();
        short code = 0;
        try {
            CoordinatorResult<OffsetDeleteResponseData, CoordinatorRecord> r = shard.deleteOffsets(context(0), req);
            apply(shard, r.records(), records, next);
            code = r.response().errorCode();
            for (OffsetDeleteResponseData.OffsetDeleteResponseTopic t : r.response().topics())
                for (OffsetDeleteResponseData.OffsetDeleteResponsePartition p : t.partitions())
                    parts.add(M.createArrayNode().add(t.name()).add(p.partitionIndex()).add(p.errorCode()));
        } catch (ApiException e) {
            code = Errors.forException(e).code();
        }
        return M.createArrayNode().add(code).add(parts);
    }

    static JsonNode deleteGroups(GroupCoordinatorShard shard, JsonNode op, ArrayNode records, long[] next) {
        List<String> groups = new ArrayList<>();
        for (JsonNode g : op.get("groups")) groups.add(g.asText());
        CoordinatorResult<DeleteGroupsResponseData.DeletableGroupResultCollection, CoordinatorRecord> r =
            shard.deleteGroups(context(2), groups);
        apply(shard, r.records(), records, next);
        ArrayNode answer = M.createArrayNode();
        for (DeleteGroupsResponseData.DeletableGroupResult g : r.response())
            answer.add(M.createArrayNode().add(g.groupId()).add(g.errorCode()));
        return answer;
    }
}
