"""Partition logs on Delta: the only package that imports ``deltalake``."""
