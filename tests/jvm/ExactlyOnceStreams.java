// What the tests' Kafka Streams applications (WordCount, RegionClicks) share: exactly_once_v2
// with 200 ms commits and no record cache (every update reaches the output, so the tests can
// check each count once), string serdes, the broker's replication factor for the topics
// Streams creates (its default, -1), and a run that prints "STATE <state>" at each state
// change until the process is killed.
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;

final class ExactlyOnceStreams {
    private ExactlyOnceStreams() {}

    static Properties properties(String bootstrap, String applicationId, String stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        return props;
    }

    static void run(StreamsBuilder builder, Properties props) throws InterruptedException {
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> System.out.println("STATE " + now));
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
