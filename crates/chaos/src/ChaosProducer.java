// The leader-kill workload with the Java producer (kafka-clients), as seed 003 ran it.
// `strom-chaos leader-kill --client java` runs this file with `java -cp <jars> ChaosProducer.java`
// (single-file source launch, so nothing is compiled ahead of time) and talks to it over stdio:
//   stdout "kill"            sent just before record kill-at; the driver waits for a line on stdin
//   stdout "ack N OFFSET"    the callback of record N succeeded
//   stdout "err N MESSAGE"   the callback of record N failed
//   stdout "done"            every callback has run and the producer is closed
// Arguments: bootstrap topic records killAt acks idempotence maxInFlight batchSize

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class ChaosProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        long records = Long.parseLong(args[2]);
        long killAt = Long.parseLong(args[3]);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "chaos-java");
        p.put(ProducerConfig.ACKS_CONFIG, args[4]);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, args[5]);
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, args[6]);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, args[7]);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        // Callbacks print from the producer's I/O thread while main prints "kill": one stream,
        // autoflush off and explicit flushes, synchronized by PrintStream itself.
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (long i = 0; i < records; i++) {
                if (i == killAt) {
                    synchronized (out) {
                        out.println("kill");
                        out.flush();
                    }
                    if (in.readLine() == null) {
                        throw new IllegalStateException("driver closed stdin");
                    }
                }
                final long n = i;
                producer.send(new ProducerRecord<>(topic, "seq-" + i), (md, e) -> {
                    synchronized (out) {
                        if (e == null) {
                            out.println("ack " + n + " " + md.offset());
                        } else {
                            String msg = e.getClass().getSimpleName() + ": " + e.getMessage();
                            out.println("err " + n + " " + msg.replace('\n', ' '));
                        }
                    }
                });
                if (i % 50 == 49) {
                    synchronized (out) {
                        out.flush();
                    }
                    Thread.sleep(1);
                }
            }
            producer.flush();
        }
        synchronized (out) {
            out.println("done");
            out.flush();
        }
    }
}
