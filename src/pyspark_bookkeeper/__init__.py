"""Automatic registration: PySpark (4.0+) imports every top-level module named pyspark_* that
has a DefaultSource and registers it under DefaultSource.name(), here "bookkeeper"."""

from bkspark.source import BookKeeperDataSource as DefaultSource

__all__ = ["DefaultSource"]
