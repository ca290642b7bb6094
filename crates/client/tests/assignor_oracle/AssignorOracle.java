// The Java side of the assignor differential tests (crates/client/tests/assignor_*.rs): runs a
// kafka-clients 4.4 ConsumerPartitionAssignor on inputs the Rust test generates and prints what it
// assigns, so the Rust assignors can be compared with the real classes.
//
// Protocol: one JSON object per stdin line, one JSON object per stdout line.
// Request:
//   {"assignor": "org.apache.kafka.clients.consumer.RangeAssignor",
//    "topics": [{"name": "t0", "partitions": [{"partition": 0, "replica_racks": ["r0", "r1"]}]}],
//    "members": [{"member_id": "m0", "topics": ["t0"], "owned_partitions": [{"topic": "t0", "partition": 0}],
//                 "generation_id": -1, "rack_id": null, "group_instance_id": null, "user_data": null}]}
//   user_data is base64 or null. Members are put into a HashMap in the order listed, as
//   ConsumerCoordinator.onLeaderElected does with the JoinGroup response's members.
// Response: {"assignment": {"m0": {"partitions": [{"topic": "t0", "partition": 0}], "user_data": null}}}
//   or {"error": "<exception class>: <message>"} when the assignor throws.
//
// Test code: compiled by the Rust test with javac against the jars in .cache/kafka-4.4/libs
// (Jackson, which Kafka ships, parses the JSON).

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class AssignorOracle {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty())
                continue;
            ObjectNode response = MAPPER.createObjectNode();
            try {
                response.set("assignment", run(MAPPER.readTree(line)));
            } catch (Throwable e) {
                // Report, do not die: an input Java rejects is a case the Rust side must reject too.
                response.put("error", e.getClass().getName() + ": " + e.getMessage());
            }
            out.println(MAPPER.writeValueAsString(response));
            out.flush();
        }
    }

    private static ObjectNode run(JsonNode request) throws Exception {
        ConsumerPartitionAssignor assignor = (ConsumerPartitionAssignor) Class.forName(request.get("assignor").asText())
            .getDeclaredConstructor().newInstance();

        // One node per replica, so that two replicas in one rack are still two brokers.
        List<Node> nodes = new ArrayList<>();
        List<PartitionInfo> partitions = new ArrayList<>();
        for (JsonNode topic : request.get("topics")) {
            String name = topic.get("name").asText();
            for (JsonNode p : topic.get("partitions")) {
                List<Node> replicas = new ArrayList<>();
                for (JsonNode rack : p.get("replica_racks")) {
                    Node node = new Node(nodes.size(), "broker" + nodes.size(), 9092, rack.asText());
                    nodes.add(node);
                    replicas.add(node);
                }
                if (replicas.isEmpty()) {
                    // A broker without a rack: what a cluster without racks looks like.
                    Node node = new Node(nodes.size(), "broker" + nodes.size(), 9092);
                    nodes.add(node);
                    replicas.add(node);
                }
                Node[] replicaArray = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(name, p.get("partition").asInt(), replicaArray[0], replicaArray, replicaArray));
            }
        }
        Cluster cluster = new Cluster("oracle", nodes, partitions, Collections.emptySet(), Collections.emptySet());

        Map<String, Subscription> subscriptions = new HashMap<>();
        for (JsonNode m : request.get("members")) {
            List<String> topics = new ArrayList<>();
            for (JsonNode t : m.get("topics"))
                topics.add(t.asText());
            List<TopicPartition> owned = new ArrayList<>();
            JsonNode ownedNode = m.get("owned_partitions");
            if (ownedNode != null)
                for (JsonNode tp : ownedNode)
                    owned.add(new TopicPartition(tp.get("topic").asText(), tp.get("partition").asInt()));
            Subscription subscription = new Subscription(
                topics,
                bytesOrNull(m.get("user_data")),
                owned,
                m.has("generation_id") ? m.get("generation_id").asInt() : -1,
                Optional.ofNullable(textOrNull(m.get("rack_id"))));
            subscription.setGroupInstanceId(Optional.ofNullable(textOrNull(m.get("group_instance_id"))));
            subscriptions.put(m.get("member_id").asText(), subscription);
        }

        Map<String, Assignment> assignments = assignor.assign(cluster, new GroupSubscription(subscriptions)).groupAssignment();

        ObjectNode result = MAPPER.createObjectNode();
        for (Map.Entry<String, Assignment> e : new TreeMap<>(assignments).entrySet()) {
            ObjectNode a = result.putObject(e.getKey());
            ArrayNode list = a.putArray("partitions");
            for (TopicPartition tp : e.getValue().partitions()) {
                ObjectNode tpNode = list.addObject();
                tpNode.put("topic", tp.topic());
                tpNode.put("partition", tp.partition());
            }
            ByteBuffer userData = e.getValue().userData();
            if (userData == null) {
                a.putNull("user_data");
            } else {
                ByteBuffer copy = userData.duplicate();
                byte[] bytes = new byte[copy.remaining()];
                copy.get(bytes);
                a.put("user_data", Base64.getEncoder().encodeToString(bytes));
            }
        }
        return result;
    }

    private static String textOrNull(JsonNode n) {
        return n == null || n.isNull() ? null : n.asText();
    }

    private static ByteBuffer bytesOrNull(JsonNode n) {
        String s = textOrNull(n);
        return s == null ? null : ByteBuffer.wrap(Base64.getDecoder().decode(s));
    }
}
