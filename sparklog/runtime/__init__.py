"""The runtime every process that touches a cluster shares — light clients, Spark jobs, admin
calls and broker agents alike: the replica manager (ZooKeeper session, metadata cache,
partition states, replica tables, leaders, high watermarks), the produce request, log
access (reads, offsets by time, record deletion) and the replica fetcher. Nothing here
imports the broker (DESIGN §12)."""
