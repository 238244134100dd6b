"""The rooms stay separate: bkcore is pure, arrows between packages point down only (sim and
transports never import each other, nothing in metastore imports transports), no two modules
import each other even through others, nothing below the `bk` command imports bkcli, and bkcli
loads the benchmarks only when one runs."""

import ast
import os
import pathlib
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _renamed_folders() -> dict[str, str]:
    """src/ folder -> the name it is installed and imported under, where the two differ: the
    links in src/ name them (src/bksim -> sim)."""
    return {os.readlink(link): link.name for link in sorted(SRC.iterdir()) if link.is_symlink()}


IMPORT_NAME = _renamed_folders()
SIM, TRANSPORTS, METASTORE = IMPORT_NAME["sim"], IMPORT_NAME["transports"], IMPORT_NAME["metastore"]
FORBIDDEN_IN_CORE = {"trio", "socket", "os", "time", "random", "threading", "asyncio", "lmdb",
                     "select", "subprocess", SIM, TRANSPORTS, METASTORE}


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


def offenders(package: str, forbidden: set[str], *, imports=imported_roots, root: pathlib.Path = SRC) -> list[str]:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        bad = imports(path) & forbidden
        if bad:
            found.append(f"{path.relative_to(root)} imports {sorted(bad)}")
    return found


def test_bkcore_is_pure():
    assert (SRC / "bkcore").is_dir()
    assert offenders("bkcore", FORBIDDEN_IN_CORE) == []


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


# ---- arrows point down -----------------------------------------------------------------------

# DESIGN.md's arrows: bkcli -> bench, bkspark -> bkclient -> transports, stream storage server ->
# transports -> metastore -> bkcore; sim -> metastore, bkcore. Each package under src/ here may not
# import the packages named (keys are src/ folders, values import names; anywhere in a file, lazily inside a function too). bkcore keeps its
# own, stricter list (FORBIDDEN_IN_CORE); bkcli, bkbench and bklocal have the checks above.
APPS = {"bkcli", "bkbench", "bkspark", "bkjepsen"}
MAY_NOT_IMPORT = {
    "metastore": {TRANSPORTS, "bkclient", "streamstorage", SIM, "bklocal"} | APPS,
    "transports": {"bkclient", "streamstorage", SIM, "bklocal"} | APPS,
    "streamstorage": {"bkclient", SIM} | APPS,
    "bkclient": {"streamstorage", SIM} | APPS,
    "sim": {TRANSPORTS, "bkclient", "streamstorage", "bklocal", "trio"} | APPS,
}

# Arrows the tree does not keep yet, (package, forbidden import) -> why the rule is skipped. Each
# is checked on its own so that the package's other rules still run.
ARROWS_NOT_YET_KEPT: dict[tuple[str, str], str] = {}


def _arrow_rules() -> list:
    rules = []
    for package, forbidden in sorted(MAY_NOT_IMPORT.items()):
        pending = sorted(name for name in forbidden if (package, name) in ARROWS_NOT_YET_KEPT)
        rules.append(pytest.param(package, forbidden - set(pending), id=package))
        rules += [pytest.param(package, {name}, id=f"{package}-{name}",
                               marks=pytest.mark.skip(reason=ARROWS_NOT_YET_KEPT[package, name]))
                  for name in pending]
    return rules


@pytest.mark.parametrize(("package", "forbidden"), _arrow_rules())
def test_arrows_point_down(package, forbidden):
    assert (SRC / package).is_dir()
    assert offenders(package, forbidden) == []


def test_the_arrow_check_sees_a_violation(tmp_path):
    # An upward import hidden inside a function is still an arrow up.
    (tmp_path / "metastore").mkdir()
    (tmp_path / "metastore" / "store.py").write_text(
        "import json\n\ndef connect(uri):\n    from bktransports.connection import open_client\n")
    assert offenders("metastore", MAY_NOT_IMPORT["metastore"], root=tmp_path) == [
        "metastore/store.py imports ['bktransports']"]


# ---- no import cycles between modules --------------------------------------------------------

def modules_under(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module under root by the dotted name it is imported under; a package is named by its
    __init__.py, a renamed src/ folder by its import name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            parts = (IMPORT_NAME.get(parts[0], parts[0]),) + parts[1:]
            modules[".".join(parts)] = path
    return modules


def _deepest_module(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The longest dotted prefix of name that is a module under the root (None: outside it)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _importing_package(name: str, path: pathlib.Path) -> str:
    """The package a relative import in module `name` starts from: itself if it is a package."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported_modules(name: str, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules under the root that module `name` imports anywhere in its file (top level or
    inside functions), each resolved to the deepest module it names. `from pkg import sub`
    counts as importing pkg.sub when that is a module, else pkg; relative imports are resolved
    from the module's package. A module importing itself is left out."""
    path = modules[name]
    named = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:     # one dot: this module's package; each further dot one package up
                package = _importing_package(name, path).split(".")
                above = package[:max(0, len(package) - (node.level - 1))]
                base = ".".join(above + ([node.module] if node.module else []))
            # Prefer base.alias (a submodule); _deepest_module falls back to base when it is not.
            named += [f"{base}.{alias.name}" if base else alias.name for alias in node.names]
    found = {_deepest_module(each, modules) for each in named}
    return found - {name, None}


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the modules under root it imports."""
    modules = modules_under(root)
    return {name: imported_modules(name, modules) for name in modules}


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a deep import chain must not hit the recursion limit).
    Returns every component, each sorted, in a deterministic order.

    Each node gets an index in the order it is first visited, and a low link: the smallest index
    reachable from it through the nodes still on the stack. A node whose low link is its own
    index is the root of a component, made of itself and everything above it on the stack."""
    index_of: dict[str, int] = {}
    low_link: dict[str, int] = {}
    stack: list[str] = []           # visited nodes not yet assigned to a component
    on_stack: set[str] = set()
    # The frames of the would-be recursion: a node and the successors it has yet to look at.
    frames: list[tuple[str, Iterator[str]]] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index_of[node] = low_link[node] = len(index_of)
        stack.append(node)
        on_stack.add(node)
        frames.append((node, iter(sorted(graph[node]))))

    for start in sorted(graph):
        if start in index_of:
            continue
        visit(start)
        while frames:
            node, successors = frames[-1]
            for successor in successors:
                if successor not in index_of:
                    visit(successor)        # descend; this frame resumes at its next successor
                    break
                if successor in on_stack:
                    low_link[node] = min(low_link[node], index_of[successor])
            else:
                # Every successor is done: what node reaches, its caller reaches too.
                frames.pop()
                if frames:
                    caller = frames[-1][0]
                    low_link[caller] = min(low_link[caller], low_link[node])
                if low_link[node] == index_of[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def import_cycles(root: pathlib.Path) -> list[list[str]]:
    """The groups of modules under root that import each other, directly or through others."""
    return [component for component in strongly_connected_components(import_graph(root)) if len(component) > 1]


def test_no_import_cycles_between_modules():
    # A lazy import breaks a cycle at run time but not between the files: each module still
    # depends on the other, and neither can be understood, tested or moved alone.
    cycles = import_cycles(SRC)
    assert cycles == [], "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_a_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ledger.py").write_text("from pkg import peers\n")                  # a submodule, by name
    (package / "peers.py").write_text("def run():\n    from .ledger import bench\n")  # lazy, relative
    (package / "cli.py").write_text("import pkg.ledger\n")                          # into the cycle, not in it
    assert import_graph(tmp_path)["pkg.ledger"] == {"pkg.peers"}
    assert import_cycles(tmp_path) == [["pkg.ledger", "pkg.peers"]]
    (package / "peers.py").write_text("def run():\n    return 1\n")
    assert import_cycles(tmp_path) == []


# ---- installed names -------------------------------------------------------------------------

def test_nothing_imports_a_renamed_folder_by_its_folder_name():
    # The wheel installs src/sim as bksim (pyproject.toml): `import sim` works in no installed tree.
    folder_names = set(IMPORT_NAME)
    found = []
    for top in (SRC, ROOT / "tests", ROOT / "jepsen-like", ROOT / "bench", ROOT / "examples"):
        for path in sorted(top.rglob("*.py")) if top.is_dir() else []:
            bad = imported_roots(path) & folder_names
            if bad:
                found.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert found == []


def test_the_import_graph_knows_renamed_folders_by_their_import_names():
    graph = import_graph(SRC)
    assert f"{SIM}.world" in graph and "sim.world" not in graph
    assert not any(name.startswith(f"{TRANSPORTS}.") for name in graph[f"{SIM}.world"])
    assert any(name.startswith("bkcore.") for name in graph[f"{SIM}.world"])
