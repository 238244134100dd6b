"""bkspark.options without a JVM: what the source's options parse to, and the errors that name
the option and the fix."""

import pytest

from bkcore.stream.records import DLSN
from bkspark.offsets import OffsetError, OffsetSpec
from bkspark.options import (
    MAX_ENTRIES_PER_PARTITION, OptionError, SourceOptions, parse_options, require_stream,
)

METASTORE = "raft://127.0.0.1:2281"


def parse(**options) -> SourceOptions:
    return parse_options({"metastore": METASTORE, **options})


def test_defaults_and_names_looked_up_whatever_their_case():
    options = parse(stream="events")
    assert (options.namespace, options.stream, options.stream_name) == ("default", "events", "default/events")
    assert (options.max_entries_per_partition, options.read_batch_entries) == (MAX_ENTRIES_PER_PARTITION, 1000)
    assert options.max_bytes_per_partition == 128 * 1024 * 1024
    assert (options.starting, options.ending) == (OffsetSpec("earliest"), OffsetSpec("latest"))
    assert (options.fail_on_data_loss, options.filter_pushdown, options.value_format) == (True, False, "binary")
    assert options.compression == "none" and parse(stream="events", Compression="LZ4").compression == "lz4"
    options = parse(stream="ns/events", MaxEntriesPerPartition="5", READBATCHENTRIES="7", failondataloss="FALSE",
                    maxBytesPerPartition="4096",
                    recordFormat="JSON", startingOffsets='{"position": "2:0:0"}', endingOffsets='{"txid": 9}')
    assert (options.namespace, options.stream) == ("ns", "events")
    assert (options.max_entries_per_partition, options.read_batch_entries, options.max_bytes_per_partition) == (5, 7, 4096)
    assert (options.fail_on_data_loss, options.value_format) == (False, "json")
    assert (options.starting, options.ending) == (OffsetSpec("position", position=DLSN(2, 0, 0)),
                                                  OffsetSpec("txid", value=9))


def test_sources_other_than_a_stream():
    assert parse(ledgers=" 1, 2,3").ledgers == (1, 2, 3)
    table = parse(table="ns/counters")
    assert (table.namespace, table.table, table.table_name, table.stream) == ("ns", "counters", "ns/counters", None)
    assert parse(table="counters").table_name == "default/counters"
    with pytest.raises(OptionError, match='option "stream" is missing: df.write needs .option'):
        require_stream(table, "df.write")


def test_trigger_options():
    options = parse(stream="s", maxEntriesPerTrigger="100", maxBytesPerTrigger="2048", minEntriesPerTrigger="10",
                    maxTriggerDelay="500ms", cursor="billing", writerId="w-1", checkpointLocation="/cp")
    assert (options.max_entries_per_trigger, options.max_bytes_per_trigger, options.min_entries_per_trigger) == \
        (100, 2048, 10)
    assert (options.max_trigger_delay_s, options.cursor, options.writer_id, options.checkpoint_location) == \
        (0.5, "billing", "w-1", "/cp")
    assert [parse(stream="s", maxTriggerDelay=text).max_trigger_delay_s for text in ("30", "30s", "5m", "1.5h")] == \
        [30, 30, 300, 5400]
    assert parse(stream="s").max_trigger_delay_s == 15 * 60


@pytest.mark.parametrize("options, complaint", [
    ({"stream": "s"}, 'option "metastore" is missing'),
    ({"metastore": "memory://x", "stream": "s"}, "cannot see an in-process memory:// store; use raft:// or zk://"),
    ({"metastore": METASTORE, "stream": "s", "table": "t"}, "options stream, table exclude each other"),
    ({"metastore": METASTORE, "stream": "a/b/c"}, 'option "stream"=\'a/b/c\' is not "namespace/name"'),
    ({"metastore": METASTORE, "table": "/t"}, 'option "table"=\'/t\' is not "namespace/name"'),
    ({"metastore": METASTORE, "ledgers": "1,x"}, 'option "ledgers"=\'1,x\' is not a comma-separated list'),
    ({"metastore": METASTORE, "stream": "s", "recordFormat": "avro"}, "use one of binary, utf8, json"),
    ({"metastore": METASTORE, "stream": "s", "maxEntriesPerPartition": "0"},
     'option "maxEntriesPerPartition"=\'0\' must be a positive integer'),
    ({"metastore": METASTORE, "stream": "s", "readBatchEntries": "many"},
     'option "readBatchEntries"=\'many\' must be a positive integer'),
    ({"metastore": METASTORE, "stream": "s", "failOnDataLoss": "maybe"},
     'option "failOnDataLoss"=\'maybe\' must be true or false'),
    ({"metastore": METASTORE, "stream": "s", "maxTriggerDelay": "5 minutes"},
     'option "maxTriggerDelay"=\'5 minutes\' is not a duration such as 500ms, 30s, 5m or 1h'),
    ({"metastore": METASTORE, "stream": "s", "compression": "snappy"},
     'option "compression"=\'snappy\': use one of none, lz4'),
    ({"metastore": METASTORE, "stream": "s", "tlsKey": "client.key"},
     'option "tlsKey" is the key of a certificate: give the certificate too, .option("tlsCert", "client.pem")'),
])
def test_errors_name_the_option_and_the_fix(options, complaint):
    with pytest.raises(OptionError) as failure:
        parse_options(options)
    assert complaint in str(failure.value)


def test_offset_option_errors_come_from_the_offset_parser():
    with pytest.raises(OffsetError, match="option startingOffsets='soon' is neither earliest, latest nor JSON"):
        parse(stream="s", startingOffsets="soon")


def test_credentials_are_files_read_where_a_client_is_made(tmp_path):
    """tlsCa, tlsCert, tlsKey and authSecretFile, whatever their case, name files; the client
    bkspark.cluster makes from them trusts the CA, presents the certificate and carries the
    secret. A file that cannot be used is named with its option."""
    import ssl

    import trustme

    from bkspark.cluster import connect_credentials
    ca = trustme.CA()
    client_cert = ca.issue_cert("spark-client")
    ca_path, cert_path, secret_path = tmp_path / "ca.pem", tmp_path / "client.pem", tmp_path / "secret"
    ca.cert_pem.write_to_path(str(ca_path))
    client_cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    secret_path.write_text("s3cret\nignored\n")
    options = parse(stream="s", TLSCA=str(ca_path), tlscert=str(cert_path), authSecretFile=str(secret_path))
    assert (options.credentials.tls_ca, options.credentials.tls_key) == (str(ca_path), None)
    credentials = connect_credentials(options.credentials)
    assert credentials["auth_secret"] == b"s3cret"
    tls = credentials["tls"]
    assert isinstance(tls, ssl.SSLContext) and tls.verify_mode is ssl.CERT_REQUIRED
    assert tls.get_ca_certs() == ssl.create_default_context(cadata=ca.cert_pem.bytes().decode()).get_ca_certs()
    assert connect_credentials(parse(stream="s").credentials) == {"tls": None, "auth_secret": b""}
    with pytest.raises(OptionError, match=f'option "authSecretFile": cannot read the auth secret file {tmp_path}/no'):
        connect_credentials(parse(stream="s", authSecretFile=str(tmp_path / "no")).credentials)
    with pytest.raises(OptionError, match=f"options tlsCa, tlsCert, tlsKey: {tmp_path}/no.pem: no such file"):
        connect_credentials(parse(stream="s", tlsCa=str(tmp_path / "no.pem")).credentials)

