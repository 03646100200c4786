"""Consumer groups as every client runs them: the coordinator (offsets and membership checks),
the pure partition assignors and reset plans, Kafka's consumer-protocol codec and group
deletion. The brokers' own group coordinator (Kafka's classic protocol) builds on it."""
