// Group consumer harness for the Java kafka-clients 4.4 (classic protocol with the range,
// roundrobin, sticky and cooperative-sticky assignors, or group.protocol=consumer).
//
//     java -cp <classes>:<kafka libs>/* GroupWorker CONFIG_JSON
//
// CONFIG_JSON is the one every harness takes (tests/groups/README.md). Per polled batch: each
// record is reported, then the batch's next offsets are committed synchronously; a failed commit
// stays pending, retried with the next batch or in the revoke callback. SIGTERM: stop polling,
// commit what is pending, close (which leaves the group unless the member is static).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class GroupWorker {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static volatile boolean stop = false;

    private final Writer out;
    private final String member;
    private final String topic;
    private final KafkaConsumer<String, String> consumer;
    // partition -> next offset to commit (processed but not yet committed)
    private final Map<Integer, Long> pending = new HashMap<>();
    private int lastGen = -1;

    GroupWorker(JsonNode cfg) throws IOException {
        member = cfg.get("member").asText();
        topic = cfg.get("topic").asText();
        out = new OutputStreamWriter(new FileOutputStream(cfg.get("report").asText(), true),
                StandardCharsets.UTF_8);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cfg.get("bootstrap").asText());
        p.put(ConsumerConfig.GROUP_ID_CONFIG, cfg.get("group").asText());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, member);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, cfg.get("max_poll_records").asText());
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, cfg.get("metadata_max_age_ms").asText());
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "200");
        String strategy = cfg.get("strategy").asText();
        if (strategy.equals("consumer")) {
            // KIP-848: the broker assigns; session and heartbeat are the broker's configs
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, cfg.get("session_timeout_ms").asText());
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                    cfg.get("heartbeat_interval_ms").asText());
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor(strategy));
        }
        JsonNode instance = cfg.get("instance_id");
        if (instance != null && !instance.isNull()) {
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instance.asText());
        }
        consumer = new KafkaConsumer<>(p);
    }

    static String assignor(String strategy) {
        switch (strategy) {
            case "range": return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin": return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky": return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky":
                return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default: throw new IllegalArgumentException("unknown strategy " + strategy);
        }
    }

    synchronized void report(String ev, ObjectNode n) {
        n.put("ev", ev).put("member", member).put("ts", System.currentTimeMillis());
        try {
            // one write per line, flushed at once: a SIGKILL loses at most the line being written
            out.write(JSON.writeValueAsString(n) + "\n");
            out.flush();
        } catch (IOException e) {
            throw new RuntimeException("cannot write the report", e);
        }
    }

    ObjectNode node() {
        return JSON.createObjectNode();
    }

    ObjectNode withGen(ObjectNode n) {
        // the generation (classic) or member epoch (consumer protocol) the member has now
        return n.put("gen", consumer.groupMetadata().generationId());
    }

    static List<Integer> ids(Collection<TopicPartition> parts) {
        List<Integer> ids = new ArrayList<>();
        for (TopicPartition tp : parts) ids.add(tp.partition());
        Collections.sort(ids);
        return ids;
    }

    void commit(Collection<Integer> parts) {
        Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
        for (Integer p : parts) {
            Long next = pending.get(p);
            if (next != null) offs.put(new TopicPartition(topic, p), new OffsetAndMetadata(next));
        }
        if (offs.isEmpty()) return;
        try {
            consumer.commitSync(offs);
        } catch (WakeupException e) {
            throw e;
        } catch (RuntimeException e) {
            // e.g. a rebalance in progress: the offsets stay pending and are committed later
            report("commit_failed", node().put("error", e.toString()));
            return;
        }
        ObjectNode o = node();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offs.entrySet()) {
            o.put(Integer.toString(e.getKey().partition()), e.getValue().offset());
            pending.remove(e.getKey().partition());
        }
        ObjectNode n = withGen(node());
        n.set("offsets", o);
        report("commit", n);
    }

    void run() {
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                if (parts.isEmpty()) return;
                List<Integer> ids = ids(parts);
                commit(ids);
                for (Integer p : ids) pending.remove(p);
                ObjectNode n = node();
                n.set("partitions", JSON.valueToTree(ids));
                report("revoked", n);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                if (parts.isEmpty()) return;
                ObjectNode n = withGen(node());
                n.set("partitions", JSON.valueToTree(ids(parts)));
                report("assigned", n);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                if (parts.isEmpty()) return;
                List<Integer> ids = ids(parts);
                for (Integer p : ids) pending.remove(p);
                ObjectNode n = node();
                n.set("partitions", JSON.valueToTree(ids));
                report("lost", n);
            }
        });
        report("start", node());
        try {
            while (!stop) {
                ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(500));
                int gen = consumer.groupMetadata().generationId();
                if (gen != lastGen) {
                    // generation changes that come with no (non-empty) callback, e.g. the
                    // second round of a cooperative rebalance or a KIP-848 epoch bump
                    lastGen = gen;
                    report("generation", node().put("gen", gen));
                }
                for (ConsumerRecord<String, String> r : recs) {
                    ObjectNode n = withGen(node());
                    n.put("partition", r.partition()).put("offset", r.offset()).put("key", r.key());
                    report("record", n);
                    pending.put(r.partition(), r.offset() + 1);
                }
                commit(new ArrayList<>(pending.keySet()));
            }
        } catch (WakeupException e) {
            // SIGTERM: fall through to the clean close
        }
        report("closing", node());
        commit(new ArrayList<>(pending.keySet()));
        consumer.close();
        report("closed", node());
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: GroupWorker CONFIG_JSON");
            System.exit(2);
        }
        GroupWorker w = new GroupWorker(JSON.readTree(args[0]));
        // SIGTERM is handled, not left to the JVM's shutdown, so that the clean close runs on
        // the main thread and the process exits 0 like the other harnesses (a shutdown hook
        // would exit 143)
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), sig -> {
            stop = true;
            w.consumer.wakeup();
        });
        w.run();
        System.exit(0);
    }
}
