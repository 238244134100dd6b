"""Real ZooKeeper servers for tests: the launcher lives in bklocal.zookeeper (the jepsen-like
harness starts ensembles too); this name stays for the tests that import it."""

from bklocal.zookeeper import JARS, JAVA_DIR, ZkEnsemble, ZkNode, classpath, four_letter_word, free_port, mode  # noqa: F401
