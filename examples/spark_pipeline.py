"""Streams and Spark, end to end: append events to a stream, count them per kind in Spark, write
the counts into a table, read them back.

    make standalone          # in another shell (stream storage serves the table)
    .venv/bin/python examples/spark_pipeline.py [METASTORE_URI]

Needs the spark extra (pip install '.[spark]') and Java 17.
"""

import json
import os
import sys
import uuid

from bkclient.sync import connect
from bkcore.stream.errors import NamespaceExists


def append_events(bk, stream: str, count: int) -> None:
    async def write(client):
        try:
            await client.streams.create_namespace("examples")
        except NamespaceExists:
            pass
        await client.streams.create_stream("examples", stream)
        async with client.streams.open_writer("examples", stream) as writer:
            kinds = ("click", "view", "buy")
            await writer.write_many([json.dumps({"kind": kinds[i % 3], "n": i}).encode() for i in range(count)])
    bk.run(write)


def count_per_kind(uri: str, stream: str) -> dict[str, int]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        events = (spark.read.format("bookkeeper").option("metastore", uri)
                  .option("stream", f"examples/{stream}").option("recordFormat", "json").load())
        kinds = events.select(F.get_json_object("value", "$.kind").alias("kind")).groupBy("kind").count()
        return {row.kind: row["count"] for row in kinds.collect()}
    finally:
        spark.stop()


def store_and_read_back(bk, table: str, counts: dict[str, int]) -> dict[str, int]:
    async def store(client):
        await client.streams.create_stream("examples", table)
        results = await client.open_table(f"examples/{table}")
        for kind, count in counts.items():
            await results.put(kind.encode(), str(count).encode(), pkey=b"counts")
        rows = await results.range(b"", pkey=b"counts")
        results.close()
        return {kv.key.decode(): int(kv.value) for kv in rows}
    return bk.run(store)


def main(uri: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    with connect(uri) as bk:
        append_events(bk, f"events-{suffix}", 3000)
        counts = count_per_kind(uri, f"events-{suffix}")
        print("counted in Spark:", counts)
        print("read back from the table:", store_and_read_back(bk, f"counts-{suffix}", counts))


if __name__ == "__main__":
    from bkcli.defaults import default_metastore_uri
    main(sys.argv[1] if len(sys.argv) > 1 else default_metastore_uri())
