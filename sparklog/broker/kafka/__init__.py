"""The broker agent's Kafka-protocol front: the network thread and listeners (``listener``),
the request handler pool (``request_channel``) and the request handlers (``apis``), with
message types from ``kio``."""
