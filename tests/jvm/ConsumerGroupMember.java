// One member of a consumer group under Kafka's consumer group protocol (KIP-848:
// group.protocol=consumer), run by tests/wire/test_consumer_protocol_groups.py with
// `ConsumerGroupMember BOOTSTRAP GROUP TOPIC NAME [PROTOCOL]` (compiled by make venv)
// (PROTOCOL: consumer, the default, or classic).
// It prints, each line flushed at once and stamped with System.currentTimeMillis():
//   "<ms> ASSIGNED <topic>-<partition>" / "<ms> REVOKED ..." / "<ms> LOST ..." from its rebalance listener,
//   "<ms> RECORD <topic>-<partition> <offset> <value>" for every record it consumed,
//   "<ms> COMMITTED" after each synchronous commit (offsets of every record printed before it),
//   "<ms> COMMIT-FAILED <exception>" for a commit refused (fenced, coordinator moving).
// It commits after every poll that returned records and in onPartitionsRevoked, and runs until killed
// (SIGTERM: it closes and leaves the group).
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ConsumerGroupMember {
    static void say(String line) {
        System.out.println(System.currentTimeMillis() + " " + line);
        System.out.flush();
    }

    // A commit refused while the member is fenced or moving to a new coordinator: what it read
    // since its last commit is read again by the partitions' next owner (at least once).
    static void commit(KafkaConsumer<String, String> consumer) {
        try {
            consumer.commitSync();
            say("COMMITTED");
        } catch (WakeupException e) {
            throw e;
        } catch (KafkaException e) {
            say("COMMIT-FAILED " + e.getClass().getSimpleName());
        }
    }

    static void sayEach(String what, Collection<TopicPartition> partitions) {
        for (TopicPartition tp : partitions) {
            say(what + " " + tp.topic() + "-" + tp.partition());
        }
    }

    public static void main(String[] args) throws InterruptedException {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args[1]);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, args.length > 4 ? args[4] : "consumer");
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, args[3]);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                main.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                commit(consumer);
                sayEach("REVOKED", partitions);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                sayEach("ASSIGNED", partitions);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                sayEach("LOST", partitions);
            }
        });
        try {
            while (true) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) {
                    say("RECORD " + r.topic() + "-" + r.partition() + " " + r.offset() + " " + r.value());
                }
                if (!records.isEmpty()) {
                    commit(consumer);
                }
            }
        } catch (WakeupException e) {
            // SIGTERM: leave the group.
        } finally {
            consumer.close();
            say("CLOSED");
        }
    }
}
