// Prints Kafka's own TransactionLog.keyToBytes / valueToBytes, in hex, for the cases read from
// stdin (one per line: id|producerId|epoch|timeoutMs|stateId|startMs|lastUpdateMs|clientTv|
// levelTv|topic:partition,... ; an empty state id means a tombstone). Used by
// txn_log_bytes.rs to check Strom's encoding byte for byte.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HashSet;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.coordinator.transaction.TransactionLog;
import org.apache.kafka.coordinator.transaction.TransactionState;
import org.apache.kafka.coordinator.transaction.TxnTransitMetadata;
import org.apache.kafka.server.common.TransactionVersion;

public class TxnLogBytes {
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\\|", -1);
            String key = hex(TransactionLog.keyToBytes(f[0]));
            if (f[4].isEmpty()) {
                System.out.println(key + " -");
                continue;
            }
            HashSet<TopicPartition> tps = new HashSet<>();
            if (!f[9].isEmpty()) {
                for (String tp : f[9].split(",")) {
                    int i = tp.lastIndexOf(':');
                    tps.add(new TopicPartition(tp.substring(0, i), Integer.parseInt(tp.substring(i + 1))));
                }
            }
            TxnTransitMetadata t = new TxnTransitMetadata(
                Long.parseLong(f[1]), -1L, -1L, Short.parseShort(f[2]), (short) -1,
                Integer.parseInt(f[3]), TransactionState.fromId(Byte.parseByte(f[4])), tps,
                Long.parseLong(f[5]), Long.parseLong(f[6]),
                TransactionVersion.fromFeatureLevel(Short.parseShort(f[7])));
            byte[] v = TransactionLog.valueToBytes(t, TransactionVersion.fromFeatureLevel(Short.parseShort(f[8])));
            System.out.println(key + " " + hex(v));
        }
    }
}
