// A Kafka Streams windowed aggregation joined with a table, run by tests/wire/test_kafka_streams.py
// as `RegionClicks BOOTSTRAP APPLICATION_ID CLICKS USERS OUTPUT STATE_DIR` (compiled by make venv).
// Clicks (user -> page) join the users table (user -> region); the joined clicks are counted per
// region in 10 s tumbling windows (a day's grace: no click is late), exactly_once_v2. Streams
// makes the users table's and the counts' changelogs (the windowed one compact,delete) and the
// repartition topic itself. Output: key "<region>@<window start ms>", value the count so far.
// It prints "STATE <state>" at each state change and runs until killed.
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.TimeWindows;

public class RegionClicks {
    public static void main(String[] args) throws InterruptedException {
        Properties props = ExactlyOnceStreams.properties(args[0], args[1], args[5]);
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
        ExactlyOnceStreams.run(builder, props);
    }
}
