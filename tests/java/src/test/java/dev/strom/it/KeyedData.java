package dev.strom.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;

/** Deterministic keyed records with headers: produce them, then check what a consumer read back. */
final class KeyedData {
    final String topic;
    final int count;
    final long baseTimestamp;
    final String tag;
    /** (partition -> offset -> record index), filled by {@link #produce}. */
    final Map<Integer, TreeMap<Long, Integer>> acked = new TreeMap<>();

    KeyedData(String topic, int count, long baseTimestamp, String tag) {
        this.topic = topic;
        this.count = count;
        this.baseTimestamp = baseTimestamp;
        this.tag = tag;
    }

    byte[] key(int i) {
        return Clients.utf8(String.format("key-%06d", i));
    }

    byte[] value(int i) {
        byte[] head = Clients.utf8(String.format("value-%06d-%s-", i, tag));
        byte[] v = Arrays.copyOf(head, head.length + (i % 97));
        Arrays.fill(v, head.length, v.length, (byte) (i % 251));
        return v;
    }

    List<Header> headers(int i) {
        return List.of(new RecordHeader("idx", Clients.utf8(Integer.toString(i))),
            new RecordHeader("src", Clients.utf8("java-" + tag)),
            new RecordHeader("empty", new byte[0]));
    }

    long timestamp(int i) {
        return baseTimestamp + i;
    }

    /** Sends all records, waits for every ack, checks per-partition offsets are 0..n-1 in send order. */
    void produce(KafkaProducer<byte[], byte[]> producer) throws Exception {
        List<Future<RecordMetadata>> futures = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            futures.add(producer.send(new ProducerRecord<>(topic, null, timestamp(i), key(i), value(i), headers(i))));
        }
        producer.flush();
        for (int i = 0; i < count; i++) {
            RecordMetadata md = futures.get(i).get();
            assertEquals(topic, md.topic());
            Integer prev = acked.computeIfAbsent(md.partition(), p -> new TreeMap<>()).put(md.offset(), i);
            assertEquals(null, prev, "offset " + md.offset() + " acked twice in partition " + md.partition());
        }
        for (Map.Entry<Integer, TreeMap<Long, Integer>> e : acked.entrySet()) {
            long expect = 0;
            int lastIdx = -1;
            for (Map.Entry<Long, Integer> oe : e.getValue().entrySet()) {
                assertEquals(expect++, oe.getKey(), "partition " + e.getKey() + ": acked offsets not contiguous");
                assertTrue(oe.getValue() > lastIdx, "partition " + e.getKey() + ": offsets not in send order");
                lastIdx = oe.getValue();
            }
        }
    }

    long ackedCount(int partition) {
        return acked.getOrDefault(partition, new TreeMap<>()).size();
    }

    /** Every acked record read back exactly once, in offset order per partition, with key/value/headers/ts. */
    void verify(List<ConsumerRecord<byte[], byte[]>> records) {
        assertEquals(count, records.size(), "records consumed");
        Map<Integer, Long> nextOffset = new HashMap<>();
        for (ConsumerRecord<byte[], byte[]> r : records) {
            assertEquals(topic, r.topic());
            long expectOffset = nextOffset.getOrDefault(r.partition(), 0L);
            assertEquals(expectOffset, r.offset(), "partition " + r.partition() + ": offset order");
            nextOffset.put(r.partition(), expectOffset + 1);
            Integer i = acked.getOrDefault(r.partition(), new TreeMap<>()).get(r.offset());
            assertNotNull(i, "no acked record at " + r.partition() + "/" + r.offset());
            assertArrayEquals(key(i), r.key(), "key at " + r.partition() + "/" + r.offset());
            assertArrayEquals(value(i), r.value(), "value at " + r.partition() + "/" + r.offset());
            Header[] hs = r.headers().toArray();
            List<Header> want = headers(i);
            assertEquals(want.size(), hs.length, "header count at " + r.partition() + "/" + r.offset());
            for (int h = 0; h < hs.length; h++) {
                assertEquals(want.get(h).key(), hs[h].key());
                assertArrayEquals(want.get(h).value(), hs[h].value());
            }
            assertEquals(timestamp(i), r.timestamp());
            assertEquals(TimestampType.CREATE_TIME, r.timestampType());
        }
        for (Map.Entry<Integer, TreeMap<Long, Integer>> e : acked.entrySet()) {
            assertEquals((long) e.getValue().size(), nextOffset.getOrDefault(e.getKey(), 0L),
                "records read from partition " + e.getKey());
        }
    }
}
