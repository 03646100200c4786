"""The broker process: the agent (``sparklog broker start``) and the embedded broker, the
Kafka listener and its API handlers, the leader appender, log tail and producer state, the
group and transaction coordinators, the controller and the log manager. It builds on
:mod:`sparklog.runtime`, which it shares with every client; nothing outside this package
imports it except the CLI, which starts the agent and the embedded broker (DESIGN §12)."""
