import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.StringSerializer;
import java.util.*;
import java.util.concurrent.*;

/** Keyless records in one batch per codec to a compacted topic; each record's outcome printed
 * (compared between Strom and Kafka 4.4 by compaction_configs.rs). */
public class ProduceProbe {
  public static void main(String[] a) throws Exception {
    String topic = a[1];
    Properties ap = new Properties(); ap.put("bootstrap.servers", a[0]);
    try (Admin ad = Admin.create(ap)) {
      ad.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("cleanup.policy", "compact,delete")))).all().get();
    }
    for (String comp : new String[]{"none", "gzip", "snappy", "lz4", "zstd"}) {
      Properties p = new Properties();
      p.put("bootstrap.servers", a[0]);
      p.put("key.serializer", StringSerializer.class.getName());
      p.put("value.serializer", StringSerializer.class.getName());
      p.put("compression.type", comp);
      p.put("linger.ms", "1000");
      p.put("retries", "0");
      p.put("enable.idempotence", "false");
      try (KafkaProducer<String, String> pr = new KafkaProducer<>(p)) {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        String[] keys = {"a", null, "b", null, null, null};
        for (String k : keys) fs.add(pr.send(new ProducerRecord<>(topic, 0, k, "v")));
        pr.flush();
        for (int i = 0; i < fs.size(); i++) {
          String out;
          try { RecordMetadata m = fs.get(i).get(); out = "offset " + m.offset(); }
          catch (ExecutionException e) { out = e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage(); }
          System.out.println(comp + " record " + i + " -> " + out);
        }
        RecordMetadata m = pr.send(new ProducerRecord<>(topic, 0, "k", "v")).get();
        System.out.println(comp + " keyed after -> offset " + m.offset());
      }
    }
  }
}
