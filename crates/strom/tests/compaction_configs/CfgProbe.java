import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;
import java.util.*;
import java.util.concurrent.ExecutionException;

/** Topic config requests of the compaction keys, answers printed one per line (compared between
 * Strom and Kafka 4.4 by compaction_configs.rs). */
public class CfgProbe {
  static Admin ad;
  static String p;
  static String err(Throwable t) {
    if (t instanceof ExecutionException) t = t.getCause();
    return t.getClass().getSimpleName() + ": " + t.getMessage();
  }
  static void create(String name, boolean validateOnly, String... kv) {
    Map<String, String> c = new LinkedHashMap<>();
    for (int i = 0; i < kv.length; i += 2) c.put(kv[i], kv[i + 1]);
    NewTopic t = new NewTopic(p + name, 1, (short) 1).configs(c);
    String out;
    try {
      ad.createTopics(List.of(t), new CreateTopicsOptions().validateOnly(validateOnly)).all().get();
      out = "OK";
    } catch (Exception e) { out = err(e); }
    System.out.println("create " + name + " " + c + (validateOnly ? " validateOnly" : "") + " -> " + out);
  }
  static void alter(String name, boolean validateOnly, String... ops) {
    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, p + name);
    List<AlterConfigOp> l = new ArrayList<>();
    for (int i = 0; i < ops.length; i += 3)
      l.add(new AlterConfigOp(new ConfigEntry(ops[i + 1], ops[i + 2]), AlterConfigOp.OpType.valueOf(ops[i])));
    String out;
    try {
      ad.incrementalAlterConfigs(Map.of(r, l), new AlterConfigsOptions().validateOnly(validateOnly)).all().get();
      out = "OK";
    } catch (Exception e) { out = err(e); }
    System.out.println("alter " + name + " " + Arrays.toString(ops) + (validateOnly ? " validateOnly" : "") + " -> " + out);
  }
  static void describe(String name, String... keys) throws Exception {
    ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, p + name);
    Config c;
    try {
      c = ad.describeConfigs(List.of(r), new DescribeConfigsOptions().includeSynonyms(true).includeDocumentation(true)).all().get().get(r);
    } catch (Exception e) { System.out.println("describe " + name + " -> " + err(e)); return; }
    for (String k : keys) {
      ConfigEntry e = c.get(k);
      if (e == null) { System.out.println("describe " + name + " " + k + " -> missing"); continue; }
      System.out.println("describe " + name + " " + k + " = " + e.value() + " " + e.source() + " " + e.type()
        + " readOnly=" + e.isReadOnly() + " sensitive=" + e.isSensitive()
        + " doc=" + (e.documentation() != null && !e.documentation().isEmpty()) + " synonyms=" + e.synonyms());
    }
  }
  static void exists(String name) throws Exception {
    System.out.println("exists " + name + " -> " + ad.listTopics().names().get().contains(p + name));
  }
  public static void main(String[] a) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.servers", a[0]);
    p = a[1];
    String[] K = {"cleanup.policy", "delete.retention.ms", "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms"};
    try (Admin admin = Admin.create(props)) {
      ad = admin;
      create("lag-conflict", false, "min.compaction.lag.ms", "10", "max.compaction.lag.ms", "5");
      create("lag-conflict-v", true, "min.compaction.lag.ms", "10", "max.compaction.lag.ms", "5");
      create("lag-equal", false, "min.compaction.lag.ms", "5", "max.compaction.lag.ms", "5");
      create("lag-min-only", false, "min.compaction.lag.ms", "5");
      create("policy-empty", false, "cleanup.policy", "");
      create("policy-dup", false, "cleanup.policy", "compact,compact");
      create("policy-case", false, "cleanup.policy", "Compact");
      create("policy-space", false, "cleanup.policy", "compact, delete");
      create("policy-other", false, "cleanup.policy", "compact,other");
      create("ratio-high", false, "min.cleanable.dirty.ratio", "1.5");
      create("ratio-neg", false, "min.cleanable.dirty.ratio", "-0.1");
      create("ratio-text", false, "min.cleanable.dirty.ratio", "abc");
      create("ratio-one", false, "min.cleanable.dirty.ratio", "1");
      create("maxlag-zero", false, "max.compaction.lag.ms", "0");
      create("delret-neg", false, "delete.retention.ms", "-1");
      create("compact-v", true, "cleanup.policy", "compact");
      exists("compact-v");
      create("compact", false, "cleanup.policy", "compact", "min.cleanable.dirty.ratio", "0.01", "delete.retention.ms", "100");
      describe("compact", K);
      describe("policy-empty", "cleanup.policy");
      describe("policy-space", "cleanup.policy");
      describe("ratio-one", "min.cleanable.dirty.ratio");
      create("x", false);
      describe("x", K);
      alter("x", false, "APPEND", "cleanup.policy", "compact");
      describe("x", "cleanup.policy");
      alter("x", false, "APPEND", "cleanup.policy", "compact");
      describe("x", "cleanup.policy");
      alter("x", false, "SUBTRACT", "cleanup.policy", "delete");
      describe("x", "cleanup.policy");
      alter("x", true, "APPEND", "cleanup.policy", "delete");
      describe("x", "cleanup.policy");
      alter("x", false, "SUBTRACT", "cleanup.policy", "compact");
      describe("x", "cleanup.policy");
      alter("x", false, "APPEND", "cleanup.policy", "other");
      alter("x", false, "APPEND", "min.compaction.lag.ms", "5");
      alter("x", false, "SET", "max.compaction.lag.ms", "5");
      alter("x", false, "SET", "min.compaction.lag.ms", "10");
      alter("x", true, "SET", "min.compaction.lag.ms", "10");
      alter("x", false, "SET", "min.compaction.lag.ms", "10", "SET", "max.compaction.lag.ms", "20");
      describe("x", K);
      alter("x", false, "DELETE", "max.compaction.lag.ms", "");
      describe("x", "min.compaction.lag.ms", "max.compaction.lag.ms");
      alter("x", false, "SET", "min.cleanable.dirty.ratio", "2");
      alter("x", false, "SET", "min.cleanable.dirty.ratio", "0.25");
      alter("x", false, "DELETE", "cleanup.policy", "");
      describe("x", K);
    }
  }
}
