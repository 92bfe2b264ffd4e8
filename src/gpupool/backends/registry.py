"""The backend registry: adapters by name, imported lazily, one instance per pool (X1).

An adapter is registered as a ``"module:factory"`` string so that importing gpupool never
imports Ray, the Kubernetes client or the Azure SDKs; the module is imported the first time a
pool of that backend is used. ``factory(ctx: AdapterContext) -> Backend``.

Invariants:

* :meth:`Registry.get` returns the same instance for a pool until :meth:`Registry.forget`.
* No lock is held while an adapter is imported or constructed (constructors may dial a
  cluster and block for seconds; one slow pool must not stall every other pool). Two threads
  may therefore both construct an adapter for the same pool; exactly one is published and the
  loser is closed, so callers still only ever see one instance per pool.
* Every failure to import an adapter is :class:`BackendMisconfigured` (a configuration or
  installation problem, never worth retrying). A constructor may raise its own classified
  :class:`BackendError` (say, ``BackendUnavailable`` while its cluster is down); anything else
  it raises becomes ``BackendMisconfigured``. Failures are not cached: the next get retries.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from gpupool.backends.base import AdapterContext, Backend, Capability
from gpupool.backends.errors import BackendError, BackendMisconfigured

Factory = Callable[[AdapterContext], Backend]

# Backend name (as written in a pool's ``backend:``) -> "module:factory". Adapters of later
# issues add their line here; optional ones also add their pip extra to ``EXTRAS``.
ADAPTERS: Mapping[str, str] = {
    "local": "gpupool.backends.local.adapter:LocalBackend",
    "fake": "gpupool.backends.fake:FakeBackend",
    "slurm": "gpupool.backends.slurm.adapter:SlurmBackend",
    "ray": "gpupool.backends.ray.adapter:RayBackend",
    "azure-batch": "gpupool.backends.azure_batch.adapter:AzureBatchBackend",
    "azure-ml": "gpupool.backends.azure_ml.adapter:AzureMLBackend",
}

# Backend name -> what its adapter can do whatever the pool's options (the adapter's own
# ``capabilities`` may add more, e.g. POSIX_IDENTITY when the server runs as root). Known before
# any adapter is imported or built: the scheduler reads it to route jobs, so a multi-node job
# never goes to a pool whose backend cannot run it. An adapter added to ``ADAPTERS`` adds its
# line here (tests/backends/test_backend_capabilities.py checks the two agree).
CAPABILITIES: Mapping[str, frozenset[Capability]] = {
    "local": frozenset({Capability.LOG_STREAM}),
    "fake": frozenset({Capability.GANG, Capability.LOG_STREAM}),
    "slurm": frozenset({Capability.GANG, Capability.LOG_STREAM, Capability.CAPACITY}),
    "ray": frozenset({Capability.LOG_STREAM}),
    "azure-batch": frozenset({Capability.LOG_STREAM}),
    "azure-ml": frozenset({Capability.LOG_STREAM}),
}

# Backend name -> the pip extra that installs its third-party client, for the error hint.
EXTRAS: Mapping[str, str] = {
    "slurm": "slurm",
    "ray": "ray",
    "kubernetes": "kubernetes",
    "azure-batch": "azure",
    "azure-ml": "azure",
}


def implemented(backend: str) -> bool:
    """True when an adapter is registered for ``backend`` (a pool of it can run jobs)."""
    return backend in ADAPTERS


def runs_gangs(backend: str) -> bool:
    """True when ``backend``'s adapter runs jobs of more than one node (Capability.GANG)."""
    return Capability.GANG in CAPABILITIES.get(backend, frozenset())


@dataclass(frozen=True)
class PoolBackend:
    """Which adapter serves a pool, and the context its factory is called with."""

    backend: str
    context: AdapterContext


PoolLookup = Mapping[str, PoolBackend] | Callable[[str], PoolBackend | None]


def load_factory(
    backend: str, adapters: Mapping[str, str] = ADAPTERS, extras: Mapping[str, str] = EXTRAS
) -> Factory:
    """Import and return the factory registered for ``backend``."""
    target = adapters.get(backend)
    if target is None:
        known = ", ".join(sorted(adapters)) or "none"
        raise BackendMisconfigured(f"unknown backend {backend!r}; known backends: {known}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = extras.get(backend)
        hint = f"; install it with: pip install gpupool[{extra}]" if extra else ""
        raise BackendMisconfigured(
            f"backend {backend!r} cannot be loaded ({module_name}: {exc}){hint}"
        ) from exc
    factory = getattr(module, attr, None) if attr else None
    if not callable(factory):
        raise BackendMisconfigured(f"backend {backend!r}: {target!r} is not a callable factory")
    return cast(Factory, factory)


def _close(adapter: object) -> None:
    close = getattr(adapter, "close", None)
    if callable(close):
        close()


class Registry:
    """One adapter instance per pool, built on first use.

    ``pools`` maps a pool name to its :class:`PoolBackend` (a mapping, or a callable returning
    ``None`` for an unknown pool, so the caller can serve it from live configuration).
    """

    def __init__(
        self,
        pools: PoolLookup,
        *,
        adapters: Mapping[str, str] = ADAPTERS,
        extras: Mapping[str, str] = EXTRAS,
    ) -> None:
        self._pools = pools
        self._adapters = dict(adapters)
        self._extras = dict(extras)
        self._lock = threading.Lock()  # guards _instances only; never held during construction
        self._instances: dict[str, Backend] = {}

    @property
    def known_backends(self) -> tuple[str, ...]:
        return tuple(sorted(self._adapters))

    def get(self, pool: str) -> Backend:
        with self._lock:
            found = self._instances.get(pool)
        if found is not None:
            return found
        binding = self._lookup(pool)
        factory = load_factory(binding.backend, self._adapters, self._extras)
        try:
            built = factory(binding.context)
        except BackendError:
            raise  # already classified (e.g. BackendUnavailable: the cluster is down, retry)
        except Exception as exc:  # an unclassified constructor failure: fail loudly
            raise BackendMisconfigured(
                f"backend {binding.backend!r} for pool {pool!r} failed to start: {exc}"
            ) from exc
        with self._lock:
            winner = self._instances.setdefault(pool, built)
        if winner is not built:
            _close(built)  # another thread published first; callers only ever see the winner
        return winner

    def forget(self, pool: str) -> None:
        """Drop (and close) a pool's adapter, e.g. after its configuration changed."""
        with self._lock:
            adapter = self._instances.pop(pool, None)
        if adapter is not None:
            _close(adapter)

    def close(self) -> None:
        with self._lock:
            adapters = list(self._instances.values())
            self._instances.clear()
        for adapter in adapters:
            _close(adapter)

    def _lookup(self, pool: str) -> PoolBackend:
        binding: Any = self._pools(pool) if callable(self._pools) else self._pools.get(pool)
        if binding is None:
            raise BackendMisconfigured(f"no pool named {pool!r} is configured")
        return cast(PoolBackend, binding)
