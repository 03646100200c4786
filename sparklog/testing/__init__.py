"""The test harness that ships with sparklog (as kazoo ships ``kazoo.testing``): real servers
a test fails the ways real servers fail.

* :class:`BrokerAgents` — ``sparklog broker start`` processes against a test's cluster
  (kill -9, clean stop, SIGSTOP/SIGCONT, restart; liveness and the controller as the
  cluster sees them);
* :class:`ZooKeeperEnsemble` — a 3-server ZooKeeper quorum from the jars the ``pyspark``
  wheel ships (kill -9, hang, restart; leader and sessions via four-letter words);
* :class:`ChildProcesses` — what both share: processes by id, their logs, signals, reaping;
* :mod:`sparklog.testing.metrics` — a broker's Prometheus endpoint scraped and parsed;
* :mod:`sparklog.testing.object_stores` — S3 servers on loopback: moto's (honours conditional
  writes) and s3rver (ignores them: the store sparklog must refuse);
* :class:`SparkStandalone` — a Spark standalone master and workers from the ``pyspark``
  wheel, for ``spark-submit --master spark://...``;
* :class:`KafkaTools` — Apache Kafka's own command-line tools (topics, console producer and
  consumer, consumer groups, performance tests), run from its jars (``make venv``).
"""

from sparklog.testing.brokers import BrokerAgents
from sparklog.testing.kafka_tools import KafkaTools
from sparklog.testing.processes import ChildProcesses
from sparklog.testing.spark_standalone import SparkStandalone
from sparklog.testing.zookeeper import ZooKeeperEnsemble

__all__ = ["BrokerAgents", "ChildProcesses", "KafkaTools", "SparkStandalone", "ZooKeeperEnsemble"]
