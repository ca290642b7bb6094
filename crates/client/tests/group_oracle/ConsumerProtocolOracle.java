// The differential oracle for Strom's ConsumerProtocol codec (group/protocol.rs): kafka-clients
// 4.4's own ConsumerProtocol encodes and decodes the same subscriptions and assignments.
//
// One request per stdin line, one answer per stdout line:
//   DS <hex>        decode subscription bytes   -> OK <canonical subscription>
//   DA <hex>        decode assignment bytes     -> OK <canonical assignment>
//   ES <canonical>  encode a subscription (v3)  -> OK <hex>
//   EA <canonical>  encode an assignment (v3)   -> OK <hex>
// or "ERR <exception class>" when Java throws.
//
// Canonical subscription: topics|userData|owned|generation|rack, assignment: partitions|userData,
// where topics is a comma list, owned / partitions are comma lists of topic:partition,
// userData is hex ("-" for null), generation -1 when absent, rack "-" when absent.

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.common.TopicPartition;

public class ConsumerProtocolOracle {
    static String hex(ByteBuffer b) {
        if (b == null) return "-";
        ByteBuffer d = b.duplicate();
        StringBuilder sb = new StringBuilder();
        while (d.hasRemaining()) sb.append(String.format("%02x", d.get() & 0xff));
        return sb.toString();
    }

    static ByteBuffer unhex(String s) {
        if (s.equals("-")) return null;
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return ByteBuffer.wrap(out);
    }

    static List<String> list(String s) {
        List<String> out = new ArrayList<>();
        if (s.isEmpty()) return out;
        for (String x : s.split(",", -1)) out.add(x);
        return out;
    }

    static List<TopicPartition> partitions(String s) {
        List<TopicPartition> out = new ArrayList<>();
        for (String x : list(s)) {
            int i = x.lastIndexOf(':');
            out.add(new TopicPartition(x.substring(0, i), Integer.parseInt(x.substring(i + 1))));
        }
        return out;
    }

    static String partitions(List<TopicPartition> ps) {
        List<String> out = new ArrayList<>();
        for (TopicPartition tp : ps) out.add(tp.topic() + ":" + tp.partition());
        return String.join(",", out);
    }

    static String answer(String line) {
        String op = line.substring(0, 2);
        String arg = line.length() > 3 ? line.substring(3) : "";
        switch (op) {
            case "DS": {
                Subscription s = ConsumerProtocol.deserializeSubscription(unhex(arg));
                return String.join("|", String.join(",", s.topics()), hex(s.userData()),
                    partitions(s.ownedPartitions()), String.valueOf(s.generationId().orElse(-1)),
                    s.rackId().orElse("-"));
            }
            case "DA": {
                Assignment a = ConsumerProtocol.deserializeAssignment(unhex(arg));
                return partitions(a.partitions()) + "|" + hex(a.userData());
            }
            case "ES": {
                String[] f = arg.split("\\|", -1);
                Subscription s = new Subscription(list(f[0]), unhex(f[1]), partitions(f[2]),
                    Integer.parseInt(f[3]), f[4].equals("-") ? Optional.empty() : Optional.of(f[4]));
                return hex(ConsumerProtocol.serializeSubscription(s));
            }
            case "EA": {
                String[] f = arg.split("\\|", -1);
                return hex(ConsumerProtocol.serializeAssignment(new Assignment(partitions(f[0]), unhex(f[1]))));
            }
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
        String line;
        while ((line = in.readLine()) != null) {
            String reply;
            try {
                reply = "OK " + answer(line);
            } catch (Exception e) {
                reply = "ERR " + e.getClass().getSimpleName();
            }
            out.println(reply);
            out.flush();
        }
    }
}
