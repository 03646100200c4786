"""Coordination state in ZooKeeper: every znode path (``zkdata``), sessions with the one
list of retryable errors, and the recipes (leases, registrations, elections, group
membership, the partition-state cache) plus the embedded server. The only package that
imports ``kazoo``."""
