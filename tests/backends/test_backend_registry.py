"""The backend registry (X1): lazy import, one instance per pool, no lock while constructing."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.backends.base import AdapterContext
from gpupool.backends.errors import BackendMisconfigured
from gpupool.backends.fake import FakeBackend
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.registry import ADAPTERS, PoolBackend, Registry, load_factory

# A throwaway adapter module, importable only through the tmp dir put on sys.path.
ADAPTER_MODULE = """
import threading
import time

built = []
closed = []
delay_s = 0.0
gate = None  # a threading.Event the factory waits for, when set


class Adapter:
    name = "slow"
    capabilities = frozenset()

    def __init__(self, ctx):
        if gate is not None:
            assert gate.wait(10), "gate never opened"
        time.sleep(delay_s)
        self.ctx = ctx
        built.append(self)

    def close(self):
        closed.append(self)


def broken(ctx):
    raise RuntimeError("cannot reach the cluster")
"""


@pytest.fixture
def adapter_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"gpupool_test_adapter_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(ADAPTER_MODULE)
    (tmp_path / "needs_missing.py").write_text("import gpupool_no_such_sdk\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    sys.modules.pop("needs_missing", None)


def binding(backend: str, pool: str, tmp_path: Path) -> PoolBackend:
    return PoolBackend(backend, AdapterContext(pool=pool, gpu_type="t4", state_dir=tmp_path))


def test_adapters_are_imported_on_first_use_and_cached(adapter_module: str, tmp_path: Path) -> None:
    registry = Registry(
        {"a": binding("slow", "a", tmp_path)}, adapters={"slow": f"{adapter_module}:Adapter"}
    )
    assert adapter_module not in sys.modules

    first = registry.get("a")

    assert adapter_module in sys.modules
    assert registry.get("a") is first
    assert first.ctx.pool == "a"  # type: ignore[attr-defined]


def test_each_pool_gets_its_own_instance(tmp_path: Path) -> None:
    registry = Registry(lambda pool: binding("fake", pool, tmp_path))
    assert registry.get("a") is not registry.get("b")
    assert isinstance(registry.get("a"), FakeBackend)


def test_the_built_in_adapters_load(tmp_path: Path) -> None:
    assert load_factory("local") is LocalBackend
    assert load_factory("fake") is FakeBackend
    assert set(ADAPTERS) >= {"local", "fake"}


def test_an_unknown_backend_names_the_known_ones(tmp_path: Path) -> None:
    registry = Registry({"a": binding("slurmm", "a", tmp_path)})
    with pytest.raises(
        BackendMisconfigured, match=r"unknown backend 'slurmm'; known backends: (.*, )?fake, local"
    ):
        registry.get("a")


def test_an_unknown_pool_is_misconfiguration(tmp_path: Path) -> None:
    with pytest.raises(BackendMisconfigured, match="no pool named 'nope'"):
        Registry({}).get("nope")
    with pytest.raises(BackendMisconfigured, match="no pool named 'nope'"):
        Registry(lambda pool: None).get("nope")


def test_a_missing_optional_dependency_says_what_to_install(
    adapter_module: str, tmp_path: Path
) -> None:
    registry = Registry(
        {"r": binding("ray", "r", tmp_path)},
        adapters={"ray": "needs_missing:RayBackend"},
    )
    with pytest.raises(BackendMisconfigured, match=r"pip install gpupool\[ray\]") as caught:
        registry.get("r")
    assert isinstance(caught.value.__cause__, ImportError)


@pytest.mark.parametrize(
    ("target", "match"),
    [
        pytest.param("{module}:nothing_here", "not a callable factory", id="missing attribute"),
        pytest.param("{module}", "not a callable factory", id="no factory named"),
        pytest.param("{module}:broken", "failed to start: cannot reach", id="factory raises"),
    ],
)
def test_a_bad_adapter_is_misconfiguration(
    adapter_module: str, tmp_path: Path, target: str, match: str
) -> None:
    registry = Registry(
        {"a": binding("x", "a", tmp_path)}, adapters={"x": target.format(module=adapter_module)}
    )
    with pytest.raises(BackendMisconfigured, match=match):
        registry.get("a")


def test_concurrent_gets_publish_one_instance_and_close_the_rest(
    adapter_module: str, tmp_path: Path
) -> None:
    registry = Registry(
        {"a": binding("slow", "a", tmp_path)}, adapters={"slow": f"{adapter_module}:Adapter"}
    )
    load_factory("slow", {"slow": f"{adapter_module}:Adapter"})  # import outside the race
    module = sys.modules[adapter_module]
    module.delay_s = 0.2
    got: list[object] = []
    barrier = threading.Barrier(6)

    def get() -> None:
        barrier.wait()
        got.append(registry.get("a"))

    threads = [threading.Thread(target=get) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(got) == 6 and all(g is got[0] for g in got)
    assert got[0] in module.built and got[0] not in module.closed
    assert len(module.closed) == len(module.built) - 1


def test_no_lock_is_held_while_an_adapter_is_constructed(
    adapter_module: str, tmp_path: Path
) -> None:
    registry = Registry(
        lambda pool: binding("slow" if pool == "stuck" else "fake", pool, tmp_path),
        adapters={"slow": f"{adapter_module}:Adapter", "fake": ADAPTERS["fake"]},
    )
    load_factory("slow", {"slow": f"{adapter_module}:Adapter"})
    module = sys.modules[adapter_module]
    module.gate = threading.Event()
    stuck = threading.Thread(target=registry.get, args=("stuck",))
    stuck.start()
    time.sleep(0.05)  # let it enter the constructor

    other = registry.get("other")  # would deadlock if construction held the registry lock

    module.gate.set()
    stuck.join(10)
    assert isinstance(other, FakeBackend)
    assert not stuck.is_alive() and len(module.built) == 1


def test_forget_and_close_close_the_instances(adapter_module: str, tmp_path: Path) -> None:
    registry = Registry(
        lambda pool: binding("slow", pool, tmp_path), adapters={"slow": f"{adapter_module}:Adapter"}
    )
    a, b = registry.get("a"), registry.get("b")
    module = sys.modules[adapter_module]

    registry.forget("a")
    assert module.closed == [a]
    assert registry.get("a") is not a

    registry.close()
    assert b in module.closed and len(module.closed) == 3
