// Log cleaner benchmark's producer (scripts/bench/cleaner.sh), the same Java client
// (kafka-clients 4.4) driving Strom and Apache Kafka:
//
//   CleanerBench produce BOOTSTRAP TOPIC MAX_MB SECONDS KEYS RECORD_BYTES SEED
//       one producer (acks=all, idempotent, linger.ms=5, batch.size=64 KiB, no compression)
//       sends records with keys key-0..key-(KEYS-1), uniformly drawn, and values of
//       RECORD_BYTES, until MAX_MB of values are sent or SECONDS have passed (0: no limit);
//       RESULT records=N mb=M seconds=S records_per_sec=R mb_per_sec=B
//   CleanerBench clean BOOTSTRAP TOPIC CHECKPOINT_FILE ACTIVE_BASE TIMEOUT_SECONDS
//       sets the topic's min.compaction.lag.ms to 0 (IncrementalAlterConfigs), then polls the
//       log dir's cleaner-offset-checkpoint every 20 ms until the partition's entry reaches
//       ACTIVE_BASE; the time from the alter's answer to that:
//       RESULT seconds=S (or RESULT seconds=timeout)
import java.nio.file.*;
import java.util.*;

import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;

import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

public class CleanerBench {
    static long checkpoint(Path file, String topic) {
        try {
            for (String l : Files.readAllLines(file)) {
                String[] f = l.split(" ");
                if (f.length == 3 && f[0].equals(topic) && f[1].equals("0")) return Long.parseLong(f[2]);
            }
        } catch (Exception e) {
            // not written yet, or being replaced
        }
        return -1;
    }

    static void clean(String[] a) throws Exception {
        String bootstrap = a[1], topic = a[2];
        Path file = Paths.get(a[3]);
        long active = Long.parseLong(a[4]);
        long timeoutNs = Long.parseLong(a[5]) * 1_000_000_000L;
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            admin.describeCluster().nodes().get();
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            AlterConfigOp op = new AlterConfigOp(
                new org.apache.kafka.clients.admin.ConfigEntry("min.compaction.lag.ms", "0"),
                AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get();
            long t0 = System.nanoTime();
            while (checkpoint(file, topic) < active) {
                if (System.nanoTime() - t0 > timeoutNs) {
                    System.out.println("RESULT seconds=timeout");
                    return;
                }
                Thread.sleep(20);
            }
            System.out.printf(Locale.ROOT, "RESULT seconds=%.3f%n", (System.nanoTime() - t0) / 1e9);
        }
    }

    public static void main(String[] a) throws Exception {
        if (a[0].equals("clean")) {
            clean(a);
            return;
        }
        if (!a[0].equals("produce")) throw new IllegalArgumentException(a[0]);
        String bootstrap = a[1], topic = a[2];
        long maxBytes = Long.parseLong(a[3]) * 1_000_000L;
        long seconds = Long.parseLong(a[4]);
        int keys = Integer.parseInt(a[5]);
        int recordBytes = Integer.parseInt(a[6]);
        Random rnd = new Random(Long.parseLong(a[7]));
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("linger.ms", "5");
        p.put("batch.size", "65536");
        p.put("compression.type", "none");
        KafkaProducer<byte[], byte[]> pr =
            new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        byte[] value = new byte[recordBytes];
        rnd.nextBytes(value);
        long sent = 0;
        long t0 = System.nanoTime();
        long deadline = seconds > 0 ? t0 + seconds * 1_000_000_000L : Long.MAX_VALUE;
        while (sent * recordBytes < maxBytes && System.nanoTime() < deadline) {
            byte[] key = ("key-" + rnd.nextInt(keys)).getBytes();
            // A different value per send (its first 8 bytes), so that the cleaner's output is
            // not trivially equal to its input.
            byte[] v = value.clone();
            for (int i = 0; i < 8 && i < v.length; i++) v[i] = (byte) (sent >>> (8 * i));
            pr.send(new ProducerRecord<>(topic, 0, key, v), (md, e) -> {
                if (e != null) {
                    System.err.println("send failed: " + e);
                    System.exit(1);
                }
            });
            sent++;
        }
        pr.flush();
        double secs = (System.nanoTime() - t0) / 1e9;
        pr.close();
        double mb = sent * (double) recordBytes / 1e6;
        System.out.printf(Locale.ROOT,
            "RESULT records=%d mb=%.1f seconds=%.2f records_per_sec=%.1f mb_per_sec=%.2f%n",
            sent, mb, secs, sent / secs, mb / secs);
    }
}
