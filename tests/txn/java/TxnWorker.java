// Transactions harness for Java kafka-clients 4.4 (KafkaProducer's TransactionManager and a
// read_committed KafkaConsumer). Protocol: tests/txn/README.md.
//
//   java TxnWorker CONFIG_JSON      then one JSON command per stdin line, one JSON answer per line
//
// Minimal JSON handling on purpose (no extra jars): the commands are flat objects written by the
// test; "offsets" is a list of [topic, partition, offset] triples.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.*;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnWorker {
    static Map<String, String> cfg;
    static KafkaProducer<String, String> producer;
    static KafkaConsumer<String, String> consumer;

    static String str(Map<String, String> m, String k, String def) {
        String v = m.get(k);
        return v == null ? def : v;
    }

    /** A flat JSON object's string/number fields (and the raw text of "offsets"). */
    static Map<String, String> parse(String json) {
        Map<String, String> m = new HashMap<>();
        Matcher off = Pattern.compile("\"offsets\"\\s*:\\s*(\\[.*?\\]\\s*\\])").matcher(json);
        if (off.find()) m.put("offsets", off.group(1));
        Matcher kv = Pattern.compile("\"(\\w+)\"\\s*:\\s*(\"((?:[^\"\\\\]|\\\\.)*)\"|-?\\d+|true|false|null)").matcher(json);
        while (kv.find()) {
            String v = kv.group(3) != null ? kv.group(3) : kv.group(2);
            m.putIfAbsent(kv.group(1), v);
        }
        return m;
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static boolean fatal(Throwable e) {
        return e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException
            || e instanceof OutOfOrderSequenceException || e instanceof AuthorizationException
            || e instanceof UnsupportedVersionException || e instanceof InvalidTxnStateException
            || e instanceof TransactionalIdAuthorizationException;
    }

    static String errAnswer(Throwable e) {
        Throwable root = e;
        if (e instanceof KafkaException && e.getCause() != null) root = e.getCause();
        if (e instanceof java.util.concurrent.ExecutionException && e.getCause() != null) root = e.getCause();
        boolean abortable = root instanceof TransactionAbortableException
            || (!fatal(root) && !(root instanceof IllegalStateException));
        return "{\"ok\":false,\"error\":" + q(String.valueOf(e)) + ",\"code\":" + q(root.getClass().getSimpleName())
            + ",\"fatal\":" + fatal(root) + ",\"abortable\":" + abortable + "}";
    }

    static List<Integer> partitions(String topic) {
        List<Integer> out = new ArrayList<>();
        for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(10))) out.add(p.partition());
        Collections.sort(out);
        return out;
    }

    static void ensureConsumer() {
        if (consumer != null) return;
        Properties p = new Properties();
        p.put("bootstrap.servers", cfg.get("bootstrap"));
        p.put("group.id", str(cfg, "group", "txn-reader"));
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", str(cfg, "isolation", "read_committed"));
        p.put("auto.offset.reset", "earliest");
        p.put("client.id", str(cfg, "client_id", "txn-java"));
        consumer = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static String run(Map<String, String> c) throws Exception {
        String op = c.get("op");
        switch (op) {
            case "init": {
                Properties p = new Properties();
                p.put("bootstrap.servers", cfg.get("bootstrap"));
                p.put("transactional.id", cfg.get("transactional_id"));
                p.put("transaction.timeout.ms", str(cfg, "transaction_timeout_ms", "60000"));
                p.put("client.id", str(cfg, "client_id", "txn-java"));
                p.put("linger.ms", "5");
                p.put("max.block.ms", "30000");
                producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
                producer.initTransactions();
                return "";
            }
            case "begin":
                producer.beginTransaction();
                return "";
            case "send": {
                int n = Integer.parseInt(c.get("n"));
                List<Future<RecordMetadata>> fs = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String v = c.get("prefix") + "-" + i;
                    fs.add(producer.send(new ProducerRecord<>(c.get("topic"), v, v)));
                }
                producer.flush();
                for (Future<RecordMetadata> f : fs) f.get();
                return "";
            }
            case "send_offsets": {
                Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                Matcher m = Pattern.compile("\\[\\s*\"([^\"]+)\"\\s*,\\s*(\\d+)\\s*,\\s*(\\d+)\\s*\\]").matcher(c.get("offsets"));
                while (m.find()) offs.put(new TopicPartition(m.group(1), Integer.parseInt(m.group(2))),
                                          new OffsetAndMetadata(Long.parseLong(m.group(3))));
                producer.sendOffsetsToTransaction(offs, new ConsumerGroupMetadata(c.get("group")));
                return "";
            }
            case "commit":
                producer.commitTransaction();
                return "";
            case "abort":
                producer.abortTransaction();
                return "";
            case "read": {
                ensureConsumer();
                String topic = c.get("topic");
                List<TopicPartition> tps = new ArrayList<>();
                for (int p : partitions(topic)) tps.add(new TopicPartition(topic, p));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                long idle = Long.parseLong(str(c, "idle_ms", "3000"));
                long deadline = System.currentTimeMillis() + Long.parseLong(str(c, "max_ms", "60000"));
                long last = System.currentTimeMillis();
                StringBuilder sb = new StringBuilder();
                while (System.currentTimeMillis() < deadline && System.currentTimeMillis() - last < idle) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        if (sb.length() > 0) sb.append(',');
                        sb.append('[').append(r.partition()).append(',').append(r.offset()).append(',').append(q(r.value())).append(']');
                        last = System.currentTimeMillis();
                    }
                }
                consumer.assign(Collections.emptyList());
                return ",\"records\":[" + sb + "]";
            }
            case "end_offsets": {
                ensureConsumer();
                String topic = c.get("topic");
                List<TopicPartition> tps = new ArrayList<>();
                for (int p : partitions(topic)) tps.add(new TopicPartition(topic, p));
                StringBuilder sb = new StringBuilder();
                for (Map.Entry<TopicPartition, Long> e : consumer.endOffsets(tps, Duration.ofSeconds(10)).entrySet()) {
                    if (sb.length() > 0) sb.append(',');
                    sb.append(q(String.valueOf(e.getKey().partition()))).append(':').append(e.getValue());
                }
                return ",\"end_offsets\":{" + sb + "}";
            }
            case "close":
                if (producer != null) producer.close(Duration.ofSeconds(5));
                if (consumer != null) consumer.close();
                return ",\"closed\":true";
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        cfg = parse(args[0]);
        // Answers only on stdout: the client's own logging (log4j's default console appender
        // writes to System.out) goes to stderr, the harness's log file.
        java.io.PrintStream answers = System.out;
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, String> c = parse(line);
            String ans;
            try {
                ans = "{\"ok\":true" + run(c) + "}";
            } catch (Throwable e) {
                ans = errAnswer(e);
            }
            answers.println(ans);
            answers.flush();
            if ("close".equals(c.get("op"))) break;
        }
    }
}
