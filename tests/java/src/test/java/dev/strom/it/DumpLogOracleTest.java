package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Format oracle: Apache Kafka's own kafka-dump-log (org.apache.kafka.tools.DumpLogSegments, from
 * kafka-tools 4.4) reads the broker's partition files after a clean shutdown and must find every
 * batch valid, offsets contiguous and the offset/time indexes consistent with the log.
 */
@Timeout(300)
class DumpLogOracleTest {
    static final int PARTITIONS = 3;
    static final int N = 10_000;

    static final Pattern BATCH = Pattern.compile(
        "^baseOffset: (\\d+) lastOffset: (\\d+) count: (\\d+) baseSequence: (-?\\d+) lastSequence: (-?\\d+)"
            + " producerId: (-?\\d+) producerEpoch: (-?\\d+) partitionLeaderEpoch: (-?\\d+)"
            + " isTransactional: (\\w+) isControl: (\\w+) deleteHorizonMs: (\\S+) position: (\\d+)"
            + " (CreateTime|LogAppendTime|NoTimestampType): (-?\\d+) size: (\\d+) magic: (\\d+)"
            + " compresscodec: (\\w+) crc: (\\d+) isvalid: (\\w+)$");
    static final Pattern RECORD = Pattern.compile(
        "^\\| offset: (\\d+) (CreateTime|LogAppendTime): (-?\\d+) keySize: (-?\\d+) valueSize: (-?\\d+)"
            + " sequence: (-?\\d+) headerKeys: \\[([^\\]]*)\\].*$");
    static final Pattern INDEX_ENTRY = Pattern.compile("^offset: (\\d+) position: (\\d+)$");
    static final Pattern TIME_ENTRY = Pattern.compile("^timestamp: (-?\\d+) offset: (\\d+)$");
    static final List<String> STDERR_PROBLEMS = List.of("Mismatches in", "timestamp mismatch",
        "out of order timestamp", "indexed offsets are not found", "Non-consecutive offsets", "Exception",
        "Error", "error");

    BrokerUnderTest broker;

    @RegisterExtension
    final BrokerLogOnFailure logOnFailure = new BrokerLogOnFailure(() -> broker);

    @AfterEach
    void cleanup() {
        if (broker != null) {
            broker.close();
        }
    }

    record Batch(long baseOffset, long lastOffset, int count, long position, long maxTimestamp, int size,
                 int magic, String codec, boolean valid, String line) {
    }

    record Dump(int exitCode, String stdout, String stderr) {
    }

    @Test
    void kafkaDumpLogAcceptsSegmentsAfterCleanShutdown() throws Exception {
        broker = BrokerUnderTest.start();
        Assumptions.assumeTrue(broker.controllable(), "needs a broker this test starts and stops");
        String topic = Clients.uniqueTopic("java-dumplog");
        KeyedData data = new KeyedData(topic, N, System.currentTimeMillis() - 3_600_000L, "lz4");
        try (Admin admin = Clients.admin(broker.bootstrap())) {
            Clients.createTopic(admin, topic, PARTITIONS, Map.of());
        }
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(broker.bootstrap(), "lz4")) {
            data.produce(producer);
        }
        List<TopicPartition> tps = IntStream.range(0, PARTITIONS).mapToObj(p -> new TopicPartition(topic, p)).toList();
        data.verify(Clients.readFromBeginning(broker.bootstrap(), tps, N, Duration.ofSeconds(90)));

        Optional<Integer> exit = broker.stop(30);
        exit.ifPresent(code -> assertEquals(0, code, "exit code after SIGTERM\n" + broker.logTail(30)));

        for (int p = 0; p < PARTITIONS; p++) {
            checkPartition(broker.dataDir().resolve(topic + "-" + p), data, p);
        }

        // the same data survives the clean restart, and new appends continue the offsets
        broker.launch();
        data.verify(Clients.readFromBeginning(broker.bootstrap(), tps, N, Duration.ofSeconds(90)));
        try (KafkaProducer<byte[], byte[]> producer = Clients.producer(broker.bootstrap(), "lz4")) {
            RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, Clients.utf8("after"),
                Clients.utf8("restart"))).get();
            assertEquals(data.ackedCount(0), md.offset(), "first offset appended after restart");
        }
    }

    private void checkPartition(Path dir, KeyedData data, int partition) throws Exception {
        assertTrue(Files.isDirectory(dir), "partition directory " + dir + " missing");
        List<Path> logs;
        try (Stream<Path> s = Files.list(dir)) {
            logs = s.filter(f -> f.getFileName().toString().matches("\\d{20}\\.log")).sorted().toList();
        }
        assertFalse(logs.isEmpty(), "no segment in " + dir);
        long nextOffset = 0;
        long records = 0;
        for (Path log : logs) {
            String base = log.getFileName().toString().substring(0, 20);
            long baseOffset = Long.parseLong(base);
            assertEquals(nextOffset, baseOffset, "segment " + log + " base offset");
            Path index = dir.resolve(base + ".index");
            Path timeIndex = dir.resolve(base + ".timeindex");
            assertTrue(Files.exists(index), index + " missing");
            assertTrue(Files.exists(timeIndex), timeIndex + " missing");

            Dump dump = dumpLog("--files", log + "," + index + "," + timeIndex, "--deep-iteration");
            String ctx = "kafka-dump-log of " + log + "\n--- stderr:\n" + dump.stderr
                + "\n--- stdout (head):\n" + head(dump.stdout, 40);
            assertEquals(0, dump.exitCode, ctx);
            for (String problem : STDERR_PROBLEMS) {
                assertFalse(dump.stderr.contains(problem), "'" + problem + "' reported: " + ctx);
            }
            assertFalse(dump.stdout.contains("invalid bytes at the end"), ctx);
            assertTrue(dump.stdout.contains("Log starting offset: " + baseOffset), ctx);

            List<Batch> batches = new ArrayList<>();
            List<long[]> recs = new ArrayList<>(); // offset, timestamp
            List<long[]> indexEntries = new ArrayList<>(); // offset, position
            List<long[]> timeEntries = new ArrayList<>(); // timestamp, offset
            String section = "";
            for (String line : dump.stdout.split("\n")) {
                if (line.startsWith("Dumping ")) {
                    section = line.substring(line.lastIndexOf('.') + 1);
                    continue;
                }
                Matcher m;
                if (section.equals("log") && (m = BATCH.matcher(line)).matches()) {
                    batches.add(new Batch(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)),
                        Integer.parseInt(m.group(3)), Long.parseLong(m.group(12)), Long.parseLong(m.group(14)),
                        Integer.parseInt(m.group(15)), Integer.parseInt(m.group(16)), m.group(17),
                        Boolean.parseBoolean(m.group(19)), line));
                } else if (section.equals("log") && (m = RECORD.matcher(line)).matches()) {
                    assertEquals("CreateTime", m.group(2), line);
                    assertEquals("idx,src,empty", m.group(7), line);
                    recs.add(new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(3))});
                } else if (section.equals("index") && (m = INDEX_ENTRY.matcher(line)).matches()) {
                    indexEntries.add(new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2))});
                } else if (section.equals("timeindex") && (m = TIME_ENTRY.matcher(line)).matches()) {
                    timeEntries.add(new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2))});
                } else if (section.equals("log") && !line.startsWith("Log starting offset") && !line.isBlank()) {
                    fail("unexpected kafka-dump-log line: " + line + "\n" + ctx);
                } else if (section.equals("index") && !line.isBlank() && !line.endsWith(" is empty.")) {
                    fail("unexpected index dump line: " + line + "\n" + ctx);
                } else if (section.equals("timeindex") && !line.isBlank()) {
                    fail("unexpected time index dump line: " + line + "\n" + ctx);
                }
            }

            assertFalse(batches.isEmpty(), "no batch in " + log + "\n" + ctx);
            Map<Long, Batch> byLastOffset = new HashMap<>();
            long expectPos = 0;
            for (Batch b : batches) {
                assertTrue(b.valid, "invalid batch (CRC) " + b.line);
                assertEquals(2, b.magic, b.line);
                assertEquals("lz4", b.codec, b.line);
                assertEquals(nextOffset, b.baseOffset, "baseOffsets not contiguous: " + b.line);
                assertEquals(b.lastOffset - b.baseOffset + 1, b.count, b.line);
                assertEquals(expectPos, b.position, b.line);
                nextOffset = b.lastOffset + 1;
                expectPos += b.size;
                records += b.count;
                byLastOffset.put(b.lastOffset, b);
            }
            assertEquals(Files.size(log), expectPos, "log size vs sum of batch sizes");

            // deep iteration: every record, with the producer's timestamp
            long segmentRecords = batches.stream().mapToLong(Batch::count).sum();
            assertEquals(segmentRecords, recs.size(), "records seen by deep iteration of " + log);
            for (long[] r : recs) {
                Integer i = data.acked.get(partition).get(r[0]);
                assertTrue(i != null, "record at offset " + r[0] + " was never acked");
                assertEquals(data.timestamp(i), r[1], "timestamp at offset " + r[0]);
            }

            // offset index: each entry points at a batch (its last offset) and that batch's position
            for (long[] e : indexEntries) {
                Batch b = byLastOffset.get(e[0]);
                assertTrue(b != null, "index entry offset " + e[0] + " is not a batch's last offset\n" + ctx);
                assertEquals(b.position, e[1], "index entry " + e[0] + " position");
            }
            if (Files.size(log) > 3 * 4096) {
                assertFalse(indexEntries.isEmpty(),
                    "log of " + Files.size(log) + " bytes but the sparse offset index is empty\n" + ctx);
                assertFalse(timeEntries.isEmpty(),
                    "log of " + Files.size(log) + " bytes but the time index is empty\n" + ctx);
            }
            long prevTs = Long.MIN_VALUE;
            for (long[] e : timeEntries) {
                Batch b = byLastOffset.get(e[1]);
                assertTrue(b != null, "time index offset " + e[1] + " is not a batch's last offset\n" + ctx);
                assertEquals(b.maxTimestamp, e[0], "time index entry for offset " + e[1]);
                assertTrue(e[0] > prevTs, "time index timestamps not increasing");
                prevTs = e[0];
            }

            Dump sanity = dumpLog("--files", index + "," + timeIndex, "--index-sanity-check");
            String sctx = "kafka-dump-log --index-sanity-check\n--- stdout:\n" + sanity.stdout
                + "\n--- stderr:\n" + sanity.stderr;
            assertEquals(0, sanity.exitCode, sctx);
            assertTrue(sanity.stdout.contains(index + " passed sanity check.")
                || sanity.stdout.contains(index + " is empty."), sctx);
            assertTrue(sanity.stdout.contains(timeIndex + " passed sanity check."), sctx);
        }
        assertEquals(data.ackedCount(partition), records, "records in partition " + partition + " on disk");
        assertEquals(data.ackedCount(partition), nextOffset, "log end offset of partition " + partition);
    }

    static String head(String s, int lines) {
        return String.join("\n", s.lines().limit(lines).toList());
    }

    static String testClasspath() {
        String cp = System.getProperty("surefire.test.class.path");
        if (cp == null || cp.isEmpty()) {
            cp = System.getProperty("java.class.path");
        }
        return cp;
    }

    /** Runs kafka-dump-log in a child JVM on this test's classpath (kafka-tools 4.4). */
    static Dump dumpLog(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(
            Path.of(System.getProperty("java.home"), "bin", "java").toString(),
            "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", testClasspath(), "org.apache.kafka.tools.DumpLogSegments"));
        cmd.addAll(List.of(args));
        File out = File.createTempFile("dump-log-", ".out");
        File err = File.createTempFile("dump-log-", ".err");
        try {
            Process p = new ProcessBuilder(cmd).redirectOutput(out).redirectError(err).start();
            if (!p.waitFor(180, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                fail("kafka-dump-log timed out");
            }
            return new Dump(p.exitValue(), Files.readString(out.toPath(), StandardCharsets.UTF_8),
                Files.readString(err.toPath(), StandardCharsets.UTF_8));
        } finally {
            out.delete();
            err.delete();
        }
    }
}
