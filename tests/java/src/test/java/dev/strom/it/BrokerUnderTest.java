package dev.strom.it;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * The broker a test class talks to.
 *
 * <ul>
 *   <li>default: a {@code strom server} child process ($STROM_BIN, else target/debug/strom) on a
 *       free loopback port with a temporary data dir;</li>
 *   <li>STROM_TEST_BROKER=kafka-ref: Apache Kafka 4.4 started by scripts/kafka-ref.sh (same
 *       on-disk layout, used to validate these tests against the reference);</li>
 *   <li>STROM_BOOTSTRAP=host:port: an already running external broker; no process control, so
 *       tests that stop the broker or read its files are skipped.</li>
 * </ul>
 *
 * A started process is always killed: {@link #close()} and a JVM shutdown hook.
 */
public final class BrokerUnderTest implements AutoCloseable {
    private static final Set<ProcessHandle> LIVE = ConcurrentHashMap.newKeySet();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            for (ProcessHandle p : LIVE) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
            }
        }, "kill-brokers"));
    }

    public enum Kind { STROM, KAFKA_REF, EXTERNAL }

    private final Kind kind;
    private final Path tmpDir;
    private final Path dataDir;
    private final Path logFile;
    private final int port;
    private final String bootstrap;
    private ProcessHandle process;
    private Process child;

    private BrokerUnderTest(Kind kind, Path tmpDir, Path dataDir, Path logFile, int port, String bootstrap) {
        this.kind = kind;
        this.tmpDir = tmpDir;
        this.dataDir = dataDir;
        this.logFile = logFile;
        this.port = port;
        this.bootstrap = bootstrap;
    }

    public static Path repoRoot() {
        return Paths.get(System.getProperty("strom.repoRoot", "../..")).toAbsolutePath().normalize();
    }

    public static Path stromBin() {
        String env = System.getenv("STROM_BIN");
        Path p = env != null && !env.isEmpty() ? Paths.get(env) : repoRoot().resolve("target/debug/strom");
        if (!Files.isExecutable(p)) {
            throw new IllegalStateException("strom binary not found at " + p
                + ": run `cargo build -p strom` or set STROM_BIN");
        }
        return p.toAbsolutePath();
    }

    /** Creates (and starts, unless external) the broker selected by the environment. */
    public static BrokerUnderTest start() throws IOException, InterruptedException {
        String external = System.getenv("STROM_BOOTSTRAP");
        if (external != null && !external.isEmpty()) {
            return new BrokerUnderTest(Kind.EXTERNAL, null, null, null, -1, external);
        }
        Kind kind = "kafka-ref".equals(System.getenv("STROM_TEST_BROKER")) ? Kind.KAFKA_REF : Kind.STROM;
        Path tmp = Files.createTempDirectory("strom-java-it-");
        int port = freePort(kind == Kind.KAFKA_REF);
        Path data = kind == Kind.KAFKA_REF ? tmp.resolve("data") : tmp.resolve("data");
        Path log = kind == Kind.KAFKA_REF ? tmp.resolve("server.log") : tmp.resolve("strom.log");
        BrokerUnderTest b = new BrokerUnderTest(kind, tmp, data, log, port, "127.0.0.1:" + port);
        b.launch();
        return b;
    }

    private static int freePort(boolean needNextToo) throws IOException {
        for (int attempt = 0; attempt < 50; attempt++) {
            int p;
            try (ServerSocket s = new ServerSocket(0)) {
                s.setReuseAddress(true);
                p = s.getLocalPort();
            }
            if (!needNextToo || p >= 65535) {
                if (!needNextToo) {
                    return p;
                }
                continue;
            }
            try (ServerSocket s2 = new ServerSocket(p + 1)) {
                return p;
            } catch (IOException busy) {
                // try again
            }
        }
        throw new IOException("no free port");
    }

    /** (Re)starts the broker process on the same port and data dir. */
    public void launch() throws IOException, InterruptedException {
        if (kind == Kind.EXTERNAL) {
            throw new IllegalStateException("external broker");
        }
        if (kind == Kind.STROM) {
            // A data dir that does not exist yet is created and formatted by the server itself
            // (a fresh node); an existing one must be formatted (`strom format`).
            List<String> cmd = new ArrayList<>(List.of(stromBin().toString(), "server",
                "--listen", bootstrap, "--data-dir", dataDir.toString()));
            ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()))
                .redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
            pb.environment().putIfAbsent("RUST_LOG", "info");
            child = pb.start();
            process = child.toHandle();
            LIVE.add(process);
        } else {
            Files.createDirectories(dataDir);
            Path script = repoRoot().resolve("scripts/kafka-ref.sh");
            Process p = new ProcessBuilder(script.toString(), "start", String.valueOf(port), tmpDir.toString())
                .redirectError(ProcessBuilder.Redirect.INHERIT)
                .start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            if (p.waitFor() != 0) {
                throw new IOException("kafka-ref.sh start failed: " + out);
            }
            long pid = Long.parseLong(out.lines().reduce((a, b) -> b).orElseThrow().trim());
            child = null;
            process = ProcessHandle.of(pid).orElseThrow(() -> new IOException("kafka-ref pid gone"));
            LIVE.add(process);
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IOException(kind + " exited before listening on " + bootstrap + "\n" + logTail(60));
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 500);
                return;
            } catch (IOException notYet) {
                Thread.sleep(50);
            }
        }
        kill();
        throw new IOException(kind + " did not listen on " + bootstrap + " within 60 s\n" + logTail(60));
    }

    public Kind kind() {
        return kind;
    }

    public boolean controllable() {
        return kind != Kind.EXTERNAL;
    }

    public String bootstrap() {
        return bootstrap;
    }

    public Path dataDir() {
        return dataDir;
    }

    /** Clean shutdown: SIGTERM, then SIGKILL after the timeout. Returns the exit code if known. */
    public Optional<Integer> stop(long timeoutSeconds) throws InterruptedException {
        if (process == null) {
            return Optional.empty();
        }
        process.destroy(); // SIGTERM
        Optional<Integer> code = Optional.empty();
        try {
            process.onExit().get(timeoutSeconds, TimeUnit.SECONDS);
            if (child != null) {
                code = Optional.of(child.waitFor());
            }
        } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException e) {
            killTree(process);
            LIVE.remove(process);
            process = null;
            throw new IllegalStateException(kind + " did not exit within " + timeoutSeconds
                + " s of SIGTERM (killed)\n" + logTail(40));
        }
        LIVE.remove(process);
        process = null;
        return code;
    }

    /** SIGKILL (the process and anything it started). */
    public void kill() {
        if (process != null) {
            killTree(process);
            LIVE.remove(process);
            process = null;
        }
    }

    private static void killTree(ProcessHandle p) {
        List<ProcessHandle> children = p.descendants().toList();
        p.destroyForcibly();
        children.forEach(ProcessHandle::destroyForcibly);
        p.onExit().join();
        children.forEach(c -> c.onExit().join());
    }

    public String logTail(int lines) {
        if (logFile == null || !Files.exists(logFile)) {
            return "(no broker log)";
        }
        try {
            List<String> all = Files.readAllLines(logFile, StandardCharsets.UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
        } catch (IOException | UncheckedIOException e) {
            return "(cannot read " + logFile + ": " + e + ")";
        }
    }

    @Override
    public void close() {
        kill();
        if (tmpDir != null && System.getenv("STROM_KEEP_DATA") == null) {
            try (Stream<Path> walk = Files.walk(tmpDir)) {
                walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
            } catch (IOException ignored) {
                // best effort
            }
        } else if (tmpDir != null) {
            System.err.println("broker data kept in " + tmpDir);
        }
    }
}
