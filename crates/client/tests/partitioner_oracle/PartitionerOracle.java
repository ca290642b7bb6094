// Vector oracle for tests/partitioner_vectors.rs: runs kafka-clients 4.4's own classes
// (Utils.murmur2, BuiltInPartitioner.partitionForKey, BuiltInPartitioner's sticky sequence,
// RoundRobinPartitioner) on the cases the Rust test sends, one case per stdin line, one JSON
// line per case on stdout. It lives in BuiltInPartitioner's package because the sticky calls
// (peekCurrentPartitionInfo, updatePartitionInfo, randomPartition) are package-private; the
// random draws are overridden with values the test supplies, so both sides use the same ones.
//
// Cases (whitespace-separated tokens; "-" is an empty list, lists are comma-separated):
//   K <numPartitions> <key hex>             -> {"murmur2":m,"partition":p}
//   S <batchSize> <numPartitions> <available> <randoms> <rack> <leaderRacks> <op>...
//      rack: -1 not rack-aware, k rack-aware in rack "rk"; leaderRacks: per partition, the
//      rack number of its leader (-1: a leader without rack)
//      ops: P (peek), U:<bytes>:<0|1> (peek, then update with enableSwitch),
//           L:<queueSizes>:<partitionIds>:<length>, N (null load stats), A:<available>
//                                          -> {"out":[partition after each P and U]}
//   R <numPartitions> <op>...   ops: A:<available>, X:<count>
//                                          -> {"out":[partition of each record]}
// A malformed line or a Kafka exception answers {"error":"..."}.
package org.apache.kafka.clients.producer.internals;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.kafka.clients.producer.RoundRobinPartitioner;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.common.utils.internals.LogContext;

public class PartitionerOracle {
    static final String TOPIC = "t";
    static final Node NODE = new Node(0, "localhost", 9092);

    static int[] ints(String s) {
        if (s.equals("-")) return new int[0];
        String[] parts = s.split(",");
        int[] out = new int[parts.length];
        for (int i = 0; i < parts.length; i++) out[i] = Integer.parseInt(parts[i]);
        return out;
    }

    static byte[] hex(String s) {
        if (s.equals("-")) return new byte[0];
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String rackName(int r) {
        return r < 0 ? null : "r" + r;
    }

    // A cluster with one topic of n partitions; those in `available` have a leader, in rack
    // racks[p] (none when racks is empty or the entry is -1).
    static Cluster cluster(int n, int[] available, int[] racks) {
        boolean[] led = new boolean[n];
        for (int p : available) led[p] = true;
        List<PartitionInfo> parts = new ArrayList<>();
        List<Node> nodes = new ArrayList<>();
        nodes.add(NODE);
        for (int p = 0; p < n; p++) {
            int r = p < racks.length ? racks[p] : -1;
            Node leader = r < 0 ? NODE : new Node(r + 1, "localhost", 9092, rackName(r));
            if (!nodes.contains(leader)) nodes.add(leader);
            Node[] replicas = {leader};
            parts.add(new PartitionInfo(TOPIC, p, led[p] ? leader : null, replicas, replicas));
        }
        return new Cluster("c", nodes, parts, Collections.emptySet(), Collections.emptySet());
    }

    static Cluster cluster(int n, int[] available) {
        return cluster(n, available, new int[0]);
    }

    static class Scripted extends BuiltInPartitioner {
        final ArrayDeque<Integer> randoms = new ArrayDeque<>();

        Scripted(int batchSize, int rack) {
            super(new LogContext("oracle "), TOPIC, batchSize, rack >= 0, rack >= 0 ? rackName(rack) : "");
        }

        @Override
        int randomPartition() {
            Integer r = randoms.poll();
            if (r == null) throw new IllegalStateException("out of random values");
            return r;
        }
    }

    static String list(List<Integer> out) {
        StringBuilder sb = new StringBuilder("{\"out\":[");
        for (int i = 0; i < out.size(); i++) {
            if (i > 0) sb.append(',');
            sb.append(out.get(i));
        }
        return sb.append("]}").toString();
    }

    static String sticky(String[] t) {
        int batchSize = Integer.parseInt(t[1]);
        int n = Integer.parseInt(t[2]);
        int rack = Integer.parseInt(t[5]);
        int[] leaderRacks = ints(t[6]);
        Cluster c = cluster(n, ints(t[3]), leaderRacks);
        Scripted bp = new Scripted(batchSize, rack);
        for (int r : ints(t[4])) bp.randoms.add(r);
        List<Integer> out = new ArrayList<>();
        for (int i = 7; i < t.length; i++) {
            String[] op = t[i].split(":", -1);
            switch (op[0]) {
                case "P":
                    out.add(bp.peekCurrentPartitionInfo(c).partition());
                    break;
                case "U": {
                    BuiltInPartitioner.StickyPartitionInfo info = bp.peekCurrentPartitionInfo(c);
                    bp.updatePartitionInfo(info, Integer.parseInt(op[1]), c, op[2].equals("1"));
                    out.add(bp.peekCurrentPartitionInfo(c).partition());
                    break;
                }
                case "L": {
                    int[] sizes = ints(op[1]);
                    int[] ids = ints(op[2]);
                    String[] racks = new String[sizes.length];
                    for (int k = 0; k < ids.length; k++)
                        racks[k] = ids[k] < leaderRacks.length ? rackName(leaderRacks[ids[k]]) : null;
                    bp.updatePartitionLoadStats(sizes, ids, racks, Integer.parseInt(op[3]));
                    break;
                }
                case "N":
                    bp.updatePartitionLoadStats(null, null, null, 0);
                    break;
                case "A":
                    c = cluster(n, ints(op[1]), leaderRacks);
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + t[i]);
            }
        }
        return list(out);
    }

    static String roundRobin(String[] t) {
        int n = Integer.parseInt(t[1]);
        Cluster c = cluster(n, new int[0]);
        RoundRobinPartitioner rr = new RoundRobinPartitioner();
        List<Integer> out = new ArrayList<>();
        for (int i = 2; i < t.length; i++) {
            String[] op = t[i].split(":", -1);
            if (op[0].equals("A")) {
                c = cluster(n, ints(op[1]));
            } else {
                int count = Integer.parseInt(op[1]);
                for (int k = 0; k < count; k++)
                    out.add(rr.partition(TOPIC, null, null, null, null, c));
            }
        }
        return list(out);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] t = line.trim().split("\\s+");
            String answer;
            try {
                switch (t[0]) {
                    case "K": {
                        byte[] key = hex(t[2]);
                        answer = "{\"murmur2\":" + Utils.murmur2(key) + ",\"partition\":"
                            + BuiltInPartitioner.partitionForKey(key, Integer.parseInt(t[1])) + "}";
                        break;
                    }
                    case "S":
                        answer = sticky(t);
                        break;
                    case "R":
                        answer = roundRobin(t);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown case " + t[0]);
                }
            } catch (Exception e) {
                answer = "{\"error\":\"" + e.toString().replace("\\", "\\\\").replace("\"", "'") + "\"}";
            }
            System.out.println(answer);
            System.out.flush();
        }
    }
}
