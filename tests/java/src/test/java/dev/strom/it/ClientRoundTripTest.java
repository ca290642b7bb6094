package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Admin, producer and consumer round trips with the Apache Kafka 4.4 Java client. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(300)
class ClientRoundTripTest {
    static final int PARTITIONS = 3;
    static final int N = 10_000;

    BrokerUnderTest broker;
    Admin admin;

    @RegisterExtension
    final BrokerLogOnFailure logOnFailure = new BrokerLogOnFailure(() -> broker);

    @BeforeAll
    void startBroker() throws Exception {
        broker = BrokerUnderTest.start();
        admin = Clients.admin(broker.bootstrap());
    }

    @AfterAll
    void stopBroker() {
        try {
            if (admin != null) {
                admin.close(Duration.ofSeconds(5));
            }
        } finally {
            if (broker != null) {
                broker.close();
            }
        }
    }

    @Test
    void createTopicWithThreePartitionsAndDescribe() throws Exception {
        String topic = Clients.uniqueTopic("java-create");
        TopicDescription d = Clients.createTopic(admin, topic, PARTITIONS, Map.of());
        assertEquals(topic, d.name());
        assertFalse(d.isInternal());
        assertNotNull(d.topicId());
        assertFalse(d.topicId().toString().equals("AAAAAAAAAAAAAAAAAAAAAA"), "topic id must be set");
        assertEquals(List.of(0, 1, 2), d.partitions().stream().map(TopicPartitionInfo::partition).toList());
        for (TopicPartitionInfo p : d.partitions()) {
            assertEquals(List.of(p.leader()), p.replicas());
            assertEquals(List.of(p.leader()), p.isr());
        }
        assertTrue(admin.listTopics().names().get().contains(topic));

        DescribeClusterResult cluster = admin.describeCluster();
        assertEquals(1, cluster.nodes().get().size());
        assertNotNull(cluster.clusterId().get());
        assertEquals(d.partitions().get(0).leader().id(), cluster.nodes().get().iterator().next().id());

        ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
            () -> admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get());
        assertTrue(e.getCause() instanceof TopicExistsException, "got " + e.getCause());
    }

    @ParameterizedTest
    @ValueSource(strings = {"lz4", "none", "zstd"})
    void produceAndConsume10kKeyedRecordsWithHeaders(String compression) throws Exception {
        String topic = Clients.uniqueTopic("java-rt-" + compression);
        Clients.createTopic(admin, topic, PARTITIONS, Map.of());
        KeyedData data = new KeyedData(topic, N, System.currentTimeMillis() - 3_600_000L, compression);
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(broker.bootstrap(), compression)) {
            data.produce(producer);
        }
        assertEquals(PARTITIONS, data.acked.size(), "keys should spread over all partitions");
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).toList();
        data.verify(Clients.readFromBeginning(broker.bootstrap(), tps, N, Duration.ofSeconds(90)));

        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(broker.bootstrap())) {
            Map<TopicPartition, Long> begin = c.beginningOffsets(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            for (TopicPartition tp : tps) {
                assertEquals(0L, begin.get(tp));
                assertEquals(data.ackedCount(tp.partition()), end.get(tp));
            }
        }
    }

    @Test
    void offsetsForTimes() throws Exception {
        String topic = Clients.uniqueTopic("java-times");
        Clients.createTopic(admin, topic, 1, Map.of());
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - 600_000L;
        try (KafkaProducer<byte[], byte[]> p = Clients.producer(broker.bootstrap(), "lz4")) {
            for (int chunk = 0; chunk < 3; chunk++) { // three batches
                for (int i = chunk * 100; i < chunk * 100 + 100; i++) {
                    p.send(new ProducerRecord<>(topic, 0, base + i * 10L, Clients.utf8("k" + i), Clients.utf8("v" + i)));
                }
                p.flush();
            }
        }
        try (KafkaConsumer<byte[], byte[]> c = Clients.consumer(broker.bootstrap())) {
            assertEquals(0L, c.beginningOffsets(List.of(tp)).get(tp));
            assertEquals(300L, c.endOffsets(List.of(tp)).get(tp));
            Map<Long, Long> cases = new HashMap<>();
            cases.put(base - 1000, 0L);
            cases.put(base, 0L);
            cases.put(base + 5, 1L);
            cases.put(base + 1000, 100L);
            cases.put(base + 1995, 200L);
            cases.put(base + 2990, 299L);
            for (Map.Entry<Long, Long> e : cases.entrySet()) {
                OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(tp, e.getKey())).get(tp);
                assertNotNull(ot, "no offset for ts base" + (e.getKey() - base));
                assertEquals(e.getValue(), ot.offset(), "ts base" + (e.getKey() - base));
                assertEquals(base + e.getValue() * 10, ot.timestamp());
            }
            assertNull(c.offsetsForTimes(Map.of(tp, base + 2991)).get(tp), "after the last record");
        }
    }

    @Test
    void listTopicsAndDescribeConfigs() throws Exception {
        String topic = Clients.uniqueTopic("java-configs");
        Clients.createTopic(admin, topic, 2, Map.of("retention.ms", "3600000", "cleanup.policy", "delete"));
        Set<String> names = admin.listTopics().names().get();
        assertTrue(names.contains(topic), names.toString());

        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
        Map<String, ConfigEntry> byName = cfg.entries().stream()
            .collect(Collectors.toMap(ConfigEntry::name, e -> e));
        assertEquals("3600000", byName.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, byName.get("retention.ms").source());
        assertEquals("delete", byName.get("cleanup.policy").value());
        assertTrue(byName.containsKey("segment.bytes"), byName.keySet().toString());
        assertTrue(byName.containsKey("max.message.bytes"), byName.keySet().toString());

        Collection<TopicDescription> ds = admin.describeTopics(List.of(topic)).allTopicNames().get().values();
        assertEquals(2, ds.iterator().next().partitions().size());
    }
}
