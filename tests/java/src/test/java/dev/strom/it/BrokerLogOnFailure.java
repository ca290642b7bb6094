package dev.strom.it;

import java.util.function.Supplier;

import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/** Prints the tail of the broker's log when a test fails. */
final class BrokerLogOnFailure implements TestWatcher {
    private final Supplier<BrokerUnderTest> broker;

    BrokerLogOnFailure(Supplier<BrokerUnderTest> broker) {
        this.broker = broker;
    }

    @Override
    public void testFailed(ExtensionContext context, Throwable cause) {
        BrokerUnderTest b = broker.get();
        if (b != null) {
            System.err.println("---- broker log tail (" + b.kind() + ", " + context.getDisplayName() + ") ----");
            System.err.println(b.logTail(60));
            System.err.println("---- end of broker log ----");
        }
    }
}
