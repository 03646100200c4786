"""Administration as a library: topics, consumer groups, partition elections and
reassignments (what Kafka's admin client and tools do)."""
