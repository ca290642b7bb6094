package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Seed 003's first experiment with the Java producer (kafka-clients 4.4, as the seed did): two
 * idempotent KafkaProducer instances and one with idempotence off each send 25 records one at a
 * time (send().get()) to partition 0. After a clean shutdown, both {@code strom dump-log} and
 * Apache Kafka's kafka-dump-log show 75 one-record batches: the first instance's producer id with
 * baseSequence 0..24, the second a different id starting again at 0, then producerId -1 with
 * baseSequence -1; and the two tools agree batch by batch.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class Seed003JavaProducerTest {
    static final int PER_PRODUCER = 25;

    BrokerUnderTest broker;

    @RegisterExtension
    final BrokerLogOnFailure logOnFailure = new BrokerLogOnFailure(() -> broker);

    @AfterEach
    void cleanup() {
        if (broker != null) {
            broker.close();
        }
    }

    static Properties props(String bootstrap, boolean idempotence, String acks) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, Boolean.toString(idempotence));
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 30_000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60_000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 60_000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return p;
    }

    /** 25 synchronous sends to partition 0; returns the acked offsets. */
    static List<Long> send25(Properties props, String topic, String tag) throws Exception {
        List<Long> offsets = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < PER_PRODUCER; i++) {
                RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, null,
                    Clients.utf8(tag + "-" + i))).get(60, TimeUnit.SECONDS);
                assertEquals(0, md.partition());
                offsets.add(md.offset());
            }
        }
        return offsets;
    }

    @Test
    void twoIdempotentInstancesAndOneWithoutInTheLog() throws Exception {
        broker = BrokerUnderTest.start();
        Assumptions.assumeTrue(broker.controllable(), "needs a broker this test starts, stops and reads");
        String topic = Clients.uniqueTopic("seed003-java");
        try (Admin admin = Clients.admin(broker.bootstrap())) {
            Clients.createTopic(admin, topic, 1, Map.of());
        }
        // runA and runB: idempotent (acks=all); runC: enable.idempotence=false, acks=1 (as the seed)
        List<Long> offsets = new ArrayList<>();
        offsets.addAll(send25(props(broker.bootstrap(), true, "all"), topic, "runA"));
        offsets.addAll(send25(props(broker.bootstrap(), true, "all"), topic, "runB"));
        offsets.addAll(send25(props(broker.bootstrap(), false, "1"), topic, "runC"));
        assertEquals(IntStream.range(0, 3 * PER_PRODUCER).mapToObj(i -> (long) i).toList(), offsets,
            "acked offsets");

        Optional<Integer> exit = broker.stop(30);
        exit.ifPresent(code -> assertEquals(0, code, "exit code after SIGTERM\n" + broker.logTail(30)));

        Path log = DumpLogBatches.firstSegment(broker.dataDir(), topic, 0);
        String ours = DumpLogBatches.strom(log);
        String theirs = DumpLogBatches.kafka(log);
        System.out.println("---- strom dump-log --files " + log + " | grep baseOffset (every 12th line) ----");
        List<String> lines = ours.lines().filter(l -> l.startsWith("baseOffset:")).toList();
        for (int i = 0; i < lines.size(); i += 12) {
            System.out.println(lines.get(i));
        }
        List<DumpLogBatches.Batch> s = check(DumpLogBatches.parse(ours), "strom dump-log");
        List<DumpLogBatches.Batch> k = check(DumpLogBatches.parse(theirs), "kafka-dump-log");
        for (int i = 0; i < s.size(); i++) {
            DumpLogBatches.Batch a = s.get(i);
            DumpLogBatches.Batch b = k.get(i);
            String ctx = "batch " + i + "\n  kafka: " + b.line() + "\n  strom: " + a.line();
            assertEquals(b.producerId(), a.producerId(), ctx);
            assertEquals(b.baseSequence(), a.baseSequence(), ctx);
            assertEquals(b.baseOffset(), a.baseOffset(), ctx);
            assertEquals(b.crc(), a.crc(), ctx);
            assertEquals(b.key(), a.key(), ctx);
        }
    }

    /** The seed's expectations on one tool's batches. */
    static List<DumpLogBatches.Batch> check(List<DumpLogBatches.Batch> batches, String tool) {
        assertEquals(3 * PER_PRODUCER, batches.size(), tool + ": one batch per record");
        for (int i = 0; i < batches.size(); i++) {
            DumpLogBatches.Batch b = batches.get(i);
            assertTrue(b.valid(), tool + ": " + b.line());
            assertEquals(i, b.baseOffset(), tool + ": " + b.line());
            assertEquals(1, b.count(), tool + ": " + b.line());
        }
        long first = batches.get(0).producerId();
        long second = batches.get(PER_PRODUCER).producerId();
        assertTrue(first >= 0, tool + ": first instance has a producer id: " + batches.get(0).line());
        assertTrue(second >= 0, tool + ": second instance has a producer id: " + batches.get(PER_PRODUCER).line());
        assertNotEquals(first, second, tool + ": the second instance gets a different producer id");

        Map<Long, List<Integer>> seqByPid = new LinkedHashMap<>();
        for (DumpLogBatches.Batch b : batches) {
            seqByPid.computeIfAbsent(b.producerId(), x -> new ArrayList<>()).add(b.baseSequence());
        }
        assertEquals(List.of(first, second, -1L), List.copyOf(seqByPid.keySet()), tool + ": producer ids in log order");
        List<Integer> zeroTo24 = IntStream.range(0, PER_PRODUCER).boxed().toList();
        assertEquals(zeroTo24, seqByPid.get(first), tool + ": first instance's baseSequence");
        assertEquals(zeroTo24, seqByPid.get(second), tool + ": second instance's baseSequence");
        assertEquals(IntStream.range(0, PER_PRODUCER).mapToObj(i -> -1).toList(), seqByPid.get(-1L),
            tool + ": idempotence off: baseSequence -1");
        for (int i = 0; i < batches.size(); i++) {
            DumpLogBatches.Batch b = batches.get(i);
            if (i < 2 * PER_PRODUCER) {
                assertEquals(b.producerId() == first ? first : second, b.producerId(), b.line());
                assertEquals(i % PER_PRODUCER, b.baseSequence(), tool + ": " + b.line());
                assertEquals(b.baseSequence(), b.lastSequence(), tool + ": " + b.line());
                assertEquals(0, b.producerEpoch(), tool + ": " + b.line());
            } else {
                assertEquals(-1, b.producerId(), tool + ": " + b.line());
                assertEquals(-1, b.lastSequence(), tool + ": " + b.line());
                assertEquals(-1, b.producerEpoch(), tool + ": " + b.line());
            }
        }
        return batches;
    }
}
