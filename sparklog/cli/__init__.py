"""The ``sparklog`` command-line tool: Kafka's admin and console tools over sparklog.

One module per noun: :mod:`~sparklog.cli.topics`, :mod:`~sparklog.cli.configs`,
:mod:`~sparklog.cli.produce`, :mod:`~sparklog.cli.consume`, :mod:`~sparklog.cli.offsets`
(``get-offsets``), :mod:`~sparklog.cli.groups` (``kafka-consumer-groups``) and
:mod:`~sparklog.cli.zookeeper`; :mod:`~sparklog.cli.main` builds the
parser and maps errors to exit codes; :mod:`~sparklog.cli.options` and
:mod:`~sparklog.cli.output` hold what the commands share.

Invariant: nothing under ``sparklog.cli`` imports pyspark, so every command runs without
starting Spark. This package deliberately does not import :mod:`sparklog.cli.main`, so that
``python -m sparklog.cli.main`` runs it exactly once.
"""

__all__: list[str] = []
