// Oracle for tests/consumer_reconcile_diff.rs: runs Kafka 4.4's CurrentAssignmentBuilder
// (org.apache.kafka.coordinator.group.modern.consumer) on cases read as one JSON array from
// stdin and prints one JSON array of answers on stdout.
//
// Topics are small integers k: topic id Uuid(0, k + 1), name "t<k>".
// Case: {"state": byte, "epoch", "prev", "assigned": [[k, p, assignmentEpoch]...],
//        "pending": [[k, p, epoch]...], "names": [k...], "regex": null|string,
//        "regexTopics": [k...] (what the regex resolved to, when "regex" is set),
//        "image": [k...] (topics in the metadata image), "targetEpoch", "target": [[k, p]...],
//        "owners": [[k, p, epoch]...] (current partition epochs; others are -1),
//        "owned": null | [[k, [p...]]...], "subscriptionChanged": bool}
// Answer: {"fenced": true} or {"state", "epoch", "prev", "assigned": [[k, p, e]...],
//          "pending": [[k, p, e]...]} (sorted).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.FencedMemberEpochException;
import org.apache.kafka.common.message.ConsumerGroupHeartbeatRequestData;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataDelta;
import org.apache.kafka.coordinator.common.runtime.CoordinatorMetadataImage;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.MemberState;
import org.apache.kafka.coordinator.group.modern.consumer.ConsumerGroupMember;
import org.apache.kafka.coordinator.group.modern.consumer.CurrentAssignmentBuilder;
import org.apache.kafka.coordinator.group.modern.consumer.ResolvedRegularExpression;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;

public class CurrentAssignmentOracle {
    static Uuid id(int k) {
        return new Uuid(0, k + 1);
    }

    static int index(Uuid u) {
        return (int) u.getLeastSignificantBits() - 1;
    }

    static final class Image implements CoordinatorMetadataImage {
        final Map<String, TopicMetadata> byName = new HashMap<>();
        final Map<Uuid, TopicMetadata> byId = new HashMap<>();

        Image(JsonNode topics) {
            for (JsonNode t : topics) {
                int k = t.asInt();
                TopicMetadata m = new TopicMetadata() {
                    public String name() { return "t" + k; }
                    public Uuid id() { return CurrentAssignmentOracle.id(k); }
                    public int partitionCount() { return 8; }
                    public List<String> partitionRacks(int p) { return List.of(); }
                };
                byName.put(m.name(), m);
                byId.put(m.id(), m);
            }
        }

        public Set<Uuid> topicIds() { return byId.keySet(); }
        public Set<String> topicNames() { return byName.keySet(); }
        public Optional<TopicMetadata> topicMetadata(String name) { return Optional.ofNullable(byName.get(name)); }
        public Optional<TopicMetadata> topicMetadata(Uuid id) { return Optional.ofNullable(byId.get(id)); }
        public CoordinatorMetadataDelta emptyDelta() { throw new UnsupportedOperationException(); }
        public long version() { return 0; }
        public boolean isEmpty() { return byId.isEmpty(); }
    }

    static Map<Uuid, Map<Integer, Integer>> withEpochs(JsonNode triples) {
        Map<Uuid, Map<Integer, Integer>> m = new HashMap<>();
        for (JsonNode t : triples) {
            m.computeIfAbsent(id(t.get(0).asInt()), __ -> new HashMap<>()).put(t.get(1).asInt(), t.get(2).asInt());
        }
        return m;
    }

    static ArrayNode triples(ObjectMapper mapper, Map<Uuid, Map<Integer, Integer>> m) {
        TreeMap<Integer, TreeMap<Integer, Integer>> sorted = new TreeMap<>();
        m.forEach((t, ps) -> sorted.computeIfAbsent(index(t), __ -> new TreeMap<>()).putAll(ps));
        ArrayNode out = mapper.createArrayNode();
        sorted.forEach((k, ps) -> ps.forEach((p, e) -> {
            ArrayNode a = mapper.createArrayNode();
            a.add(k);
            a.add(p);
            a.add(e == null ? -1 : e);
            out.add(a);
        }));
        return out;
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        JsonNode cases = mapper.readTree(System.in);
        ArrayNode answers = mapper.createArrayNode();
        for (JsonNode c : cases) {
            answers.add(run(mapper, c));
        }
        System.out.print(mapper.writeValueAsString(answers));
        System.out.flush();
    }

    static ObjectNode run(ObjectMapper mapper, JsonNode c) {
        List<String> names = new ArrayList<>();
        for (JsonNode k : c.get("names")) names.add("t" + k.asInt());
        ConsumerGroupMember.Builder b = new ConsumerGroupMember.Builder("member")
            .setState(MemberState.fromValue((byte) c.get("state").asInt()))
            .setMemberEpoch(c.get("epoch").asInt())
            .setPreviousMemberEpoch(c.get("prev").asInt())
            .setSubscribedTopicNames(names)
            .setAssignedPartitions(withEpochs(c.get("assigned")))
            .setPartitionsPendingRevocation(withEpochs(c.get("pending")));
        Map<String, ResolvedRegularExpression> regexes = new HashMap<>();
        if (!c.get("regex").isNull()) {
            String re = c.get("regex").asText();
            b.setSubscribedTopicRegex(re);
            Set<String> topics = new HashSet<>();
            for (JsonNode k : c.get("regexTopics")) topics.add("t" + k.asInt());
            regexes.put(re, new ResolvedRegularExpression(topics, 1, 0));
        }
        ConsumerGroupMember member = b.build();
        Map<Uuid, Set<Integer>> target = new HashMap<>();
        for (JsonNode t : c.get("target")) {
            target.computeIfAbsent(id(t.get(0).asInt()), __ -> new HashSet<>()).add(t.get(1).asInt());
        }
        Map<Uuid, Map<Integer, Integer>> owners = withEpochs(c.get("owners"));
        List<ConsumerGroupHeartbeatRequestData.TopicPartitions> owned = null;
        if (!c.get("owned").isNull()) {
            owned = new ArrayList<>();
            for (JsonNode o : c.get("owned")) {
                List<Integer> ps = new ArrayList<>();
                for (JsonNode p : o.get(1)) ps.add(p.asInt());
                owned.add(new ConsumerGroupHeartbeatRequestData.TopicPartitions()
                    .setTopicId(id(o.get(0).asInt())).setPartitions(ps));
            }
        }
        ObjectNode answer = mapper.createObjectNode();
        try {
            ConsumerGroupMember out = new CurrentAssignmentBuilder(member)
                .withMetadataImage(new Image(c.get("image")))
                .withTargetAssignment(c.get("targetEpoch").asInt(), new Assignment(target))
                .withHasSubscriptionChanged(c.get("subscriptionChanged").asBoolean())
                .withResolvedRegularExpressions(regexes)
                .withCurrentPartitionEpoch((t, p) -> owners.getOrDefault(t, Map.of()).getOrDefault(p, -1))
                .withOwnedTopicPartitions(owned)
                .build();
            answer.put("state", out.state().value());
            answer.put("epoch", out.memberEpoch());
            answer.put("prev", out.previousMemberEpoch());
            answer.set("assigned", triples(mapper, out.assignedPartitions()));
            answer.set("pending", triples(mapper, out.partitionsPendingRevocation()));
        } catch (FencedMemberEpochException e) {
            answer.put("fenced", true);
        }
        return answer;
    }
}
