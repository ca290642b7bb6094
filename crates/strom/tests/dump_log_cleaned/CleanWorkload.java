import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;
import java.util.*;

/** A keyed workload for a compacted topic rolled every 100 ms (segment.ms): an idempotent gzip
 * producer (rounds over five keys, two tombstones, a last batch later superseded), an aborted
 * and a committed transaction, then an uncompressed idempotent producer. Used by
 * dump_log_cleaned.rs to make Kafka 4.4 clean segments. */
public class CleanWorkload {
  static Properties props(String bootstrap, String compression) {
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    p.put("linger.ms", "5");
    p.put("compression.type", compression);
    return p;
  }

  public static void main(String[] a) throws Exception {
    String topic = a[1];
    try (KafkaProducer<String, String> pr = new KafkaProducer<>(props(a[0], "gzip"))) {
      for (int r = 0; r < 4; r++) {
        for (int k = 0; k < 5; k++) pr.send(new ProducerRecord<>(topic, 0, "k" + k, "v" + r));
        pr.flush();
        Thread.sleep(150);
      }
      pr.send(new ProducerRecord<>(topic, 0, "k1", null));
      pr.send(new ProducerRecord<>(topic, 0, "k2", null));
      pr.flush();
      Thread.sleep(150);
      pr.send(new ProducerRecord<>(topic, 0, "e", "first"));
      pr.flush();
      Thread.sleep(150);
    }
    Properties t = props(a[0], "gzip");
    t.put("transactional.id", "tx-" + topic);
    try (KafkaProducer<String, String> pr = new KafkaProducer<>(t)) {
      pr.initTransactions();
      pr.beginTransaction();
      pr.send(new ProducerRecord<>(topic, 0, "k3", "aborted"));
      pr.flush();
      pr.abortTransaction();
      Thread.sleep(150);
      pr.beginTransaction();
      pr.send(new ProducerRecord<>(topic, 0, "k4", "committed"));
      pr.commitTransaction();
      Thread.sleep(150);
    }
    try (KafkaProducer<String, String> pr = new KafkaProducer<>(props(a[0], "none"))) {
      pr.send(new ProducerRecord<>(topic, 0, "e", "again"));
      for (int r = 0; r < 3; r++) {
        pr.send(new ProducerRecord<>(topic, 0, "k0", "late" + r));
        pr.flush();
        Thread.sleep(150);
      }
    }
    System.out.println("done");
  }
}
