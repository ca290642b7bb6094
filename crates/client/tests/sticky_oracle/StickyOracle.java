// Differential oracle for crates/client/tests/sticky_diff.rs: runs kafka-clients' StickyAssignor
// and CooperativeStickyAssignor on one JSON case per stdin line and prints the assignment (or
// the exception) as one JSON line. A fresh assignor per case: Java's keeps its max generation
// across calls.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.*;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class StickyOracle {
    public static void main(String[] args) throws Exception {
        // Kafka's loggers may write to stdout; keep stdout for the answers.
        java.io.PrintStream answers = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true, "UTF-8");
        System.setOut(System.err);
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            JsonNode c = mapper.readTree(line);
            ObjectNode out = mapper.createObjectNode();
            try {
                ConsumerPartitionAssignor a = c.get("assignor").asText().equals("sticky")
                    ? new StickyAssignor() : new CooperativeStickyAssignor();
                List<Node> nodes = new ArrayList<>();
                List<PartitionInfo> infos = new ArrayList<>();
                Iterator<Map.Entry<String, JsonNode>> topics = c.get("topics").fields();
                while (topics.hasNext()) {
                    Map.Entry<String, JsonNode> t = topics.next();
                    int p = 0;
                    for (JsonNode racks : t.getValue()) {
                        Node[] replicas = new Node[racks.size()];
                        for (int i = 0; i < racks.size(); i++) {
                            replicas[i] = new Node(nodes.size(), "h", 1, racks.get(i).asText());
                            nodes.add(replicas[i]);
                        }
                        infos.add(new PartitionInfo(t.getKey(), p++, replicas.length > 0 ? replicas[0] : null, replicas, replicas));
                    }
                }
                Cluster cluster = new Cluster("c", nodes, infos, Collections.emptySet(), Collections.emptySet());
                // Members are sent sorted by id; put in that order, as the Rust side assumes.
                Map<String, Subscription> subs = new HashMap<>();
                for (JsonNode m : c.get("members")) {
                    List<String> ts = new ArrayList<>();
                    for (JsonNode t : m.get("topics")) ts.add(t.asText());
                    List<TopicPartition> owned = new ArrayList<>();
                    for (JsonNode o : m.get("owned")) owned.add(new TopicPartition(o.get(0).asText(), o.get(1).asInt()));
                    ByteBuffer ud = m.get("userData").isNull() ? null
                        : ByteBuffer.wrap(Base64.getDecoder().decode(m.get("userData").asText()));
                    Optional<String> rack = m.get("rack").isNull() ? Optional.empty() : Optional.of(m.get("rack").asText());
                    subs.put(m.get("id").asText(), new Subscription(ts, ud, owned, m.get("generation").asInt(), rack));
                }
                GroupAssignment ga = a.assign(cluster, new GroupSubscription(subs));
                ObjectNode ok = out.putObject("ok");
                for (Map.Entry<String, Assignment> e : ga.groupAssignment().entrySet()) {
                    ArrayNode arr = ok.putArray(e.getKey());
                    for (TopicPartition tp : e.getValue().partitions()) arr.addArray().add(tp.topic()).add(tp.partition());
                }
            } catch (Exception e) {
                out.put("error", e.toString());
            }
            answers.println(mapper.writeValueAsString(out));
        }
    }
}
