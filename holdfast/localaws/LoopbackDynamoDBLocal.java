// DynamoDB Local bound to 127.0.0.1 (holdfast.localaws.loopback builds and runs this).
//
// DynamoDB Local's command line has no host option: its Jetty server listens on every
// interface, so a local fleet's tables would be open to whoever can reach the machine. This
// builds the server with DynamoDB Local's own ServerRunner (the same options, parsed by it),
// sets the one connector's host to 127.0.0.1 and starts it. It skips only ServerRunner.main's
// telemetry set-up, which holdfast always disables (-disableTelemetry).
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public final class LoopbackDynamoDBLocal {
    private LoopbackDynamoDBLocal() {}

    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Server jetty;
        try {
            // The Jetty server is a private field: no public way to reach its connector.
            Field field = DynamoDBProxyServer.class.getDeclaredField("server");
            field.setAccessible(true);
            jetty = (Server) field.get(proxy);
        } catch (ReflectiveOperationException | RuntimeException e) {
            // Fail closed: never fall back to listening on every interface.
            System.err.println("holdfast: cannot bind DynamoDB Local to 127.0.0.1 (this version "
                               + "of DynamoDB Local has no Jetty server field 'server'): " + e);
            System.exit(3);
            return;
        }
        Connector[] connectors = jetty.getConnectors();
        if (connectors.length == 0) {
            System.err.println("holdfast: cannot bind DynamoDB Local to 127.0.0.1: no connector");
            System.exit(3);
        }
        for (Connector connector : connectors) {
            if (!(connector instanceof ServerConnector)) {
                System.err.println("holdfast: cannot bind DynamoDB Local to 127.0.0.1: a "
                                   + connector.getClass().getName() + " connector");
                System.exit(3);
            }
            ((ServerConnector) connector).setHost("127.0.0.1");
        }
        proxy.start();
    }
}
