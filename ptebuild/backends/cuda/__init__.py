"""The CUDA backend: ExecuTorch 1.5.1's AOTInductor delegate (``CudaPartitioner``/``CudaBackend``).

Lowering follows ExecuTorch's own CUDA export scripts (``examples/models/*/export_*.py``): one
``CudaPartitioner`` per method with that method's name as a compile spec, plus the manifest's
compile specs; ``to_executorch`` with delegate segments, graph inputs not planned, constant
propagation. The compiled ``.so`` of each method is named data of the ``.pte``; the weights go
to a ``.ptd`` that 1.5.1 names ``aoti_cuda_blob``, published here as ``<data_name>.ptd`` (a CUDA
program needs a data name).

This package holds the :class:`CudaBackend` and one module per job:

- :mod:`.options`: the compile specs (``platform``, ``max_autotune``, ...), their defaults and
  the pydantic model they are validated by;
- :mod:`.toolchain`: cheap machine facts, read without importing torch: the key facts, whether
  a GPU is visible, what the Windows cross toolchain lacks;
- :mod:`.inductor`: reproducible kernels (``max_autotune`` off): Inductor's configuration and
  patches during the lowering;
- :mod:`.weightkeys`: each storage key of the ``.ptd`` and the payloads becomes
  ``<key>@sha256:<hex>``;
- :mod:`.check`: the build check on the GPU (``"aoti-runner-cuda"``), through PyTorch's
  ``AOTIModelContainerRunnerCuda``;
- :mod:`.windows`: Windows programs (``platform = "windows"``): the MinGW link folder and the
  check of the DLLs (``"windows-imports"``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.backends.base import Backend, CheckKind, CheckTolerances
from ptebuild.backends.cuda import inductor, toolchain, windows
from ptebuild.backends.cuda import options as cuda_options
from ptebuild.backends.cuda.windows import SHIM_LIBRARY_NAME
from ptebuild.runtime.payload_readers.cuda import READERS as PAYLOAD_READERS

NEEDS_GPU = "built on a machine with a CUDA GPU"
AOTI_RUNNER = CheckKind("aoti-runner-cuda", in_executorch=False)
"""The program's own compiled code and weights run by PyTorch's AOTInductor runner on the GPU."""
WINDOWS_IMPORTS = CheckKind("windows-imports", numeric=False)
"""A Windows program cannot run here: its DLLs' imports are checked against what they link."""
DATA_TAG = "aoti_cuda_blob"
SHIM_DIR_ENV = "PTEBUILD_SHIM_LIBRARY_DIR"


@dataclass(frozen=True)
class CudaBackend(Backend):
    requires_data_name: bool = True
    """The delegate always writes a .ptd; resolve refuses a CUDA program without a data name."""
    shim_library_name: str | None = SHIM_LIBRARY_NAME
    """The import library AOTInductor links for Windows; resolve checks the shim target's name."""
    needs_gpu: bool = True
    forks_safely: bool = False
    """torch marks a process that queried the CUDA driver (``torch.cuda.is_available()``, which
    imports such as torchao's do) so that its forked children cannot initialise CUDA: seen on the
    H200, "Cannot re-initialize CUDA in forked subprocess" from a warm server's child."""
    toolchain_from_files: bool = False
    """The GPU architecture comes from ``nvidia-smi``, not a file."""
    distinct_outputs: str | None = (
        "ExecuTorch 1.5's CUDA runtime deletes an output handle once per slot that holds it, and crashes "
        "(fixed in 1.6 by pytorch/executorch#24448)"
    )
    contiguous_outputs: str | None = (
        "ExecuTorch 1.5's CUDA runtime does not copy a strided output into its tensor (in 1.6 by "
        "pytorch/executorch#24222: strided outputs are copied)"
    )
    checked_with: str = "a CUDA GPU and PyTorch's AOTInductor runner (torch 2.11.0+cu130 with executorch 1.5.1)"

    def toolchain_facts(self, options) -> dict[str, str]:
        """:func:`ptebuild.backends.cuda.toolchain.toolchain_facts`."""
        return toolchain.toolchain_facts(options)

    def can_build(self, options=None) -> str | None:
        if not toolchain.gpu_visible():
            return NEEDS_GPU
        if shutil.which("g++") is None and shutil.which("c++") is None:
            return "AOTInductor needs a C++ compiler (g++) on PATH"
        if cuda_options.platform_of(options) == "windows":
            return toolchain.windows_toolchain_problem()
        return None

    def can_check(self, options=None) -> str | None:
        return None if toolchain.gpu_visible() else "checked on a machine with a CUDA GPU"

    def code_in_named_data(self, key: str) -> bool:
        """The compiled AOTInductor library (``<sha256>_so_blob``) is code, kept in the ``.pte``."""
        from ptebuild.runtime.payload_readers.cuda import SO_BLOB_SUFFIX

        return key.endswith(SO_BLOB_SUFFIX)

    def check_kind(self, options=None) -> CheckKind:
        return WINDOWS_IMPORTS if cuda_options.platform_of(options) == "windows" else AOTI_RUNNER

    def reproducible(self, options=None) -> bool:
        """Without ``max_autotune``: kernels are chosen without timing (:mod:`.inductor`)."""
        return not cuda_options.compile_specs(options or {})["max_autotune"] == "ON"

    # -- in a worker ----------------------------------------------------------------------------

    def probe_here(self) -> tuple[str | None, str | None] | None:
        """Known without lowering (a CUDA lowering takes 30 s): torch sees a GPU, ExecuTorch's CUDA
        backend imports, torch has the AOTInductor runner the check uses."""
        try:
            import torch
        except ImportError as exc:
            return f"torch does not import: {exc}", None
        if not torch.cuda.is_available():
            return f"torch {torch.__version__} sees no CUDA GPU (a CPU build, or no driver)", None
        try:
            import executorch.backends.cuda.cuda_backend  # noqa: F401
        except Exception as exc:
            from ptebuild.causes import describe

            return f"ExecuTorch's CUDA backend does not import: {describe(exc).line}", None
        if not hasattr(torch._C._aoti, "AOTIModelContainerRunnerCuda"):
            return None, f"torch {torch.__version__} has no AOTIModelContainerRunnerCuda"
        return None, None

    def partitioners(self, options, program=None, shim_library_dir: str | os.PathLike | None = None):
        """One ``{method: [CudaPartitioner]}`` entry per method, as ExecuTorch's CUDA exports do.

        ``shim_library_dir`` (Windows): the folder holding ``aoti_cuda_shims.lib``, the build's
        output folder once the shim target is built; else ``$PTEBUILD_SHIM_LIBRARY_DIR``.
        """
        from executorch.backends.cuda.cuda_backend import CudaBackend as EtCudaBackend
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        from ptebuild.errors import BuildError

        specs = [CompileSpec(key, value.encode()) for key, value in cuda_options.compile_specs(options).items()]
        if options.platform == "windows":
            problem = toolchain.windows_toolchain_problem()
            if problem:
                raise BuildError(f"cannot lower for Windows: {problem}")  # the problem ends with its fix (windows.toolchain_problem)
            folder = shim_library_dir or os.environ.get(SHIM_DIR_ENV)
            if not folder or not Path(folder, f"{SHIM_LIBRARY_NAME}.lib").is_file():
                raise BuildError(
                    f"cannot lower for Windows: no {SHIM_LIBRARY_NAME}.lib from shim target "
                    f"{options.shim_library!r} in {folder or 'no folder'}; build the shim target first"
                )
            link = windows.link_folder(
                folder, os.environ["WINDOWS_CUDA_HOME"], inductor.inductor_cache_dir(), shutil.which(toolchain.MINGW_GXX)
            )
            specs.append(CompileSpec("shim_library_path", str(link).encode()))
        names = [m.name for m in program.methods] if program is not None else ["forward"]
        return {
            name: [CudaPartitioner([EtCudaBackend.generate_method_name_compile_spec(name), *specs])]
            for name in names
        }

    def prepare(self, exported_program, data_name, options, export, calibration):
        """Transposed convolutions as the convolutions they equal (:mod:`.conv_transpose`: ExecuTorch
        1.5.1's CUDA lowering has no kernel for them); a program without one is left as it is."""
        from ptebuild.backends.cuda import conv_transpose

        module = exported_program.module()
        if not conv_transpose.rewrite(module):
            return exported_program
        return export(module)

    def lowering_context(self, options):
        """Inductor's configuration for the lowering: deterministic kernel choices unless
        ``max_autotune`` is on (then ExecuTorch's own options, unchanged). Either way, the C++
        wrapper's size and stride arrays follow :func:`.inductor.int_arrays_keyed_by_live_writers`."""
        if options.max_autotune:
            return inductor.int_arrays_keyed_by_live_writers()
        return inductor.reproducible_inductor()

    def emit_config(self, data_name, options):
        from executorch.exir import ExecutorchBackendConfig
        from executorch.exir.passes import MemoryPlanningPass

        return ExecutorchBackendConfig(
            extract_delegate_segments=True,
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
            do_quant_fusion_and_const_prop=True,
        )

    def data_files(self, manager, data_name, program_name) -> dict[str, Any]:
        """The delegate's ``aoti_cuda_blob`` published as ``<data_name>``."""
        from ptebuild.errors import REPORT, BuildError

        data = dict(manager._tensor_data or {})
        unexpected = sorted(set(data) - {DATA_TAG})
        if unexpected:
            raise BuildError(f"lowering wrote data files {unexpected} besides {DATA_TAG!r}; {REPORT}", location=f"programs.{program_name}")
        if DATA_TAG not in data:
            return {}
        if data_name is None:
            raise BuildError("the CUDA delegate wrote weights; set data_name", location=f"programs.{program_name}")
        return {data_name: data[DATA_TAG]}

    def rewrite_keys(self, manager, config) -> None:
        from ptebuild.backends.cuda.weightkeys import key_cuda_weights_by_sha256

        key_cuda_weights_by_sha256(manager, config)

    def check(self, model, program, pte: Path, ptd: Path | None, samples=None) -> tuple[list, str]:
        options: Any = self.program_options(program)
        if options.platform == "windows":
            figures = windows.check_windows_program(
                program, pte, ptd, os.environ.get(SHIM_DIR_ENV), os.environ.get("WINDOWS_CUDA_HOME")
            )
            return figures, windows.CHECK_NAME
        from ptebuild.backends.cuda.check import check_with_aoti_runner

        return check_with_aoti_runner(model, program, pte, ptd, samples), "aoti-runner-cuda"


BACKEND = CudaBackend(
    name="cuda",
    options_factory=cuda_options.options_model,
    default_check=CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.9999),
    payload_readers=PAYLOAD_READERS,
)
