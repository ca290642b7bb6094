// Oracle for tests/classic_group_diff.rs: drives Kafka 4.4's own
// org.apache.kafka.coordinator.group.classic.ClassicGroup through generated operation sequences
// (one JSON array of cases on stdin) and prints, per case, what the group looks like after every
// operation (one JSON array on stdout).
//
// Case: {"ops": [op...]}; op: {"op": "add"|"update"|"remove"|"replace"|"prepare"|"next_gen"|"stable",
//        "id", "instance", "new_id", "rebalance", "protocols": [{"name", "topics": [...]}...],
//        "probe": {"id", "instance", "generation", "txn", "topic"}}
// Observation: {"applied", "state", "gen", "leader", "protocol", "members": [ids in iteration order],
//               "select", "validate", "commit", "sub", "all_joined", "rebalance_timeout"}
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.message.JoinGroupRequestData.JoinGroupRequestProtocol;
import org.apache.kafka.common.message.JoinGroupRequestData.JoinGroupRequestProtocolCollection;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.common.utils.internals.LogContext;
import org.apache.kafka.coordinator.group.classic.ClassicGroup;
import org.apache.kafka.coordinator.group.classic.ClassicGroupMember;
import org.apache.kafka.coordinator.group.classic.ClassicGroupState;

import java.nio.ByteBuffer;
import java.util.Optional;

public class ClassicGroupOracle {
    static String optText(JsonNode n) {
        return n == null || n.isNull() ? null : n.asText();
    }

    // A consumer protocol v0 subscription: version, topics, null user data.
    static byte[] subscription(JsonNode topics) {
        int size = 2 + 4 + 4;
        for (JsonNode t : topics) size += 2 + t.asText().getBytes().length;
        ByteBuffer b = ByteBuffer.allocate(size);
        b.putShort((short) 0);
        b.putInt(topics.size());
        for (JsonNode t : topics) {
            byte[] s = t.asText().getBytes();
            b.putShort((short) s.length);
            b.put(s);
        }
        b.putInt(-1);
        return b.array();
    }

    static JoinGroupRequestProtocolCollection protocols(JsonNode ps) {
        JoinGroupRequestProtocolCollection c = new JoinGroupRequestProtocolCollection();
        for (JsonNode p : ps) {
            c.add(new JoinGroupRequestProtocol()
                .setName(p.get("name").asText())
                .setMetadata(subscription(p.get("topics"))));
        }
        return c;
    }

    static int code(Runnable r) {
        try {
            r.run();
            return 0;
        } catch (ApiException e) {
            return Errors.forException(e).code();
        }
    }

    static boolean votes(ClassicGroup g) {
        if (g.numMembers() == 0) return true;
        try {
            g.selectProtocol();
            return true;
        } catch (IllegalArgumentException e) {
            return false;
        }
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        JsonNode cases = mapper.readTree(System.in);
        ArrayNode answers = mapper.createArrayNode();
        for (JsonNode c : cases) {
            ClassicGroup g = new ClassicGroup(new LogContext(), "g", ClassicGroupState.EMPTY, Time.SYSTEM);
            ArrayNode obs = mapper.createArrayNode();
            for (JsonNode op : c.get("ops")) {
                boolean applied = false;
                String kind = op.get("op").asText();
                switch (kind) {
                    case "add": {
                        String id = op.get("id").asText();
                        String instance = optText(op.get("instance"));
                        JoinGroupRequestProtocolCollection ps = protocols(op.get("protocols"));
                        if (!g.hasMember(id) && (instance == null || !g.hasStaticMember(instance))
                            && g.supportsProtocols("consumer", ps)) {
                            int reb = op.get("rebalance").asInt();
                            g.add(new ClassicGroupMember(id, Optional.ofNullable(instance), "client", "host",
                                reb, 10000, "consumer", ps));
                            applied = true;
                        }
                        break;
                    }
                    case "update": {
                        String id = op.get("id").asText();
                        JoinGroupRequestProtocolCollection ps = protocols(op.get("protocols"));
                        if (g.hasMember(id) && g.supportsProtocols("consumer", ps)) {
                            g.updateMember(g.member(id), ps, op.get("rebalance").asInt(), 10000, null);
                            applied = true;
                        }
                        break;
                    }
                    case "remove":
                        g.remove(op.get("id").asText());
                        applied = true;
                        break;
                    case "replace": {
                        String instance = op.get("instance").asText();
                        String newId = op.get("new_id").asText();
                        if (g.hasStaticMember(instance) && !g.hasMember(newId)) {
                            g.replaceStaticMember(instance, g.staticMemberId(instance), newId);
                            applied = true;
                        }
                        break;
                    }
                    case "prepare":
                        if (g.canRebalance()) {
                            g.transitionTo(ClassicGroupState.PREPARING_REBALANCE);
                            applied = true;
                        }
                        break;
                    case "next_gen":
                        // Only when the members agree on a protocol (Kafka's joins keep them so;
                        // the generator can add disagreeing members to an Empty group).
                        if (g.isInState(ClassicGroupState.PREPARING_REBALANCE) && votes(g)) {
                            g.initNextGeneration();
                            applied = true;
                        }
                        break;
                    case "stable":
                        if (g.isInState(ClassicGroupState.COMPLETING_REBALANCE)) {
                            g.transitionTo(ClassicGroupState.STABLE);
                            applied = true;
                        }
                        break;
                    default:
                        throw new IllegalArgumentException(kind);
                }
                ObjectNode o = mapper.createObjectNode();
                o.put("applied", applied);
                o.put("state", g.stateAsString());
                o.put("gen", g.generationId());
                o.put("leader", g.leaderOrNull());
                o.put("protocol", g.protocolName().orElse(null));
                ArrayNode ms = o.putArray("members");
                for (ClassicGroupMember m : g.allMembers()) ms.add(m.memberId());
                String select = null;
                if (g.numMembers() > 0) {
                    try {
                        select = g.selectProtocol();
                    } catch (IllegalArgumentException e) {
                        select = null;
                    }
                }
                o.put("select", select);
                JsonNode p = op.get("probe");
                String pid = p.get("id").asText();
                String pinst = optText(p.get("instance"));
                o.put("validate", code(() -> g.validateMember(pid, pinst, "probe")));
                o.put("commit", code(() -> g.validateOffsetCommit(pid, pinst, p.get("generation").asInt(),
                    p.get("txn").asBoolean(), 9)));
                o.put("sub", g.isSubscribedToTopic(p.get("topic").asText()));
                o.put("all_joined", g.hasAllMembersJoined());
                o.put("rebalance_timeout", g.rebalanceTimeoutMs());
                obs.add(o);
            }
            answers.add(obs);
        }
        System.out.print(mapper.writeValueAsString(answers));
        System.out.flush();
    }
}
