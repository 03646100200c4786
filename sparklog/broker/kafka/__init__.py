"""The broker agent's Kafka-protocol listener: frames (``framing``), the TCP server
(``listener``) and the request handlers (``apis``), with message types from ``kio``."""
