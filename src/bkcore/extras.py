"""The optional parts of the distribution and the extras that install them, so that a command
whose extra is missing says in one line what to install instead of failing with a traceback.

    require_extra("grpc", "bk table")    raises MissingExtra naming `pip install '<dist>[grpc]'`
    missing_module("grpc")               the first module of the extra that cannot be found, or None
"""

from __future__ import annotations

import importlib.util

# (pybookkeeper, the project's name, is taken on PyPI by an unrelated project.)
DISTRIBUTION = "trio-bookkeeper"

# extra -> the modules it brings that the code imports (pyproject.toml's optional-dependencies).
EXTRA_MODULES = {
    "grpc": ("grpc", "google.protobuf", "bookkeeper.proto", "hpack"),
    "zookeeper": ("kazoo",),
    "spark": ("pyspark", "pyarrow"),
    "bench": ("aetcd", "nats", "matplotlib"),
}


class MissingExtra(RuntimeError):
    """An optional part is used whose extra is not installed."""


def missing_module(extra: str) -> str | None:
    for module in EXTRA_MODULES[extra]:
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except (ImportError, ValueError):      # (a parent package missing, or a stand-in without a spec)
            return module
    return None


def require_extra(extra: str, what: str) -> None:
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(f"{what} needs the '{extra}' extra (no module {module} here): "
                           f"pip install '{DISTRIBUTION}[{extra}]'")
