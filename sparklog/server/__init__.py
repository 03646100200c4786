"""The server side: the broker agent, the controller, the Kafka
listener and its coordinators; the runtime they share with every client is
:mod:`sparklog.runtime`."""
