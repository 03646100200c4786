"""Producer ids for Kafka's idempotent producers (InitProducerId), unique cluster-wide.

Recipe (Kafka's ``/latest_producer_id_block``): a broker takes a block of ``block_size`` ids
by compare-and-set on the znode holding the end of the last block handed out, then hands
ids out of its block from memory. States: *no block* → (take a block) *serving* → (block
used up) *no block*. Invariant: two brokers never hold overlapping blocks, so an id is
issued at most once, also across restarts (a restarted broker takes a fresh block; ids of
the abandoned one are skipped, as in Kafka).
"""

from __future__ import annotations

import json
import threading

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from sparklog.metadata.session import ZkSession, zk_errors
from sparklog.metadata.zkdata import PRODUCER_ID_BLOCK

__all__ = ["ProducerIdBlocks"]

BLOCK_SIZE = 1000


class ProducerIdBlocks:
    """Hands out producer ids from blocks reserved in ZooKeeper. Thread-safe."""

    def __init__(self, zk: ZkSession, block_size: int = BLOCK_SIZE) -> None:
        self.zk = zk
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._end:
                self._next, self._end = self._reserve()
            producer_id = self._next
            self._next += 1
            return producer_id

    def _reserve(self) -> tuple[int, int]:
        client = self.zk.client
        with zk_errors("reserving a block of producer ids"):
            while True:
                try:
                    data, stat = client.get(PRODUCER_ID_BLOCK)
                except NoNodeError:
                    try:
                        client.create(PRODUCER_ID_BLOCK, _encode(self.block_size), makepath=True)
                        return 0, self.block_size
                    except NodeExistsError:
                        continue
                start = int(json.loads(data)["block_end"])
                try:
                    client.set(PRODUCER_ID_BLOCK, _encode(start + self.block_size), version=stat.version)
                    return start, start + self.block_size
                except BadVersionError:
                    continue


def _encode(block_end: int) -> bytes:
    return json.dumps({"block_end": block_end}).encode()
