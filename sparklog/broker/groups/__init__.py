"""The broker's group coordinator: Kafka's classic consumer-group protocol (DESIGN §8, §14)."""
