package org.apache.kafka.common.utils;

/**
 * Bridge for connect-file 4.3.1 (Maven Central serves no connect-file 4.4.0): its FileStream
 * connectors and tasks answer {@code version()} with {@code AppInfoParser.getVersion()} from this
 * package, which kafka-clients 4.4 moved to {@code org.apache.kafka.common.utils.internals}. This
 * is the only class of kafka-clients that connect-file uses outside the stable config API; the
 * version string is the running kafka-clients' own.
 */
public final class AppInfoParser {
    private AppInfoParser() {
    }

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }

    public static String getCommitId() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getCommitId();
    }
}
