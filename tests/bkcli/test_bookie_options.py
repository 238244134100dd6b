"""Every option read from a config file comes back, through bktransports.bookie_options, as the
text the file gave it, in its key's units: what GET /api/v1/config/server_config shows."""

from bkcli.bookie_config import bookie_config_from_mapping
from bktransports.bookie_options import OPTIONS, REDACTED, option_values

# Every key, each at a value unlike its default, in the units a config file uses.
NOT_DEFAULTS = {
    "metadataServiceUri": "zk://zk1:2181/ledgers", "dataDir": "/var/lib/bk", "bookiePort": 3190,
    "listeningInterface": "0.0.0.0", "advertisedAddress": "10.0.0.5:3190", "httpServerPort": 8080,
    "httpServerTlsEnable": True,
    "bookieAuthSecret": "hush", "tlsCertificatePath": "/etc/bk/cert.pem", "tlsKeyPath": "/etc/bk/key.pem",
    "tlsTrustStore": "/etc/bk/ca.pem",
    "autoRecoveryDaemonEnabled": True, "lostBookieRecoveryDelay": 30, "auditorPeriodicCheckInterval": 120,
    "streamStorageEnabled": True, "streamStoragePort": 4182, "journalDirectory": "j", "ledgerDirectories": "l",
    "journalMaxSizeMB": 512, "journalMaxBackups": 3, "journalPreAllocSizeMB": 4, "journalRemoveFromPageCache": False,
    "journalMaxGroupWaitMSec": 5.0,
    "journalBufferedWritesThreshold": 65536, "journalFlushWhenQueueEmpty": False, "journalWritesInFlightMax": 1,
    "journalSyncInlineMaxBytes": 4096, "maxAddsInProgressLimit": 500, "nettyMaxFrameSizeBytes": 1048576,
    "logSizeLimit": 268435456, "flushEntrylogBytes": 0, "readCacheMaxEntries": 100,
    "dbStorage_readAheadCacheMaxSizeMb": 32, "dbStorage_readAheadCacheBatchSize": 10, "flushInterval": 250, "checkpointCompletionTarget": 0.25,
    "dbStorage_writeCacheMaxSizeMb": 128, "gcWaitTime": 30000, "majorCompactionInterval": 7200,
    "minorCompactionThreshold": 0.3, "majorCompactionThreshold": 0.7, "diskUsageThreshold": 0.9,
    "diskUsageLwmThreshold": 0.8, "diskCheckInterval": 5000,
}


def test_every_option_comes_back_in_its_keys_units():
    assert set(NOT_DEFAULTS) == {option.key for option in OPTIONS}
    _, config = bookie_config_from_mapping(NOT_DEFAULTS)
    assert config.flush_interval_s == 0.25 and config.journal.journal_max_size == 512 * 1024 * 1024
    shown = option_values(config)
    expected = {key: str(value).lower() if type(value) is bool else str(value) for key, value in NOT_DEFAULTS.items()}
    expected["bookieAuthSecret"] = REDACTED
    assert shown == expected


def test_defaults_show_in_their_keys_units_and_an_empty_secret_as_empty():
    _, config = bookie_config_from_mapping({"metadataServiceUri": "memory://x", "dataDir": "/d"})
    shown = option_values(config)
    assert shown["flushInterval"] == "1000" and shown["journalMaxSizeMB"] == "2048"
    assert shown["lostBookieRecoveryDelay"] == "0" and shown["majorCompactionInterval"] == "3600"
    assert shown["journalMaxGroupWaitMSec"] == "2.0" and shown["journalFlushWhenQueueEmpty"] == "true"
    assert shown["bookieAuthSecret"] == ""
