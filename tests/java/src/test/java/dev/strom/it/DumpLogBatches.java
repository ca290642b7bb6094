package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;

/**
 * Batch lines of a kafka-dump-log style dump (shallow iteration), from Strom's own
 * {@code strom dump-log} and from Apache Kafka's DumpLogSegments (kafka-tools 4.4).
 */
final class DumpLogBatches {
    private DumpLogBatches() {
    }

    record Batch(long baseOffset, long lastOffset, int count, int baseSequence, int lastSequence,
                 long producerId, short producerEpoch, long position, int size, long crc, boolean valid,
                 String line) {
        /** The fields both tools must agree on (everything but the raw line). */
        String key() {
            return "baseOffset=" + baseOffset + " lastOffset=" + lastOffset + " count=" + count
                + " baseSequence=" + baseSequence + " lastSequence=" + lastSequence + " producerId=" + producerId
                + " producerEpoch=" + producerEpoch + " position=" + position + " size=" + size + " crc=" + crc
                + " isvalid=" + valid;
        }
    }

    /** Every "baseOffset: ..." line of the dump, in log order. */
    static List<Batch> parse(String dump) {
        List<Batch> out = new ArrayList<>();
        for (String line : dump.split("\n")) {
            if (!line.startsWith("baseOffset:")) {
                continue;
            }
            Matcher m = DumpLogOracleTest.BATCH.matcher(line);
            if (!m.matches()) {
                fail("unparseable batch line: " + line);
            }
            out.add(new Batch(Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Integer.parseInt(m.group(3)),
                Integer.parseInt(m.group(4)), Integer.parseInt(m.group(5)), Long.parseLong(m.group(6)),
                Short.parseShort(m.group(7)), Long.parseLong(m.group(12)), Integer.parseInt(m.group(15)),
                Long.parseLong(m.group(18)), Boolean.parseBoolean(m.group(19)), line));
        }
        return out;
    }

    /** {@code strom dump-log --files <log>} ($STROM_BIN), must exit 0. */
    static String strom(Path log) throws IOException, InterruptedException {
        List<String> cmd = List.of(BrokerUnderTest.stromBin().toString(), "dump-log", "--files", log.toString());
        File out = File.createTempFile("strom-dump-log-", ".out");
        File err = File.createTempFile("strom-dump-log-", ".err");
        try {
            Process p = new ProcessBuilder(cmd).redirectOutput(out).redirectError(err)
                .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null"))).start();
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                p.waitFor();
                fail("strom dump-log timed out");
            }
            String stdout = Files.readString(out.toPath(), StandardCharsets.UTF_8);
            String stderr = Files.readString(err.toPath(), StandardCharsets.UTF_8);
            assertEquals(0, p.exitValue(), "strom dump-log " + log + "\n--- stdout:\n" + stdout
                + "\n--- stderr:\n" + stderr);
            return stdout;
        } finally {
            out.delete();
            err.delete();
        }
    }

    /** Apache Kafka's kafka-dump-log (DumpLogSegments 4.4, child JVM) on the same file, must exit 0. */
    static String kafka(Path log) throws IOException, InterruptedException {
        DumpLogOracleTest.Dump d = DumpLogOracleTest.dumpLog("--files", log.toString());
        assertEquals(0, d.exitCode(), "kafka-dump-log " + log + "\n--- stdout:\n" + d.stdout()
            + "\n--- stderr:\n" + d.stderr());
        return d.stdout();
    }

    /** Both tools on one segment: parsed batches, checked to agree batch by batch. Returns Strom's. */
    static List<Batch> bothAgree(Path log) throws IOException, InterruptedException {
        assertTrue(Files.isRegularFile(log), log + " missing");
        List<Batch> ours = parse(strom(log));
        List<Batch> theirs = parse(kafka(log));
        assertEquals(theirs.size(), ours.size(), "batch count: strom dump-log vs kafka-dump-log of " + log);
        for (int i = 0; i < ours.size(); i++) {
            assertEquals(theirs.get(i).key(), ours.get(i).key(), "batch " + i + " of " + log
                + "\n  kafka: " + theirs.get(i).line() + "\n  strom: " + ours.get(i).line());
        }
        return ours;
    }

    /** Splits a multi-file dump at its "Dumping <file>" lines: file name -> that file's section. */
    static java.util.Map<String, String> byFile(String dump) {
        java.util.Map<String, String> out = new java.util.LinkedHashMap<>();
        String current = null;
        StringBuilder sb = new StringBuilder();
        for (String line : dump.split("\n")) {
            if (line.startsWith("Dumping ")) {
                if (current != null) {
                    out.put(current, sb.toString());
                }
                current = line.substring("Dumping ".length()).trim();
                sb.setLength(0);
            } else {
                sb.append(line).append('\n');
            }
        }
        if (current != null) {
            out.put(current, sb.toString());
        }
        return out;
    }

    /**
     * Both tools on several segments at once (one {@code --files a,b,c} run each), checked to agree
     * batch by batch; returns Strom's batches per file, in the order given.
     */
    static java.util.Map<Path, List<Batch>> bothAgree(List<Path> logs) throws IOException, InterruptedException {
        for (Path log : logs) {
            assertTrue(Files.isRegularFile(log), log + " missing");
        }
        String files = String.join(",", logs.stream().map(Path::toString).toList());
        java.util.Map<String, String> ours = byFile(strom(Path.of(files)));
        java.util.Map<String, String> theirs = byFile(kafka(Path.of(files)));
        java.util.Map<Path, List<Batch>> out = new java.util.LinkedHashMap<>();
        for (Path log : logs) {
            String o = ours.get(log.toString());
            String t = theirs.get(log.toString());
            assertTrue(o != null, "strom dump-log printed no section for " + log + ": " + ours.keySet());
            assertTrue(t != null, "kafka-dump-log printed no section for " + log + ": " + theirs.keySet());
            List<Batch> a = parse(o);
            List<Batch> b = parse(t);
            assertEquals(b.size(), a.size(), "batch count: strom dump-log vs kafka-dump-log of " + log);
            for (int i = 0; i < a.size(); i++) {
                assertEquals(b.get(i).key(), a.get(i).key(), "batch " + i + " of " + log
                    + "\n  kafka: " + b.get(i).line() + "\n  strom: " + a.get(i).line());
            }
            out.put(log, a);
        }
        return out;
    }

    static Path firstSegment(Path dataDir, String topic, int partition) {
        return dataDir.resolve(topic + "-" + partition).resolve("00000000000000000000.log");
    }
}
