"""The rooms stay separate: bkcore is pure, sim and transports never import each other."""

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


def offenders(package: str, forbidden: set[str]) -> list[str]:
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        bad = imported_roots(path) & forbidden
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
