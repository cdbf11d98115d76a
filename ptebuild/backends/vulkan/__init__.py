"""The Vulkan backend: ExecuTorch 1.5.1's ``VulkanPartitioner``/``VulkanBackend``, for GPUs with Vulkan.

Lowering needs no Vulkan SDK and no GPU: the partitioner tags the operators ExecuTorch's Vulkan
delegate implements, and ``VulkanBackend.preprocess`` serializes each partition as a ``VkGraph``
(:mod:`ptebuild.runtime.payload_readers.vulkan` reads it). Running one needs a Vulkan driver and an
ExecuTorch runtime built with the Vulkan delegate; the pip runtime has none.

**Compile specs** (``compile_specs = { force_fp16 = true }``), ExecuTorch's compile options,
passed only when they differ from its defaults (so a program with none is upstream's export
byte for byte): ``force_fp16``, ``downcast_64_bit``, ``storage_type``, ``memory_layout``,
``texture_limits``, ``small_texture_limits``, ``require_dynamic_shapes`` (:func:`options_model`).

**Weights.** ExecuTorch keys each of the delegate's constants by the SHA-256 of its bytes in
the named data store, in the ``.pte``; with a data name they go to ``<data_name>.ptd``: the
partitioner gets ``external_constants_max_data_bytes`` (upstream's way to move them out, one
file per delegate and shard, ``vulkan_constants_<digest>``), which :func:`_one_data_file` folds
into one file per program, and the operators left to the portable kernels put their weights in
the same file (keyed ``<fqn>@sha256:<hex>`` as for every backend).

**Bytes** are reproducible as upstream makes them (seen: equal across processes, folders and
hash seeds). Lowering is faster here than upstream's: ExecuTorch re-exports the pattern graphs
it fuses (rotary embeddings...) with ``torch.export`` at every lowering, twice, which took 10 to
17 s of a small model's lowering on this machine; :func:`_cached_pattern_graphs` makes each once
per process (with its own random state, so the caller's is untouched). Both are in the
backend's ``lowering_context`` and undone when the lowering ends; the bytes are the same
(``tests/backends/test_vulkan.py`` compares them with an upstream export).

**The check** is structural (``vulkan-structural``): every method has a Vulkan delegate, every
payload parses, every constant it names is in the ``.pte`` or the ``.ptd`` with the bytes its
SHA-256 key promises, and each delegate call passes the tensors the graph's inputs and outputs
declare (dtypes of one kind, equal sizes). Nothing is run.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ptebuild.backends.base import Backend, CheckKind, CheckTolerances
from ptebuild.runtime.payload_readers.vulkan import READERS as PAYLOAD_READERS

STRUCTURAL = CheckKind("vulkan-structural", numeric=False)
"""No Vulkan runtime here: the payloads are parsed and matched to the method; nothing is run."""
DATA_TAG = "vulkan_constants"
"""The one external data file a program's Vulkan constants are gathered in (published as its data name)."""
ALL_IN_ONE_FILE = (1 << 63) - 1
"""``external_constants_max_data_bytes`` for one shard: no file limit."""
STORAGE_TYPES = {"buffer": "BUFFER", "texture_3d": "TEXTURE_3D", "texture_2d": "TEXTURE_2D"}
MEMORY_LAYOUTS = {"width_packed": "TENSOR_WIDTH_PACKED", "height_packed": "TENSOR_HEIGHT_PACKED",
                  "channels_packed": "TENSOR_CHANNELS_PACKED"}
EXECUTORCH_DEFAULTS: dict[str, Any] = {
    "force_fp16": False, "downcast_64_bit": True, "storage_type": None, "memory_layout": None,
    "texture_limits": None, "small_texture_limits": False, "require_dynamic_shapes": False,
}
"""ExecuTorch 1.5.1's value of each option when not given (``vulkan_preprocess.py``, ``vulkan_partitioner.py``)."""
_PARTITIONER = ("backends", "vulkan", "partitioner", "vulkan_partitioner.py")


@functools.cache
def options_model() -> type:
    """The Vulkan backend's compile specs as a pydantic model (defined on first use)."""
    from ptebuild.backends.options import BackendOptions

    class VulkanOptions(BackendOptions):
        """The Vulkan backend's compile specs (ExecuTorch's ``VulkanPartitioner`` compile options)."""

        force_fp16: bool = False
        """Hold float tensors as float16 on the GPU (inputs and outputs keep their dtypes: staged on the host)."""
        downcast_64_bit: bool = True
        """Hold int64 and float64 tensors as int32 and float32 (Vulkan devices rarely have 64-bit types)."""
        storage_type: Literal["buffer", "texture_3d", "texture_2d"] | None = None
        """Store every tensor as this (default: each operator's preference, mostly ``texture_3d``)."""
        memory_layout: Literal["width_packed", "height_packed", "channels_packed"] | None = None
        """Pack every tensor so (default: each operator's preference)."""
        texture_limits: tuple[int, int, int] | None = None
        """The device's largest 3D texture (x, y, z); tensors that do not fit are left to the CPU."""
        small_texture_limits: bool = False
        """Assume a 2048-texel 3D texture limit (what the Vulkan spec guarantees; desktop GPUs)."""
        require_dynamic_shapes: bool = False
        """Delegate only operators that can resize with the method's dynamic dims."""

    return VulkanOptions


def compile_options(options, data_name: str | None) -> dict[str, Any]:
    """ExecuTorch's compile options for the validated ``options``: only those not at its defaults."""
    from executorch.backends.vulkan.serialization.vulkan_graph_schema import VkMemoryLayout, VkStorageType

    chosen: dict[str, Any] = {}
    for key, default in EXECUTORCH_DEFAULTS.items():
        value = getattr(options, key)
        if value == default:
            continue
        if key == "storage_type":
            chosen["storage_type_override"] = VkStorageType[STORAGE_TYPES[value]]
        elif key == "memory_layout":
            chosen["memory_layout_override"] = VkMemoryLayout[MEMORY_LAYOUTS[value]]
        else:
            chosen[key] = tuple(value) if key == "texture_limits" else value
    if data_name is not None:
        chosen["external_constants_max_data_bytes"] = ALL_IN_ONE_FILE
    return chosen


@functools.cache
def missing_parts() -> str | None:
    """What this environment lacks to lower Vulkan programs (found without importing), or None."""
    try:
        executorch = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        executorch = None
    folders = list(executorch.submodule_search_locations or []) if executorch else []
    if not any(Path(folder, *_PARTITIONER).is_file() for folder in folders):
        return "this executorch has no Vulkan backend (executorch.backends.vulkan.partitioner)"
    return None


_pattern_graphs: dict[Any, Any] = {}
"""Original ``get_graphs_fn`` -> its graphs, made once per process (:func:`_cached_pattern_graphs`)."""


@contextmanager
def _cached_pattern_graphs() -> Iterator[None]:
    """While the block runs, each fusable pattern's graphs are made once per process.

    ExecuTorch's ``get_graphs_fn`` exports small pattern modules (``torch.export`` and
    ``to_edge``) every time the partitioner and the fusion pass ask: the same graphs, made again.
    They are only matched against (``SubgraphMatcher``), never changed, so one copy serves every
    lowering. Each is made under ``torch.random.fork_rng`` (the functions draw example inputs
    from the global generator), so a lowering's random state does not depend on whether the
    graphs were already made.
    """
    import torch
    from executorch.backends.vulkan import patterns

    entries = [entry for entry in patterns.fusable_patterns.values() if entry.get_graphs_fn is not None]
    originals = [entry.get_graphs_fn for entry in entries]

    def cached(make):
        def graphs():
            if make not in _pattern_graphs:
                with torch.random.fork_rng(devices=[]):
                    _pattern_graphs[make] = make()
            return list(_pattern_graphs[make])

        return graphs

    for entry, make in zip(entries, originals):
        entry.get_graphs_fn = cached(make)
    try:
        yield
    finally:
        for entry, make in zip(entries, originals):
            entry.get_graphs_fn = make


@contextmanager
def _one_data_file() -> Iterator[None]:
    """While the block runs, every Vulkan delegate's external constants (``vulkan_constants_<digest>``
    per delegate and shard) are tagged :data:`DATA_TAG`, so that a program writes one file."""
    import dataclasses

    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir._serialize._named_data_store import NamedDataStoreOutput

    real = VulkanBackend.__dict__["preprocess"]

    def preprocess(cls, program, compile_specs):
        result = real.__func__(cls, program, compile_specs)
        store = result.data_store_output
        if store is None or not store.external_data:
            return result
        external: dict[str, dict] = {}
        for tag, entries in store.external_data.items():
            external.setdefault(DATA_TAG if tag.startswith(DATA_TAG + "_") else tag, {}).update(entries)
        return dataclasses.replace(result, data_store_output=NamedDataStoreOutput(store.buffers, store.pte_data, external))

    VulkanBackend.preprocess = classmethod(preprocess)
    try:
        yield
    finally:
        VulkanBackend.preprocess = real


@contextmanager
def _lowering() -> Iterator[None]:
    with _cached_pattern_graphs(), _one_data_file():
        yield


@dataclass(frozen=True)
class VulkanBackend(Backend):
    def can_build(self, options=None) -> str | None:
        return missing_parts()

    def can_check(self, options=None) -> str | None:
        """The structural check reads the files in pure Python: wherever the program was built."""
        return None

    def check_kind(self, options=None) -> CheckKind:
        return STRUCTURAL

    # -- in a worker ----------------------------------------------------------------------------

    def partitioners(self, options, program=None) -> list:
        from executorch.backends.vulkan import VulkanPartitioner

        data_name = program.data_name if program is not None else None
        return [VulkanPartitioner(compile_options(options, data_name))]

    def lowering_context(self, options):
        """Pattern graphs made once (faster, same bytes) and one external data file per program."""
        return _lowering()

    def emit_config(self, data_name, options):
        """The operators left to the portable kernels put their weights in the delegates' file."""
        from executorch.exir import ExecutorchBackendConfig

        return ExecutorchBackendConfig(external_constants=(lambda _node: DATA_TAG) if data_name else False)

    def data_files(self, manager, data_name, program_name) -> dict[str, Any]:
        """:data:`DATA_TAG` published as ``<data_name>``."""
        from ptebuild.errors import REPORT, BuildError

        data = dict(manager._tensor_data or {})
        unexpected = sorted(set(data) - {DATA_TAG})
        if unexpected:
            raise BuildError(f"lowering wrote data files {unexpected} besides {DATA_TAG!r}; {REPORT}", location=f"programs.{program_name}")
        if data_name is None:
            if data:
                raise BuildError(f"lowering wrote data files {sorted(data)} with no data_name; set data_name", location=f"programs.{program_name}")
            return {}
        if DATA_TAG not in data:
            raise BuildError(f"lowering wrote no weights into '{data_name}.ptd'; {REPORT}", location=f"programs.{program_name}")
        return {data_name: data[DATA_TAG]}

    def check(self, model, program, pte: Path, ptd: Path | None, samples=None) -> tuple[list, str]:
        from ptebuild.backends.vulkan.check import check_program
        from ptebuild.errors import CheckError
        from ptebuild.lowering.state import with_state

        try:
            return check_program(model, program, pte, ptd), STRUCTURAL.name
        except CheckError as error:
            stated = with_state(error, model, program)  # the known limit vulkan-state matches its words
            if stated is None:
                raise
            raise stated from error



BACKEND = VulkanBackend(
    name="vulkan",
    options_factory=options_model,
    default_check=CheckTolerances(atol=1e-3, min_cosine=0.9999),
    payload_readers=PAYLOAD_READERS,
)
