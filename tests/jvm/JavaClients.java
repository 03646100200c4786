// Kafka's Java producer, consumer and AdminClient against sparklog's brokers, run by
// tests/wire/test_java_clients.py on Kafka's 4.x and 3.9 jars (compiled by make venv against 4.x,
// using only API both lines have). Every line it prints is a fact the test checks:
//   JavaClients produce BOOTSTRAP TOPIC COUNT acks0|acks1|acksall|idempotent|transactional
//   JavaClients transform BOOTSTRAP INPUT OUTPUT GROUP COUNT
//   JavaClients consume BOOTSTRAP TOPIC GROUP ASSIGNOR INSTANCE_ID|- ISOLATION STOP_FILE
//   JavaClients admin BOOTSTRAP TOPIC GROUP
// It exits 0 when done, 1 with "ERROR <exception>" on any failure.
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClients {
    private static final long TIMEOUT_S = 60;

    public static void main(String[] args) {
        try {
            switch (args[0]) {
                case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]), args[4]);
                case "transform" -> transform(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]));
                case "consume" -> consume(args[1], args[2], args[3], args[4], args[5], args[6], Path.of(args[7]));
                case "admin" -> admin(args[1], args[2], args[3]);
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (Exception e) {
            say("ERROR " + e);
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    // The test reads stdout line by line while the program runs: flush every line.
    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static Properties producerProps(String bootstrap) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        return props;
    }

    private static Properties consumerProps(String bootstrap, String group, String isolation) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        return props;
    }

    /** COUNT records key-i/value-i; transactional: COUNT committed, then COUNT aborted ("aborted-i"). */
    static void produce(String bootstrap, String topic, int count, String mode) throws Exception {
        Properties props = producerProps(bootstrap);
        switch (mode) {
            case "acks0" -> props.put(ProducerConfig.ACKS_CONFIG, "0");
            case "acks1" -> props.put(ProducerConfig.ACKS_CONFIG, "1");
            case "acksall" -> {
                props.put(ProducerConfig.ACKS_CONFIG, "all");
                props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
            }
            case "idempotent" -> props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
            case "transactional" -> props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-clients-" + topic);
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            boolean transactional = mode.equals("transactional");
            if (transactional) {
                producer.initTransactions();
                producer.beginTransaction();
            }
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i));
            }
            if (transactional) {
                producer.commitTransaction();
                producer.beginTransaction();
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, "key-" + i, "aborted-" + i));
                }
                producer.flush();
                producer.abortTransaction();
            }
            producer.flush();
        }
        say("produced " + count);
    }

    /** Consume-transform-produce, exactly once: COUNT records of INPUT upper-cased into OUTPUT,
     * the group's input offsets committed inside each transaction (sendOffsetsToTransaction). */
    static void transform(String bootstrap, String input, String output, String group, int count) throws Exception {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "java-transform-" + group);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(bootstrap, group, "read_committed"));
                KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            int done = 0;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
            while (done < count) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("transformed " + done + " of " + count + " records in " + TIMEOUT_S + " s");
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), record.value().toUpperCase()));
                    next.put(new TopicPartition(record.topic(), record.partition()), new OffsetAndMetadata(record.offset() + 1));
                    done++;
                }
                producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
                producer.commitTransaction();
            }
        }
        say("transformed " + count);
    }

    /** A group member until STOP_FILE exists: "assignment [..]" after each rebalance callback,
     * "record PARTITION OFFSET VALUE" per record (offsets committed after each poll), then "closed". */
    static void consume(String bootstrap, String topic, String group, String assignor, String instanceId, String isolation,
            Path stopFile) throws Exception {
        Properties props = consumerProps(bootstrap, group, isolation);
        props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, switch (assignor) {
            case "range" -> RangeAssignor.class.getName();
            case "roundrobin" -> RoundRobinAssignor.class.getName();
            case "sticky" -> StickyAssignor.class.getName();
            case "cooperative-sticky" -> CooperativeStickyAssignor.class.getName();
            default -> throw new IllegalArgumentException("unknown assignor " + assignor);
        });
        if (!instanceId.equals("-")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    if (!partitions.isEmpty()) {
                        consumer.commitSync();
                        say("revoked " + partitionNumbers(partitions));
                    }
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    say("assignment " + partitionNumbers(consumer.assignment()));
                }
            });
            while (!Files.exists(stopFile)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> record : records) {
                    say("record " + record.partition() + " " + record.offset() + " " + record.value());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        say("closed");
    }

    private static Set<Integer> partitionNumbers(Collection<TopicPartition> partitions) {
        Set<Integer> numbers = new TreeSet<>();
        for (TopicPartition partition : partitions) {
            numbers.add(partition.partition());
        }
        return numbers;
    }

    /** The AdminClient's topic, config, partition, record, offset, log dir and group calls, one line each. */
    static void admin(String bootstrap, String topic, String group) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult cluster = admin.describeCluster();
            say("cluster nodes " + cluster.nodes().get(TIMEOUT_S, TimeUnit.SECONDS).size()
                    + " controller " + (cluster.controller().get(TIMEOUT_S, TimeUnit.SECONDS).id() >= 0));

            NewTopic newTopic = new NewTopic(topic, 2, (short) 1).configs(Map.of("retention.ms", "3600000"));
            admin.createTopics(List.of(newTopic)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("listed " + admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS).contains(topic));
            say("partitions " + describe(admin, topic).partitions().size());

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            say("retention.ms " + topicConfig(admin, resource, "retention.ms"));
            AlterConfigOp set = new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("retention.ms " + topicConfig(admin, resource, "retention.ms"));

            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("partitions " + describe(admin, topic).partitions().size());

            TopicPartition first = new TopicPartition(topic, 0);
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(bootstrap))) {
                for (int i = 0; i < 10; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "key-" + i, "value-" + i));
                }
                producer.flush();
            }
            long lowWatermark = admin.deleteRecords(Map.of(first, RecordsToDelete.beforeOffset(4)))
                    .lowWatermarks().get(first).get(TIMEOUT_S, TimeUnit.SECONDS).lowWatermark();
            say("low watermark " + lowWatermark);
            List<String> offsets = new ArrayList<>();
            for (OffsetSpec spec : List.of(OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.forTimestamp(0))) {
                offsets.add(Long.toString(admin.listOffsets(Map.of(first, spec)).partitionResult(first)
                        .get(TIMEOUT_S, TimeUnit.SECONDS).offset()));
            }
            say("offsets earliest latest by-timestamp " + String.join(" ", offsets));
            int broker = cluster.nodes().get(TIMEOUT_S, TimeUnit.SECONDS).iterator().next().id();
            int replicas = 0;
            for (LogDirDescription dir : admin.describeLogDirs(List.of(broker)).allDescriptions()
                    .get(TIMEOUT_S, TimeUnit.SECONDS).get(broker).values()) {
                for (TopicPartition replica : dir.replicaInfos().keySet()) {
                    replicas += replica.topic().equals(topic) ? 1 : 0;
                }
            }
            say("log dir replicas " + replicas);

            admin.alterConsumerGroupOffsets(group, Map.of(first, new OffsetAndMetadata(7)))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("group offset " + admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(TIMEOUT_S, TimeUnit.SECONDS).get(first).offset());
            boolean listed = false;
            for (ConsumerGroupListing listing : admin.listConsumerGroups().all().get(TIMEOUT_S, TimeUnit.SECONDS)) {
                listed |= listing.groupId().equals(group);
            }
            say("group listed " + listed);
            say("group state " + admin.describeConsumerGroups(List.of(group)).describedGroups().get(group)
                    .get(TIMEOUT_S, TimeUnit.SECONDS).state());
            admin.deleteConsumerGroups(List.of(group)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("group offsets after delete " + admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(TIMEOUT_S, TimeUnit.SECONDS).size());

            admin.deleteTopics(List.of(topic)).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            say("listed " + admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS).contains(topic));
        }
    }

    private static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS).get(topic);
    }

    private static String topicConfig(Admin admin, ConfigResource resource, String name) throws Exception {
        Config config = admin.describeConfigs(List.of(resource)).all().get(TIMEOUT_S, TimeUnit.SECONDS).get(resource);
        ConfigEntry entry = config.get(name);
        return entry.value() + " " + entry.source();
    }
}
