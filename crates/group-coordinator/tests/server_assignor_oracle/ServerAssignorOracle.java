// Oracle for tests/server_assignor_diff.rs: runs Kafka 4.4's server-side assignors
// (org.apache.kafka.coordinator.group.assignor.UniformAssignor / RangeAssignor) on cases read as
// one JSON array from stdin and prints one JSON array of answers on stdout.
//
// Case: {"assignor": "uniform"|"range", "type": "HOMOGENEOUS"|"HETEROGENEOUS",
//        "members": [{"id", "instance", "rack", "topics": [[msb, lsb]...],
//                     "assignment": [[[msb, lsb], [partition...]]...]}...],
//        "metadata": [[[msb, lsb], numPartitions]...]}
// Answer: {"error": message} or {"members": [{"id", "assignment": [[[msb, lsb], [sorted partitions]]...]}...]}
//
// Inputs keep the order the test gives (LinkedHashMap / LinkedHashSet): the Rust side iterates
// members by id and topics/partitions ascending, and so must Java for the answers to be comparable.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;

import java.io.InputStream;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

public class ServerAssignorOracle {
    static Uuid uuid(JsonNode pair) {
        return new Uuid(pair.get(0).asLong(), pair.get(1).asLong());
    }

    static Optional<String> optText(JsonNode node) {
        return node == null || node.isNull() ? Optional.empty() : Optional.of(node.asText());
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        InputStream in = System.in;
        JsonNode cases = mapper.readTree(in);
        ArrayNode answers = mapper.createArrayNode();
        for (JsonNode c : cases) {
            answers.add(run(mapper, c));
        }
        System.out.print(mapper.writeValueAsString(answers));
        System.out.flush();
    }

    static ObjectNode run(ObjectMapper mapper, JsonNode c) {
        ObjectNode answer = mapper.createObjectNode();
        Map<Uuid, Integer> partitionCounts = new HashMap<>();
        for (JsonNode t : c.get("metadata")) {
            partitionCounts.put(uuid(t.get(0)), t.get(1).asInt());
        }
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            @Override
            public int numPartitions(Uuid topicId) {
                return partitionCounts.getOrDefault(topicId, -1);
            }

            @Override
            public Set<String> racksForPartition(Uuid topicId, int partition) {
                return Collections.emptySet();
            }
        };

        Map<String, MemberSubscriptionAndAssignmentImpl> members = new LinkedHashMap<>();
        Map<Uuid, Map<Integer, String>> inverted = new HashMap<>();
        for (JsonNode m : c.get("members")) {
            String memberId = m.get("id").asText();
            Set<Uuid> topics = new LinkedHashSet<>();
            for (JsonNode t : m.get("topics")) topics.add(uuid(t));
            Map<Uuid, Set<Integer>> assignment = new LinkedHashMap<>();
            for (JsonNode tp : m.get("assignment")) {
                Uuid topicId = uuid(tp.get(0));
                Set<Integer> partitions = new LinkedHashSet<>();
                for (JsonNode p : tp.get(1)) {
                    partitions.add(p.asInt());
                    inverted.computeIfAbsent(topicId, k -> new HashMap<>()).put(p.asInt(), memberId);
                }
                assignment.put(topicId, Collections.unmodifiableSet(partitions));
            }
            members.put(memberId, new MemberSubscriptionAndAssignmentImpl(
                optText(m.get("rack")), optText(m.get("instance")), topics,
                new Assignment(Collections.unmodifiableMap(assignment))));
        }
        SubscriptionType type = SubscriptionType.valueOf(c.get("type").asText());
        ConsumerGroupPartitionAssignor assignor =
            c.get("assignor").asText().equals("range") ? new RangeAssignor() : new UniformAssignor();
        GroupAssignment result;
        try {
            result = assignor.assign(new GroupSpecImpl(members, type, inverted), describer);
        } catch (Exception e) {
            answer.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            return answer;
        }
        // Sorted output, so the comparison does not depend on Java's hash order.
        ArrayNode out = answer.putArray("members");
        for (Map.Entry<String, MemberAssignment> e : new TreeMap<>(result.members()).entrySet()) {
            ObjectNode member = out.addObject();
            member.put("id", e.getKey());
            ArrayNode topics = member.putArray("assignment");
            List<Map.Entry<Uuid, Set<Integer>>> entries = new ArrayList<>(e.getValue().partitions().entrySet());
            for (Map.Entry<Uuid, Set<Integer>> tp : entries) {
                ArrayNode pair = topics.addArray();
                ArrayNode id = pair.addArray();
                id.add(tp.getKey().getMostSignificantBits());
                id.add(tp.getKey().getLeastSignificantBits());
                ArrayNode partitions = pair.addArray();
                for (Integer p : new TreeSet<>(tp.getValue())) partitions.add(p);
            }
        }
        return answer;
    }
}
