package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Seed 003's config checks with KafkaProducer 4.4 itself, bootstrapped at a running Strom:
 * <ul>
 *   <li>enable.idempotence=true explicitly with acks=1, max.in.flight.requests.per.connection=6 or
 *       retries=0: ConfigException at construction, with Kafka 4.4's exact messages (the constants
 *       below; crates/client asserts the same strings);</li>
 *   <li>the accepted combinations construct, send, and write batches with a producer id and
 *       baseSequence 0;</li>
 *   <li>enable.idempotence not set: acks=1 or retries=0 construct fine and silently turn
 *       idempotence off: the batch in the log has producerId -1 / baseSequence -1. But
 *       max.in.flight.requests.per.connection=6 is rejected even then (with acks=1 or retries=0
 *       too), with the same in-flight message; only enable.idempotence=false allows it.</li>
 * </ul>
 * The log is read after a clean shutdown by {@code strom dump-log} and by Kafka's kafka-dump-log.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
class IdempotenceConfigTest {
    /** enable.idempotence=true with acks=1 (or 0). */
    static final String ACKS_MESSAGE =
        "Must set acks to all in order to use the idempotent producer. Otherwise we cannot guarantee idempotence.";
    /** enable.idempotence=true with max.in.flight.requests.per.connection=6. */
    static final String IN_FLIGHT_6_MESSAGE =
        "To use the idempotent producer, max.in.flight.requests.per.connection must be set to at most 5."
            + " Current value is 6.";
    /** enable.idempotence=true with retries=0. */
    static final String RETRIES_MESSAGE = "Must set retries to non-zero when using the idempotent producer.";

    BrokerUnderTest broker;

    @RegisterExtension
    final BrokerLogOnFailure logOnFailure = new BrokerLogOnFailure(() -> broker);

    @AfterEach
    void cleanup() {
        if (broker != null) {
            broker.close();
        }
    }

    static Properties props(String bootstrap, Map<String, Object> overrides) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 30_000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60_000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 60_000);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.putAll(overrides);
        return p;
    }

    static Map<String, Object> cfg(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    static final String IDEM = ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG;
    static final String ACKS = ProducerConfig.ACKS_CONFIG;
    static final String IN_FLIGHT = ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION;
    static final String RETRIES = ProducerConfig.RETRIES_CONFIG;

    @Test
    void explicitIdempotenceRejectsConflictingConfigsAtConstruction() throws Exception {
        broker = BrokerUnderTest.start();
        record Case(Map<String, Object> cfg, String message) {
        }
        List<Case> cases = List.of(
            new Case(cfg(IDEM, "true", ACKS, "1"), ACKS_MESSAGE),
            new Case(cfg(IDEM, "true", IN_FLIGHT, 6), IN_FLIGHT_6_MESSAGE),
            new Case(cfg(IDEM, "true", RETRIES, 0), RETRIES_MESSAGE),
            // beyond the seed: acks=0 gives the acks message; with several conflicts the first
            // check wins, in the order retries, acks, in-flight
            new Case(cfg(IDEM, "true", ACKS, "0"), ACKS_MESSAGE),
            new Case(cfg(IDEM, "true", ACKS, "1", IN_FLIGHT, 6), ACKS_MESSAGE),
            new Case(cfg(IDEM, "true", IN_FLIGHT, 6, RETRIES, 0), RETRIES_MESSAGE),
            new Case(cfg(IDEM, "true", ACKS, "1", IN_FLIGHT, 6, RETRIES, 0), RETRIES_MESSAGE),
            // enable.idempotence NOT set: in-flight 6 is still rejected, even with acks=1 / retries=0
            // (acks/retries only set a flag that turns idempotence off after the in-flight check)
            new Case(cfg(IN_FLIGHT, 6), IN_FLIGHT_6_MESSAGE),
            new Case(cfg(ACKS, "1", IN_FLIGHT, 6), IN_FLIGHT_6_MESSAGE),
            new Case(cfg(RETRIES, 0, IN_FLIGHT, 6), IN_FLIGHT_6_MESSAGE));
        for (Case c : cases) {
            ConfigException e = assertThrows(ConfigException.class,
                () -> new KafkaProducer<byte[], byte[]>(props(broker.bootstrap(), c.cfg())).close(),
                c.cfg() + " must fail at construction");
            System.out.println(c.cfg() + " -> ConfigException: " + e.getMessage());
            assertEquals(c.message(), e.getMessage(), c.cfg().toString());
        }
    }

    /** One producer per case, one record each to its own partition; returns the partition's log. */
    private List<Path> sendOneEach(String topic, List<Map<String, Object>> cases) throws Exception {
        try (Admin admin = Clients.admin(broker.bootstrap())) {
            Clients.createTopic(admin, topic, cases.size(), Map.of());
        }
        List<Path> logs = new ArrayList<>();
        for (int p = 0; p < cases.size(); p++) {
            Map<String, Object> c = cases.get(p);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props(broker.bootstrap(), c))) {
                RecordMetadata md = producer.send(new ProducerRecord<>(topic, p, null, Clients.utf8("case-" + p)))
                    .get(60, TimeUnit.SECONDS);
                assertEquals(0, md.offset(), c + ": offset");
                System.out.println(c + " -> constructed, sent to partition " + p + " offset " + md.offset());
            }
            logs.add(DumpLogBatches.firstSegment(broker.dataDir(), topic, p));
        }
        Optional<Integer> exit = broker.stop(30);
        exit.ifPresent(code -> assertEquals(0, code, "exit code after SIGTERM\n" + broker.logTail(30)));
        return logs;
    }

    @Test
    void acceptedCombinationsConstructSendAndAreIdempotent() throws Exception {
        broker = BrokerUnderTest.start();
        Assumptions.assumeTrue(broker.controllable(), "needs a broker this test starts, stops and reads");
        List<Map<String, Object>> cases = List.of(
            cfg(IDEM, "true", ACKS, "all"),
            cfg(IDEM, "true", ACKS, "-1"),
            cfg(IDEM, "true", IN_FLIGHT, 5),
            cfg(IDEM, "true"), // retries default (Integer.MAX_VALUE)
            cfg(IDEM, "true", RETRIES, Integer.MAX_VALUE),
            cfg(IDEM, "true", ACKS, "all", IN_FLIGHT, 5, RETRIES, Integer.MAX_VALUE),
            cfg()); // all defaults: idempotent
        List<Path> logs = sendOneEach(Clients.uniqueTopic("idem-accepted"), cases);
        Map<Path, List<DumpLogBatches.Batch>> dumps = DumpLogBatches.bothAgree(logs);
        Set<Long> pids = new HashSet<>();
        for (int p = 0; p < cases.size(); p++) {
            List<DumpLogBatches.Batch> batches = dumps.get(logs.get(p));
            assertEquals(1, batches.size(), cases.get(p) + ": batches");
            DumpLogBatches.Batch b = batches.get(0);
            System.out.println(cases.get(p) + " -> " + b.line());
            assertTrue(b.producerId() >= 0, cases.get(p) + ": idempotent, has a producer id: " + b.line());
            assertEquals(0, b.producerEpoch(), cases.get(p) + ": " + b.line());
            assertEquals(0, b.baseSequence(), cases.get(p) + ": " + b.line());
            assertTrue(b.valid(), b.line());
            assertTrue(pids.add(b.producerId()), "each instance gets its own producer id: " + b.line());
        }
    }

    @Test
    void conflictingConfigsWithoutExplicitIdempotenceSilentlyDisableIt() throws Exception {
        broker = BrokerUnderTest.start();
        Assumptions.assumeTrue(broker.controllable(), "needs a broker this test starts, stops and reads");
        List<Map<String, Object>> cases = List.of(
            cfg(ACKS, "1"), // the seed: "只设置 acks=1(不显式设置幂等) -> 创建成功"
            cfg(RETRIES, 0),
            cfg(ACKS, "1", RETRIES, 0),
            cfg(IDEM, "false"),
            cfg(IDEM, "false", ACKS, "1", IN_FLIGHT, 6)); // the seed's explicit-off line
        List<Path> logs = sendOneEach(Clients.uniqueTopic("idem-disabled"), cases);
        Map<Path, List<DumpLogBatches.Batch>> dumps = DumpLogBatches.bothAgree(logs);
        for (int p = 0; p < cases.size(); p++) {
            List<DumpLogBatches.Batch> batches = dumps.get(logs.get(p));
            assertEquals(1, batches.size(), cases.get(p) + ": batches");
            DumpLogBatches.Batch b = batches.get(0);
            System.out.println(cases.get(p) + " -> " + b.line());
            assertEquals(-1, b.producerId(), cases.get(p) + ": idempotence silently off: " + b.line());
            assertEquals(-1, b.producerEpoch(), cases.get(p) + ": " + b.line());
            assertEquals(-1, b.baseSequence(), cases.get(p) + ": " + b.line());
            assertTrue(b.valid(), b.line());
        }
    }
}
