// Transactions benchmark (scripts/bench/txn.sh), the same Java client (kafka-clients 4.4)
// driving Strom and Apache Kafka:
//
//   TxnBench produce BOOTSTRAP TOPIC TXN_SIZE RECORDS RECORD_BYTES
//       one transactional producer: begin, TXN_SIZE sends, commit, until RECORDS are sent;
//       RESULT records_per_sec txn_per_sec mb_per_sec commit_p50_ms commit_p99_ms
//   TxnBench e2e BOOTSTRAP TOPIC TXN_SIZE SECONDS
//       a transactional producer (TXN_SIZE records per transaction, back to back) and a
//       read_committed consumer in this JVM; latency = the consumer receiving a record - the
//       producer's send() of it (System.nanoTime, one clock);
//       RESULT e2e_p50_ms e2e_p99_ms e2e_max_ms records
import java.time.Duration;
import java.util.*;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class TxnBench {
    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("linger.ms", "5");
        p.put("batch.size", "65536");
        KafkaProducer<byte[], byte[]> pr =
            new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
        pr.initTransactions();
        return pr;
    }

    static double pct(List<Double> xs, double q) {
        if (xs.isEmpty()) return -1;
        List<Double> s = new ArrayList<>(xs);
        Collections.sort(s);
        return s.get(Math.min(s.size() - 1, (int) Math.ceil(q * s.size()) - 1));
    }

    public static void main(String[] a) throws Exception {
        String mode = a[0], bootstrap = a[1], topic = a[2];
        int txnSize = Integer.parseInt(a[3]);
        if (mode.equals("produce")) {
            long records = Long.parseLong(a[4]);
            int bytes = Integer.parseInt(a[5]);
            byte[] value = new byte[bytes];
            new Random(1).nextBytes(value);
            KafkaProducer<byte[], byte[]> pr = producer(bootstrap, "txn-bench-" + UUID.randomUUID());
            // warm-up: a few transactions not measured
            for (int t = 0; t < 5; t++) {
                pr.beginTransaction();
                for (int i = 0; i < txnSize; i++) pr.send(new ProducerRecord<>(topic, value));
                pr.commitTransaction();
            }
            List<Double> commits = new ArrayList<>();
            long sent = 0, txns = 0;
            long t0 = System.nanoTime();
            while (sent < records) {
                pr.beginTransaction();
                for (int i = 0; i < txnSize && sent < records; i++, sent++)
                    pr.send(new ProducerRecord<>(topic, value));
                long c0 = System.nanoTime();
                pr.commitTransaction();
                commits.add((System.nanoTime() - c0) / 1e6);
                txns++;
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            pr.close();
            System.out.printf(Locale.ROOT,
                "RESULT records_per_sec=%.1f txn_per_sec=%.1f mb_per_sec=%.2f commit_p50_ms=%.2f commit_p99_ms=%.2f%n",
                sent / secs, txns / secs, sent * (double) bytes / secs / 1e6,
                pct(commits, 0.5), pct(commits, 0.99));
            return;
        }
        if (!mode.equals("e2e")) throw new IllegalArgumentException(mode);
        int seconds = Integer.parseInt(a[4]);
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("isolation.level", "read_committed");
        cp.put("fetch.max.wait.ms", "100");
        KafkaConsumer<byte[], byte[]> consumer =
            new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo pi : consumer.partitionsFor(topic)) tps.add(new TopicPartition(topic, pi.partition()));
        consumer.assign(tps);
        consumer.seekToEnd(tps);
        for (TopicPartition tp : tps) consumer.position(tp);
        KafkaProducer<byte[], byte[]> pr = producer(bootstrap, "txn-bench-e2e-" + UUID.randomUUID());
        AtomicBoolean stop = new AtomicBoolean();
        Thread prod = new Thread(() -> {
            byte[] v = new byte[100];
            while (!stop.get()) {
                pr.beginTransaction();
                for (int i = 0; i < txnSize; i++) {
                    long now = System.nanoTime();
                    for (int b = 0; b < 8; b++) v[b] = (byte) (now >>> (56 - 8 * b));
                    pr.send(new ProducerRecord<>(topic, v.clone()));
                }
                pr.commitTransaction();
            }
        });
        List<Double> lat = new ArrayList<>();
        long end = System.currentTimeMillis() + seconds * 1000L;
        long warm = System.currentTimeMillis() + 2000;
        prod.start();
        while (System.currentTimeMillis() < end) {
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                long now = System.nanoTime();
                long sent = 0;
                for (int b = 0; b < 8; b++) sent = (sent << 8) | (r.value()[b] & 0xff);
                if (System.currentTimeMillis() > warm) lat.add((now - sent) / 1e6);
            }
        }
        stop.set(true);
        prod.join();
        pr.close();
        consumer.close();
        System.out.printf(Locale.ROOT, "RESULT e2e_p50_ms=%.2f e2e_p99_ms=%.2f e2e_max_ms=%.2f records=%d%n",
            pct(lat, 0.5), pct(lat, 0.99), lat.isEmpty() ? -1.0 : Collections.max(lat), lat.size());
    }
}
