"""Real ZooKeeper servers for tests: the launcher lives in bkcli.zk_processes (the jepsen-like
harness starts ensembles too); this name stays for the tests that import it."""

from bkcli.zk_processes import JARS, JAVA_DIR, ZkEnsemble, ZkNode, classpath, four_letter_word, free_port, mode  # noqa: F401
