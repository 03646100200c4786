"""Kafka transactions in the broker: the coordinator, markers, pending group offsets and
the partition leaders' open transactions (docs/transactions.md)."""
