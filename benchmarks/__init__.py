"""Benchmarks of sparklog against the plain-storage baselines (``make bench``).

Run with ``python -m benchmarks.run``; see ``benchmarks/README.md`` for the cases,
their baselines and targets.
"""
