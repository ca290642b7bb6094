// Consumer-group benchmark driver for scripts/bench/groups.sh: the Java kafka-clients 4.4, one
// JVM, N consumer threads, so that Strom and Kafka are driven by the very same client.
//
//   java -cp <classes>:<kafka libs>/* GroupBench setup     BOOTSTRAP TOPIC PARTITIONS RECORDS_PER_PARTITION
//   java -cp ...                      GroupBench rebalance BOOTSTRAP TOPIC PARTITIONS MEMBERS STRATEGY GROUP
//   java -cp ...                      GroupBench commit    BOOTSTRAP TOPIC PARTITIONS MEMBERS STRATEGY GROUP SECONDS
//
// STRATEGY: range | cooperative-sticky (classic protocol) | consumer (group.protocol=consumer).
//
// Before each measurement one consumer joins and leaves a throwaway group (GROUP-warmup), so the
// client's join path is loaded and warm.
//
// rebalance: every consumer is constructed first (not timed); then t0 is taken and all threads
// subscribe and poll. The group is "consuming" when every member owns at least one partition,
// the members together own all PARTITIONS, and every member has returned at least one record
// from poll() since it was last given partitions (records are pre-produced to every partition
// and nothing is committed, so a partition's new owner always has records to read). join_ms is
// t0 -> that moment. Then one more member is constructed, t1 taken, it subscribes, and incr_ms
// is t1 -> the same condition over N+1 members. The condition must hold for SETTLE_MS
// afterwards (a later rebalance would reset it).
//
// commit: the same join, then for SECONDS each member loops commitSync() of its partitions'
// offsets (incremented by one per commit); prints commits/s over all members and the latency of
// each commitSync (p50/p99/max). Commits of the first warmup.ms (2000) are not counted.
//
// Output: human-readable lines on stderr, one "RESULT key=value ..." line on stdout.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class GroupBench {
    static final long SETTLE_MS = Long.getLong("settle.ms", 1000);
    static final long TIMEOUT_MS = Long.getLong("timeout.ms", 180_000);
    // commit mode: commits in the first WARMUP_MS (JIT, connections) are not counted
    static final long WARMUP_MS = Long.getLong("warmup.ms", 2000);

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "setup":
                setup(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]));
                break;
            case "rebalance":
                rebalance(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), a[5], a[6]);
                break;
            case "commit":
                commit(a[1], a[2], Integer.parseInt(a[3]), Integer.parseInt(a[4]), a[5], a[6],
                        Integer.parseInt(a[7]));
                break;
            default:
                throw new IllegalArgumentException("unknown mode " + a[0]);
        }
        // consumer threads are daemons; exit without waiting for anything else
        System.exit(0);
    }

    static void log(String s) {
        System.err.println("[GroupBench] " + s);
    }

    // --- setup: the topic, and RECORDS_PER_PARTITION records in each partition -----------------
    static void setup(String bs, String topic, int partitions, int perPartition) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        try (Admin admin = Admin.create(ap)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        pp.put(ProducerConfig.ACKS_CONFIG, "1");
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        byte[] value = new byte[100];
        try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < perPartition; i++) {
                for (int part = 0; part < partitions; part++) {
                    p.send(new ProducerRecord<>(topic, part, null, value));
                }
            }
            p.flush();
        }
        log("setup: " + topic + " " + partitions + " partitions x " + perPartition + " records");
        System.out.println("RESULT mode=setup ok=1");
    }

    // --- the group ------------------------------------------------------------------------------
    static Properties consumerProps(String bs, String group, String strategy, String clientId) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        // 100+ consumers in one JVM: keep each one's fetch buffers small
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "1048576");
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "65536");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
        if (strategy.equals("consumer")) {
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        } else {
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
            String cls = switch (strategy) {
                case "range" -> "org.apache.kafka.clients.consumer.RangeAssignor";
                case "cooperative-sticky" ->
                        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
                default -> throw new IllegalArgumentException("strategy " + strategy);
            };
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls);
        }
        return p;
    }

    /** What every member reports; the condition is evaluated under this object's lock. */
    static final class Group {
        final int partitions;
        int expected;
        final int[] owned;
        final boolean[] consumed;
        long since = 0; // nanoTime when the condition last became true, 0 if it does not hold
        int flaps = 0;  // how often it held and then stopped holding
        int generation = -1; // the highest generation (classic) / member epoch (consumer) seen

        Group(int partitions, int capacity) {
            this.partitions = partitions;
            owned = new int[capacity];
            consumed = new boolean[capacity];
        }

        synchronized void update(int m, int ownedNow, Boolean consumedNow) {
            owned[m] = ownedNow;
            if (consumedNow != null) consumed[m] = consumedNow;
            int total = 0;
            boolean ok = true;
            for (int i = 0; i < expected; i++) {
                total += owned[i];
                ok &= owned[i] > 0 && consumed[i];
            }
            ok &= total == partitions;
            if (ok && since == 0) {
                since = System.nanoTime();
            } else if (!ok && since != 0) {
                since = 0;
                flaps++;
            }
            notifyAll();
        }

        synchronized void expect(int n) {
            expected = n;
            since = 0;
            update(0, owned[0], null);
        }

        /** Waits until the condition has held SETTLE_MS; returns when it first became true. */
        synchronized long awaitStable(long deadlineNanos) throws InterruptedException {
            while (true) {
                long now = System.nanoTime();
                if (since != 0 && now - since >= SETTLE_MS * 1_000_000L) return since;
                if (now > deadlineNanos) return 0;
                long waitMs = since != 0 ? SETTLE_MS - (now - since) / 1_000_000L : 50;
                wait(Math.max(1, Math.min(waitMs, 50)));
            }
        }

        synchronized void generation(int g) {
            if (g > generation) generation = g;
        }

        synchronized String describe() {
            int total = 0, empty = 0, notConsumed = 0;
            for (int i = 0; i < expected; i++) {
                total += owned[i];
                if (owned[i] == 0) empty++;
                if (!consumed[i]) notConsumed++;
            }
            return "owned " + total + "/" + partitions + ", members without partitions " + empty
                    + ", members not yet consuming " + notConsumed + ", flaps " + flaps;
        }
    }

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final int idx;
        final String topic;
        final Group group;
        final KafkaConsumer<byte[], byte[]> consumer;
        final CountDownLatch start;
        final AtomicBoolean stop;
        final Set<TopicPartition> owned = new HashSet<>();
        volatile boolean stopPolling = false; // commit mode: the loop switches to committing
        volatile Throwable failure;

        Member(int idx, String bs, String topic, String groupId, String strategy, Group group,
                CountDownLatch start, AtomicBoolean stop) {
            this.idx = idx;
            this.topic = topic;
            this.group = group;
            this.start = start;
            this.stop = stop;
            consumer = new KafkaConsumer<>(consumerProps(bs, groupId, strategy, "m" + idx));
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> added) {
            owned.addAll(added);
            // only a member that gained partitions must show it reads them
            group.update(idx, owned.size(), added.isEmpty() ? null : Boolean.FALSE);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> revoked) {
            owned.removeAll(revoked);
            group.update(idx, owned.size(), null);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> lost) {
            owned.removeAll(lost);
            group.update(idx, owned.size(), Boolean.FALSE);
        }

        @Override
        public void run() {
            try {
                start.await();
                consumer.subscribe(List.of(topic), this);
                while (!stop.get() && !stopPolling) {
                    ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(100));
                    if (!recs.isEmpty()) group.update(idx, owned.size(), Boolean.TRUE);
                    group.generation(consumer.groupMetadata().generationId());
                }
            } catch (WakeupException e) {
                // closing
            } catch (Throwable t) {
                failure = t;
                log("member " + idx + " failed: " + t);
            }
        }
    }

    static final class Run {
        final List<Member> members = new ArrayList<>();
        final List<Thread> threads = new ArrayList<>();
        final AtomicBoolean stop = new AtomicBoolean();
        final Group group;
        final String bs, topic, groupId, strategy;

        Run(String bs, String topic, int partitions, int capacity, String groupId, String strategy) {
            this.bs = bs;
            this.topic = topic;
            this.groupId = groupId;
            this.strategy = strategy;
            group = new Group(partitions, capacity);
        }

        /** Constructs n more members (untimed), then starts them together; returns t0. */
        long addMembers(int n) {
            CountDownLatch latch = new CountDownLatch(1);
            int first = members.size();
            for (int i = 0; i < n; i++) {
                Member m = new Member(first + i, bs, topic, groupId, strategy, group, latch, stop);
                members.add(m);
                Thread t = new Thread(m, "member-" + (first + i));
                t.setDaemon(true);
                t.start();
                threads.add(t);
            }
            group.expect(members.size());
            long t0 = System.nanoTime();
            latch.countDown();
            return t0;
        }

        long await(long t0, String what) throws InterruptedException {
            long since = group.awaitStable(t0 + TIMEOUT_MS * 1_000_000L);
            if (since == 0) {
                throw new IllegalStateException(what + ": not consuming after " + TIMEOUT_MS
                        + " ms: " + group.describe());
            }
            return since;
        }

        void close() throws InterruptedException {
            stop.set(true);
            for (Member m : members) m.consumer.wakeup();
            for (Thread t : threads) t.join(10_000);
            // leave the group quickly; closing 100 members one by one would take long
            List<Thread> closers = new ArrayList<>();
            for (Member m : members) {
                Thread c = new Thread(() -> {
                    try {
                        m.consumer.close(org.apache.kafka.clients.consumer.CloseOptions.timeout(
                                Duration.ofSeconds(5)));
                    } catch (Throwable ignored) {
                        // the measurement is done
                    }
                });
                c.setDaemon(true);
                c.start();
                closers.add(c);
            }
            for (Thread c : closers) c.join(10_000);
        }
    }

    /**
     * One consumer joins a throwaway group and reads a record, then leaves: the JVM has then
     * loaded and warmed the client's join path, so that the first member of the measured group
     * does not pay class loading (~0.5-1 s here, the same against either broker).
     */
    static void warmUp(String bs, String topic, int partitions, String groupId, String strategy)
            throws Exception {
        Run warm = new Run(bs, topic, partitions, 1, groupId + "-warmup", strategy);
        try {
            warm.await(warm.addMembers(1), "warm-up");
        } finally {
            warm.close();
        }
    }

    static void rebalance(String bs, String topic, int partitions, int n, String strategy,
            String groupId) throws Exception {
        warmUp(bs, topic, partitions, groupId, strategy);
        Run run = new Run(bs, topic, partitions, n + 1, groupId, strategy);
        try {
            long t0 = run.addMembers(n);
            long joined = run.await(t0, "join of " + n);
            double joinMs = (joined - t0) / 1e6;
            int joinGen = run.group.generation;
            log(String.format("join of %d members (%s): %.1f ms; %s", n, strategy, joinMs,
                    run.group.describe()));
            long t1 = run.addMembers(1);
            long incr = run.await(t1, "member " + (n + 1) + " joining");
            double incrMs = (incr - t1) / 1e6;
            int incrGen = run.group.generation;
            log(String.format("member %d joins: %.1f ms; %s", n + 1, incrMs, run.group.describe()));
            // join_gen: the generation (classic) or highest member epoch (consumer) the group
            // reached by then; for the classic protocol, how many rebalances the join took
            System.out.printf("RESULT mode=rebalance members=%d strategy=%s join_ms=%.1f incr_ms=%.1f"
                    + " join_gen=%d incr_gen=%d%n", n, strategy, joinMs, incrMs, joinGen, incrGen);
        } finally {
            run.close();
        }
    }

    static void commit(String bs, String topic, int partitions, int n, String strategy,
            String groupId, int seconds) throws Exception {
        warmUp(bs, topic, partitions, groupId, strategy);
        Run run = new Run(bs, topic, partitions, n, groupId, strategy);
        try {
            long t0 = run.addMembers(n);
            run.await(t0, "join of " + n);
            log("joined: " + run.group.describe() + "; committing for " + seconds + " s");
            // stop polling so each thread owns its consumer for commitSync (KafkaConsumer is not
            // thread-safe); the assignment is stable, and max.poll.interval.ms (300 s) is far
            for (Member m : run.members) m.stopPolling = true;
            for (Thread t : run.threads) t.join(10_000);
            long[][] lat = new long[n][];
            int[] counts = new int[n];
            long[] failures = new long[n];
            CountDownLatch go = new CountDownLatch(1);
            long[] window = new long[2];
            List<Thread> ts = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                final int mi = i;
                final Member m = run.members.get(i);
                lat[i] = new long[1 << 16];
                Thread t = new Thread(() -> {
                    Map<TopicPartition, OffsetAndMetadata> offs = new HashMap<>();
                    long next = 1;
                    try {
                        go.await();
                        long begin = window[0], end = window[1];
                        while (System.nanoTime() < end) {
                            offs.clear();
                            for (TopicPartition tp : m.owned) offs.put(tp, new OffsetAndMetadata(next));
                            next++;
                            long s = System.nanoTime();
                            try {
                                m.consumer.commitSync(offs);
                            } catch (Exception e) {
                                if (s >= begin) failures[mi]++;
                                continue;
                            }
                            if (s < begin) continue;
                            long d = System.nanoTime() - s;
                            if (counts[mi] == lat[mi].length) lat[mi] = Arrays.copyOf(lat[mi], counts[mi] * 2);
                            lat[mi][counts[mi]++] = d;
                        }
                    } catch (InterruptedException e) {
                        // stop
                    }
                }, "committer-" + i);
                t.setDaemon(true);
                ts.add(t);
                t.start();
            }
            window[0] = System.nanoTime() + WARMUP_MS * 1_000_000L;
            window[1] = window[0] + seconds * 1_000_000_000L;
            go.countDown();
            for (Thread t : ts) t.join();
            // a commit started inside the window counts; the window is SECONDS long
            double elapsed = seconds;
            int total = 0;
            long fails = 0;
            for (int i = 0; i < n; i++) {
                total += counts[i];
                fails += failures[i];
            }
            long[] all = new long[total];
            int k = 0;
            for (int i = 0; i < n; i++) {
                System.arraycopy(lat[i], 0, all, k, counts[i]);
                k += counts[i];
            }
            Arrays.sort(all);
            double p50 = total == 0 ? 0 : all[(int) (total * 0.50)] / 1e6;
            double p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1e6;
            double max = total == 0 ? 0 : all[total - 1] / 1e6;
            log(String.format("%d commits in %.1f s: %.0f commits/s, p50 %.2f ms, p99 %.2f ms,"
                    + " max %.2f ms, %d failed", total, elapsed, total / elapsed, p50, p99, max, fails));
            System.out.printf("RESULT mode=commit members=%d strategy=%s commits=%d commits_per_sec=%.0f"
                    + " p50_ms=%.2f p99_ms=%.2f max_ms=%.2f failed=%d%n",
                    n, strategy, total, total / elapsed, p50, p99, max, fails);
        } finally {
            run.close();
        }
    }
}
