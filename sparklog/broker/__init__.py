"""The broker process: the agent (``sparklog broker start``) and the embedded broker, the
Kafka listener and its API handlers, the leader appender, log tail and producer state, the
group and transaction coordinators, the controller and the log manager. It builds on
:mod:`sparklog.runtime`, which it shares with every client. No other sparklog package
imports it: the CLI (and the demo job) start it through its two entry points,
:mod:`sparklog.broker.agent` and :mod:`sparklog.broker.embedded_broker` (DESIGN §12)."""
