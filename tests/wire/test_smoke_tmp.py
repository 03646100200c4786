from confluent_kafka import Consumer, Producer, TopicPartition
import sparklog
from sparklog.testing import BrokerAgents
from tests.wire.conftest import create_led_topic

def test_smoke(cluster: sparklog.Cluster, one_broker: BrokerAgents) -> None:
    create_led_topic(cluster, one_broker, "t1", partitions=2)
    b = one_broker.bootstrap_servers
    p = Producer({"bootstrap.servers": b, "transactional.id": "tx-1", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("t1", value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("t1", value=f"a{i}".encode(), partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("t1", value=b"open", partition=0)
    p.flush(30)
    for level in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": b, "group.id": "g", "isolation.level": level, "enable.auto.commit": False})
        c.assign([TopicPartition("t1", q, 0) for q in range(2)])
        got = []
        for _ in range(20):
            for m in c.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append((m.partition(), m.offset(), m.value()))
        c.close()
        print(level, sorted(got))
    print(cluster.read("t1").to_pylist())
    p.commit_transaction(30)
