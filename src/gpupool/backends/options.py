"""A pool's ``options:`` checked before anything runs (``gpupool config validate``, apply,
start), by the same parser its adapter uses when it is built.

Each adapter's options class rejects unknown keys and bad values itself; this module runs it
on a configuration, with no I/O and without importing any backend's SDK, so a typo
(``partiton: h100``) or a missing key (a Slurm pool without a partition) is reported with
the file's line instead of failing every job at run time. Backends without an options
parser here (none yet) are left to the configuration's own checks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gpupool.backends.base import AdapterContext
from gpupool.backends.errors import BackendMisconfigured

# backend -> "module:OptionsClass" (each a frozen dataclass with a ``parse`` classmethod)
OPTION_CLASSES = {
    "local": "gpupool.backends.local.options:LocalOptions",
    "slurm": "gpupool.backends.slurm.options:SlurmOptions",
    "ray": "gpupool.backends.ray.options:RayOptions",
    "azure-batch": "gpupool.backends.azure_batch.options:BatchOptions",
    "azure-ml": "gpupool.backends.azure_ml.options:AzureMLOptions",
}
# Where a Slurm pool keeps its work dirs unless told: only the path's shape is checked here.
_STATE_DIR = Path("/var/lib/gpupool")


@dataclass(frozen=True)
class OptionsCheck:
    unknown: tuple[str, ...] = ()  # keys the backend does not have
    known: tuple[str, ...] = ()  # the keys it has, for a hint
    error: str | None = None  # the parser's refusal of the values (None: accepted)


def check_options(
    backend: str, pool: str, gpu_type: str, options: Mapping[str, Any]
) -> OptionsCheck:
    """What is wrong with ``options`` for a ``backend`` pool (an empty check: nothing)."""
    target = OPTION_CLASSES.get(backend)
    if target is None:
        return OptionsCheck()
    module_name, _, name = target.partition(":")
    options_class = getattr(importlib.import_module(module_name), name)
    known = tuple(sorted(f.name for f in fields(options_class)))
    unknown = tuple(sorted(set(options) - set(known)))
    if unknown:
        return OptionsCheck(unknown=unknown, known=known)
    parse: Callable[[Any], object] = options_class.parse
    try:
        if backend == "slurm":  # its defaults depend on the pool (gres type, work dirs)
            parse(
                AdapterContext(pool=pool, gpu_type=gpu_type, state_dir=_STATE_DIR, options=options)
            )
        else:
            parse(options)
    except BackendMisconfigured as exc:
        return OptionsCheck(known=known, error=str(exc))
    return OptionsCheck(known=known)
