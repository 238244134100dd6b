"""The examples/ scripts run (against in-process bookies on a memory:// metastore)."""

import importlib.util
import pathlib

import pytest
import trio


URI = "memory://examples"
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def cluster(start_cluster):
    return await start_cluster(URI, 3)


async def test_ledger_basics(cluster, capsys):
    await load("ledger_basics").main(URI)
    out = capsys.readouterr().out
    assert "the tailing reader saw 100 entries" in out and "closed=True" in out


async def test_sync_script(cluster, capsys):
    await trio.to_thread.run_sync(load("sync_script").main, URI)
    assert "['one', 'two', 'three']" in capsys.readouterr().out
