// A Kafka Streams word count (the Streams API of the seeds), run by tests/wire/test_kafka_streams.py
// as `WordCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR` (compiled by make venv).
// Lines in, (word, count) out, exactly_once_v2: Streams creates its repartition and changelog
// (compacted) topics itself. It prints "STATE <state>" at each state change and runs until killed.
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Materialized;

public class WordCount {
    public static void main(String[] args) throws InterruptedException {
        Properties props = ExactlyOnceStreams.properties(args[0], args[1], args[4]);
        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(args[2])
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .filter((key, word) -> !word.isEmpty())
                .groupBy((key, word) -> word)
                .count(Materialized.as("word-counts"))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(args[3]);
        ExactlyOnceStreams.run(builder, props);
    }
}
