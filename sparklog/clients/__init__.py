"""The light clients: Kafka's producer and consumer APIs for applications, with no Spark."""
