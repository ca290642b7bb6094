package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The Java-client counterpart of cluster.rs {@code leader_kill_under_acks_all_loses_nothing}:
 * an idempotent acks=all KafkaProducer writes 50,000 records to a 1-partition, RF 3,
 * min.insync.replicas=2 topic on a 3-node cluster while the partition leader is SIGKILLed a
 * quarter of the way in. Every record must be acknowledged, readable exactly once and in order at
 * its acknowledged offset from the survivors, and after the old leader restarts all three replicas'
 * logs must be byte-identical.
 */
class LeaderKillJavaProducerTest {
    private static final int N = 50_000;
    private static final int KILL_AT = 12_500;

    private ClusterUnderTest cluster;

    @AfterEach
    void stopCluster() {
        if (cluster != null) {
            cluster.close();
            cluster = null;
        }
    }

    private static void step(long t0, String what) {
        System.err.printf("[%7.1fs] %s%n", (System.nanoTime() - t0) / 1e9, what);
    }

    private static <T> T eventually(String what, long seconds, Supplier<Optional<T>> f) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        while (true) {
            Optional<T> v;
            try {
                v = f.get();
            } catch (RuntimeException e) {
                v = Optional.empty();
            }
            if (v.isPresent()) {
                return v.get();
            }
            if (System.nanoTime() > deadline) {
                fail("timed out after " + seconds + " s waiting for " + what);
            }
            Thread.sleep(200);
        }
    }

    private static TopicPartitionInfo partition0(Admin admin, String topic) {
        try {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames()
                .get(10, TimeUnit.SECONDS).get(topic);
            return d.partitions().get(0);
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    private byte[] logBytes(int node, String topic) {
        Path f = cluster.dataDir(node).resolve(topic + "-0").resolve("00000000000000000000.log");
        try {
            return Files.readAllBytes(f);
        } catch (NoSuchFileException e) {
            return new byte[0];
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    @Test
    void leaderKillUnderAcksAllLosesNothing() throws Exception {
        long t0 = System.nanoTime();
        cluster = ClusterUnderTest.start(3, List.of(
            "broker.session.timeout.ms=3000",
            "broker.heartbeat.interval.ms=500",
            "replica.fetch.wait.max.ms=100"));
        try {
            run(t0);
        } catch (Throwable t) {
            cluster.keepData();
            System.err.println(cluster.logs(60));
            throw t;
        }
    }

    private void run(long t0) throws Exception {
        step(t0, "cluster started");
        String topic = Clients.uniqueTopic("leader-kill");
        int leader;
        try (Admin admin = Clients.admin(cluster.bootstrap())) {
            eventually("all 3 brokers registered", 30, () -> {
                try {
                    int n = admin.describeCluster().nodes().get(5, TimeUnit.SECONDS).size();
                    return n == 3 ? Optional.of(n) : Optional.empty();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 3)
                    .configs(Map.of("min.insync.replicas", "2"))))
                .all().get(60, TimeUnit.SECONDS);
            leader = eventually("a leader with a full ISR for " + topic, 30, () -> {
                TopicPartitionInfo p = partition0(admin, topic);
                Node l = p.leader();
                return l != null && l.id() > 0 && p.isr().size() == 3 ? Optional.of(l.id()) : Optional.empty();
            });
        }
        step(t0, "topic " + topic + " created, leader " + leader);

        // An idempotent acks=all producer writes while the leader is killed part-way.
        List<long[]> ackedOffsets = new CopyOnWriteArrayList<>();
        List<String> ackedValues = new CopyOnWriteArrayList<>();
        List<String> failures = new CopyOnWriteArrayList<>();
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrap());
        pp.put(ProducerConfig.CLIENT_ID_CONFIG, "leader-kill-producer");
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120_000);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < N; i++) {
                if (i == KILL_AT) {
                    // Kill a leader that is in steady acknowledged traffic, not one still
                    // answering its first requests.
                    long waitUntil = System.nanoTime() + 30_000_000_000L;
                    while (System.nanoTime() < waitUntil) {
                        synchronized (ackedValues) {
                            if (ackedValues.size() >= KILL_AT / 4) {
                                break;
                            }
                        }
                        Thread.sleep(5);
                    }
                    cluster.kill(leader);
                    step(t0, "SIGKILLed leader " + leader + " at record " + i + " (" + ackedValues.size()
                        + " acknowledged so far)");
                }
                String v = "seq-" + i;
                producer.send(new ProducerRecord<>(topic, 0, null, v), (md, e) -> {
                    if (e != null) {
                        failures.add(v + ": " + e);
                    } else {
                        synchronized (ackedValues) {
                            ackedOffsets.add(new long[] {md.offset()});
                            ackedValues.add(v);
                        }
                    }
                });
            }
            producer.flush();
        }
        step(t0, "flushed: " + ackedValues.size() + " acknowledged, " + failures.size() + " failed");
        assertTrue(failures.isEmpty(), failures.size() + " sends failed, first: "
            + failures.subList(0, Math.min(5, failures.size())));
        assertEquals(N, ackedValues.size(), "every record acknowledged (idempotent retries)");

        int[] survivors = cluster.ids().stream().filter(id -> id != leader).mapToInt(Integer::intValue).toArray();
        int newLeader;
        try (Admin admin = Clients.admin(cluster.bootstrap(survivors))) {
            newLeader = eventually("a new leader from the surviving ISR", 30, () -> {
                TopicPartitionInfo p = partition0(admin, topic);
                Node l = p.leader();
                boolean ok = l != null && l.id() != leader
                    && Arrays.stream(survivors).anyMatch(s -> s == l.id())
                    && p.isr().stream().anyMatch(r -> r.id() == l.id());
                return ok ? Optional.of(l.id()) : Optional.empty();
            });
        }
        step(t0, "new leader " + newLeader);

        // Every acknowledged record exactly once, in order, at its acknowledged offset.
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrap(survivors));
        cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "leader-kill-consumer");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        List<Long> gotOffsets = new ArrayList<>();
        List<String> gotValues = new ArrayList<>();
        long endOffset;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            endOffset = consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (consumer.position(tp) < endOffset && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    gotOffsets.add(r.offset());
                    gotValues.add(r.value());
                }
            }
        }
        step(t0, "consumed " + gotValues.size() + " records, end offset " + endOffset);
        assertEquals(N, gotValues.size(), "records in the topic (end offset " + endOffset + ")");
        List<String> expect = new ArrayList<>(N);
        for (int i = 0; i < N; i++) {
            expect.add("seq-" + i);
        }
        if (!expect.equals(gotValues)) {
            int i = 0;
            while (i < N && expect.get(i).equals(gotValues.get(i))) {
                i++;
            }
            fail("no duplicate, no reordering, no loss: first difference at index " + i + ": expected "
                + expect.get(i) + ", got " + gotValues.subList(i, Math.min(N, i + 5)) + " at offsets "
                + gotOffsets.subList(i, Math.min(N, i + 5)));
        }
        Map<String, Long> byValue = new java.util.HashMap<>();
        for (int i = 0; i < N; i++) {
            byValue.put(gotValues.get(i), gotOffsets.get(i));
        }
        for (int i = 0; i < N; i++) {
            String v = ackedValues.get(i);
            long off = ackedOffsets.get(i)[0];
            assertEquals(off, byValue.get(v).longValue(), v + " at its acknowledged offset");
        }

        // The killed leader restarts, truncates whatever diverged, catches up; then all three
        // replicas' logs are byte-identical.
        cluster.restart(leader);
        step(t0, "restarted node " + leader);
        eventually("node " + leader + "'s log byte-identical to the others", 60, () -> {
            byte[] a = logBytes(1, topic);
            boolean same = a.length > 0 && Arrays.equals(a, logBytes(2, topic)) && Arrays.equals(a, logBytes(3, topic));
            return same ? Optional.of(true) : Optional.empty();
        });
        step(t0, "all three logs identical (" + logBytes(1, topic).length + " bytes)");
    }
}
