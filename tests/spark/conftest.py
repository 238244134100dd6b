"""Fixtures of the Spark tests: one local cluster (a raft-lite node, 3 bookies as real processes)
and one SparkSession (local[2,2]: two threads, a failed task tried twice; UI off, 2 shuffle partitions) for the whole session; the data
source is found through the pyspark_bookkeeper module, as users get it."""

import os
import sys

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install '.[spark]')")

from bklocal.standalone import StandaloneCluster  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    cluster = StandaloneCluster.on_free_ports(str(tmp_path_factory.mktemp("spark-cluster")), bookie_count=3,
                                              metastore_count=1)
    with cluster.running(log=lambda line: None):
        yield cluster


@pytest.fixture(scope="session")
def bk(cluster):
    """A blocking client of the cluster (bkclient.sync), for setting streams up and checking."""
    from bkclient.sync import connect
    client = connect(cluster.metastore_uri)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = SRC + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    session = (SparkSession.builder.master("local[2,2]").appName("bkspark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
