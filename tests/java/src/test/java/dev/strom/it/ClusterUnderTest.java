package dev.strom.it;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * A replicated Strom cluster on loopback: {@code n} {@code strom server} processes, each a Raft
 * controller voter and a broker, with data dirs {@code <tmp>/node-N} (each holding its
 * {@code server.log}). Every started process is killed by {@link #close()} and by a JVM shutdown
 * hook. Data is removed on close unless {@link #keepData()} was called or STROM_KEEP_DATA is set.
 */
public final class ClusterUnderTest implements AutoCloseable {
    private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (Process p : LIVE) {
                p.destroyForcibly();
            }
        }, "kill-cluster"));
    }

    private final Path tmpDir;
    private final List<String> settings;
    private final Map<Integer, Integer> ports = new TreeMap<>();
    private final Map<Integer, Integer> controllerPorts = new TreeMap<>();
    private final Map<Integer, Process> processes = new TreeMap<>();
    private final String quorum;
    private boolean keep;

    private ClusterUnderTest(int n, List<String> settings) throws IOException {
        this.tmpDir = Files.createTempDirectory("strom-java-cluster-");
        this.settings = List.copyOf(settings);
        Set<Integer> used = new HashSet<>();
        for (int id = 1; id <= n; id++) {
            ports.put(id, freePort(used));
            controllerPorts.put(id, freePort(used));
        }
        this.quorum = controllerPorts.entrySet().stream()
            .map(e -> e.getKey() + "@127.0.0.1:" + e.getValue())
            .collect(Collectors.joining(","));
    }

    /** Starts {@code n} nodes with the given {@code --set key=value} settings; waits until each listens. */
    public static ClusterUnderTest start(int n, List<String> settings) throws IOException, InterruptedException {
        ClusterUnderTest c = new ClusterUnderTest(n, settings);
        try {
            for (int id = 1; id <= n; id++) {
                c.spawn(id);
            }
            for (int id = 1; id <= n; id++) {
                c.waitListening(id);
            }
        } catch (IOException | InterruptedException | RuntimeException e) {
            c.close();
            throw e;
        }
        return c;
    }

    private static int freePort(Set<Integer> used) throws IOException {
        for (int attempt = 0; attempt < 100; attempt++) {
            try (ServerSocket s = new ServerSocket(0)) {
                s.setReuseAddress(true);
                int p = s.getLocalPort();
                if (used.add(p)) {
                    return p;
                }
            }
        }
        throw new IOException("no free port");
    }

    public Set<Integer> ids() {
        return ports.keySet();
    }

    public Path dataDir(int id) {
        return tmpDir.resolve("node-" + id);
    }

    public Path serverLog(int id) {
        return dataDir(id).resolve("server.log");
    }

    /** The bootstrap list of the given nodes (all nodes if none given). */
    public String bootstrap(int... ids) {
        List<Integer> which = new ArrayList<>();
        if (ids.length == 0) {
            which.addAll(ports.keySet());
        } else {
            for (int id : ids) {
                which.add(id);
            }
        }
        return which.stream().map(id -> "127.0.0.1:" + ports.get(id)).collect(Collectors.joining(","));
    }

    public boolean isAlive(int id) {
        Process p = processes.get(id);
        return p != null && p.isAlive();
    }

    /** One cluster id for every node, formatted in before the node's dir holds anything. */
    private String clusterId;

    /** {@code strom ARGS}, its output; fails unless it exits 0. */
    private static String strom(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>();
        cmd.add(BrokerUnderTest.stromBin().toString());
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        if (p.waitFor() != 0) {
            throw new IOException("strom " + String.join(" ", args) + " failed: " + out);
        }
        return out.trim();
    }

    private void spawn(int id) throws IOException {
        Path dir = dataDir(id);
        if (!Files.exists(dir.resolve("meta.properties"))) {
            try {
                if (clusterId == null) {
                    clusterId = strom("random-uuid");
                }
                strom("format", "--cluster-id", clusterId, "--node-id", String.valueOf(id),
                    "--data-dir", dir.toString());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException(e);
            }
        }
        List<String> cmd = new ArrayList<>(List.of(
            BrokerUnderTest.stromBin().toString(), "server",
            "--node-id", String.valueOf(id),
            "--listen", "127.0.0.1:" + ports.get(id),
            "--controller-listen", "127.0.0.1:" + controllerPorts.get(id),
            "--controller-quorum", quorum,
            "--data-dir", dir.toString()));
        for (String s : settings) {
            cmd.add("--set");
            cmd.add(s);
        }
        ProcessBuilder pb = new ProcessBuilder(cmd)
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(serverLog(id).toFile()))
            .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")));
        pb.environment().putIfAbsent("RUST_LOG", "info");
        Process p = pb.start();
        LIVE.add(p);
        processes.put(id, p);
    }

    private void waitListening(int id) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        int port = ports.get(id);
        while (System.nanoTime() < deadline) {
            Process p = processes.get(id);
            if (p == null || !p.isAlive()) {
                throw new IOException("node " + id + " exited before listening\n" + logs(40));
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 500);
                return;
            } catch (IOException notYet) {
                Thread.sleep(50);
            }
        }
        throw new IOException("node " + id + " did not listen on " + port + " within 30 s\n" + logs(40));
    }

    /** SIGKILL node {@code id} (Process.destroyForcibly) and wait until it is gone. */
    public void kill(int id) throws InterruptedException {
        Process p = processes.remove(id);
        if (p != null) {
            p.destroyForcibly();
            p.waitFor();
            LIVE.remove(p);
        }
    }

    /** Starts node {@code id} again on the same ports and data dir. */
    public void restart(int id) throws IOException, InterruptedException {
        if (isAlive(id)) {
            throw new IllegalStateException("node " + id + " is running");
        }
        spawn(id);
        waitListening(id);
    }

    /** Keep the data dirs after close (printed to stderr). */
    public void keepData() {
        keep = true;
    }

    /** The last {@code lines} lines of each node's server.log. */
    public String logs(int lines) {
        StringBuilder sb = new StringBuilder();
        for (int id : ports.keySet()) {
            sb.append("--- node ").append(id).append(" (").append(serverLog(id)).append(") ---\n");
            try {
                List<String> all = Files.exists(serverLog(id))
                    ? Files.readAllLines(serverLog(id), StandardCharsets.UTF_8) : List.of();
                for (String l : all.subList(Math.max(0, all.size() - lines), all.size())) {
                    sb.append(l).append('\n');
                }
            } catch (IOException | UncheckedIOException e) {
                sb.append("(cannot read: ").append(e).append(")\n");
            }
        }
        return sb.toString();
    }

    @Override
    public void close() {
        for (Process p : processes.values()) {
            p.destroyForcibly();
        }
        for (Process p : processes.values()) {
            try {
                p.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            LIVE.remove(p);
        }
        processes.clear();
        if (keep || System.getenv("STROM_KEEP_DATA") != null) {
            System.err.println("cluster data kept in " + tmpDir);
            return;
        }
        try (Stream<Path> walk = Files.walk(tmpDir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}
