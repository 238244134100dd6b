"""The rooms stay separate: bkcore is pure, sim and transports never import each other, nothing
below the `bk` command imports bkcli, and bkcli loads the benchmarks only when one runs."""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
FORBIDDEN_IN_CORE = {"trio", "socket", "os", "time", "random", "threading", "asyncio", "lmdb",
                     "select", "subprocess", "sim", "transports", "metastore"}


def imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def eagerly_imported_roots(path: pathlib.Path) -> set[str]:
    """The packages a module imports while it is itself being imported: its top level, and
    class bodies and if/try blocks there, but not the inside of functions (lazy imports)."""
    roots = set()
    pending = list(ast.parse(path.read_text(), filename=str(path)).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return roots


def offenders(package: str, forbidden: set[str], *, imports=imported_roots) -> list[str]:
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        bad = imports(path) & forbidden
        if bad:
            found.append(f"{path.relative_to(SRC)} imports {sorted(bad)}")
    return found


def test_bkcore_is_pure():
    assert (SRC / "bkcore").is_dir()
    assert offenders("bkcore", FORBIDDEN_IN_CORE) == []


def test_sim_and_transports_do_not_import_each_other():
    assert offenders("sim", {"transports", "trio"}) == []
    assert offenders("transports", {"sim"}) == []


def test_checker_sees_a_violation(tmp_path):
    # The check itself must be able to fail.
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom time import monotonic\n")
    assert imported_roots(bad) >= {"os", "time"}


def test_nothing_below_the_command_imports_bkcli():
    # bkcli -> bkbench -> bklocal: benchmarks and local clusters start `bk` as a child process
    # (python -m bkcli.main), which runs the command without importing it.
    for package in ("bkbench", "bklocal"):
        assert (SRC / package).is_dir()
        assert offenders(package, {"bkcli"}) == []


def test_bkcli_imports_benchmarks_only_when_one_runs():
    # Every `bk` command builds the whole parser; the benchmarks (trio, lmdb, grpc, pyspark)
    # load inside the handler of the `bk bench` subcommand that runs.
    assert offenders("bkcli", {"bkbench"}, imports=eagerly_imported_roots) == []


def test_the_bkcli_checks_see_a_violation(tmp_path):
    upward = tmp_path / "upward.py"
    upward.write_text("def run(args):\n    from bkcli.main import main\n")
    assert "bkcli" in imported_roots(upward)
    eager = tmp_path / "eager.py"
    eager.write_text("import json\ntry:\n    from bkbench.ledger import bench_ledger\nexcept ImportError:\n"
                     "    pass\n")
    assert "bkbench" in eagerly_imported_roots(eager)
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def run(args):\n    from bkbench.ledger import bench_ledger\n    return bench_ledger(args)\n")
    assert "bkbench" not in eagerly_imported_roots(lazy)
