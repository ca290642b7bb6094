package dev.strom.apps;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The stateful Kafka Streams application of tests/python/test_apps.py: words of the input lines
 * counted into a KTable ("counts", a persistent RocksDB store with a compacted changelog) and,
 * per tumbling window of WINDOW_MS on the records' timestamps, into a windowed KTable
 * ("windowed-counts", changelog compact,delete). Both are written to output topics with String
 * keys and values ("word" -> "n", "word@windowStartMs" -> "n") so that any client reads them.
 *
 * <p>Usage: {@code WordCountApp BOOTSTRAP APPLICATION_ID STATE_DIR REPLICATION_FACTOR INPUT
 * COUNTS_OUTPUT WINDOWED_OUTPUT WINDOW_MS [KEY=VALUE ...]}, the optional pairs being further
 * Streams configs (e.g. {@code topic.segment.ms=1000} so that the changelogs roll segments the
 * log cleaner can compact while the test runs). It runs with processing.guarantee=exactly_once_v2
 * until SIGTERM (then closes cleanly); it prints {@code STATE <new state>} on every state change
 * and {@code RESTORED <store> <partition> <records>} when a store finished restoring, one line each
 * on stdout, for the test to wait on and to check that a wiped state dir was restored.
 */
public final class WordCountApp {
    private WordCountApp() {
    }

    static Topology topology(String input, String countsOut, String windowedOut, long windowMs) {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> lines = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        KGroupedStream<String, String> words = lines
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
            .filter((k, w) -> !w.isEmpty())
            .groupBy((k, w) -> w, Grouped.with("words", Serdes.String(), Serdes.String()));

        words.count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .mapValues(n -> Long.toString(n))
            .to(countsOut, Produced.with(Serdes.String(), Serdes.String()));

        // grace: input batches are produced in timestamp order per partition, but the repartition
        // topic interleaves partitions, so records of a window may arrive after a later one's
        words.windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(windowMs), Duration.ofHours(1)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("windowed-counts")
                .withRetention(Duration.ofHours(2)))
            .toStream()
            .map((wk, n) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), Long.toString(n)))
            .to(windowedOut, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length < 8) {
            System.err.println("usage: WordCountApp BOOTSTRAP APPLICATION_ID STATE_DIR REPLICATION_FACTOR "
                + "INPUT COUNTS_OUTPUT WINDOWED_OUTPUT WINDOW_MS [KEY=VALUE ...]");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[3]));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        // short timeouts so that a killed broker's partitions move on quickly
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 10000);
        p.put(StreamsConfig.METADATA_MAX_AGE_CONFIG, 2000);
        // purge consumed repartition records (DeleteRecords) after every commit, not every 30 s
        p.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 500);
        for (int i = 8; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            p.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }

        KafkaStreams streams = new KafkaStreams(
            topology(args[4], args[5], args[6], Long.parseLong(args[7])), p);
        streams.setStateListener((now, before) -> say("STATE " + now));
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            private final AtomicLong restored = new AtomicLong();

            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                say("RESTORE_START " + store + " " + tp.partition() + " " + start + " " + end);
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                restored.addAndGet(n);
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                say("RESTORED " + store + " " + tp.partition() + " " + total);
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            say("UNCAUGHT " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            say("CLOSED");
            done.countDown();
        }, "close-streams"));
        streams.start();
        done.await();
    }

    private static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }
}
