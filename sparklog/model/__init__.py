"""Pure values of the log: records and the partitioner, input batches, topic names and
descriptions, the table schema and offset specifications. No I/O, no Spark, ZooKeeper or
Delta imports."""
