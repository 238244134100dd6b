"""The source and the sink against a cluster whose metastore and bookies speak TLS and ask for the
cluster's secret (tests/secured_cluster.py): the options tlsCa and authSecretFile reach every
client the driver and the workers make."""

import pytest
from pyspark.sql import functions as F

from bkclient import sync
from secured_cluster import ca_file, make_security, secured_cluster
from spark_helpers import new_stream


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    security = make_security(str(tmp_path_factory.mktemp("security")))
    cluster = secured_cluster(str(tmp_path_factory.mktemp("secured-spark")), security)
    try:
        cluster.start(log=lambda line: None)
        yield cluster, security
    finally:
        cluster.stop()


def test_a_secured_cluster_is_written_and_read_with_the_credentials_options(spark, secured):
    import ssl
    cluster, security = secured
    credentials = {"metastore": cluster.metastore_uri, "tlsCa": ca_file(security),
                   "authSecretFile": security.auth_secret_file}
    with sync.connect(cluster.metastore_uri, tls=ssl.create_default_context(cafile=ca_file(security)),
                      auth_secret=security.auth_secret) as bk:
        stream = new_stream(bk, "secured")
    df = spark.range(0, 200, numPartitions=2).select(F.format_string("row-%d", "id").alias("payload"))
    df.write.format("bookkeeper").options(stream=stream, **credentials).mode("append").save()
    rows = (spark.read.format("bookkeeper").options(stream=stream, recordFormat="utf8", **credentials).load()
            .orderBy("position").collect())
    assert [row.value for row in rows] == [f"row-{i}" for i in range(200)]
