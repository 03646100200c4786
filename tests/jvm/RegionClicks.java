// A Kafka Streams windowed aggregation joined with a table, run by tests/wire/test_kafka_streams.py
// as `RegionClicks BOOTSTRAP APPLICATION_ID CLICKS USERS OUTPUT STATE_DIR` (compiled by make venv).
// Clicks (user -> page) join the users table (user -> region); the joined clicks are counted per
// region in 10 s tumbling windows (a day's grace: no click is late), exactly_once_v2. Streams
// makes the users table's and the counts' changelogs (the windowed one compact,delete) and the
// repartition topic itself. Output: key "<region>@<window start ms>", value the count so far.
// It prints "STATE <state>" at each state change and runs until killed.
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.TimeWindows;

public class RegionClicks {
    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        StreamsBuilder builder = new StreamsBuilder();
        KTable<String, String> regions = builder.table(args[3], Materialized.as("user-regions"));
        builder.<String, String>stream(args[2])
                .join(regions, (page, region) -> region)
                .groupBy((user, region) -> region)
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofDays(1)))
                .count(Materialized.as("region-counts"))
                .toStream((window, count) -> window.key() + "@" + window.window().start())
                .mapValues(count -> Long.toString(count))
                .to(args[4]);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setStateListener((now, before) -> System.out.println("STATE " + now));
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        Thread.currentThread().join();
    }
}
