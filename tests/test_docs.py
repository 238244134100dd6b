"""docs/cli.md and the config table in docs/operations.md are generated from the code: they
must match it (python -m bkcli.docs regenerates them)."""

from bkcli.docs import main


def test_generated_docs_are_current():
    assert main(["--check"]) == 0, "run: python -m bkcli.docs"
