"""Lowering whose bytes depend on no timing: the reproducibility context and its Inductor patches.

Reproducible kernels. With ``max_autotune`` on (ExecuTorch's default), Inductor times several
variants of each GEMM, convolution and pointwise kernel on the building GPU and compiles the
fastest: the choice follows the timings, so two builds on the same machine give different
``.so`` files inside the ``.pte`` (seen on the H200: ``.text``/``.rodata`` differ between a cold
and a warm build). ptebuild's default is off, and
:meth:`ptebuild.backends.cuda.CudaBackend.lowering_context` then runs
the lowering with Inductor's deterministic mode (no timing decides a kernel: GEMMs and
convolutions take the first Triton template of their search space, reductions a fixed config),
Triton templates still on for GEMMs and convolutions (``max_autotune_gemm``: ExecuTorch's CUDA
runtime has no aten fallback for them), one heuristic config per pointwise kernel, the first
working config for a kernel that still has several, and Triton
kernels compiled without line tables (they record the kernel source's modification time).
The ``.so`` still records paths (Inductor's cache folder, which ptebuild keeps at one place;
torch's and Python's install folders; the C++ compiler): machines that agree on those, as
machines of one image do, build the same bytes. Turn
``max_autotune`` on for the fastest kernels at the price of byte reproducibility. User Triton
kernels with several ``@triton.autotune`` configs (ExecuTorch's int4 matmul) are still timed.

Nothing here imports torch until a context is entered.
"""

from __future__ import annotations

import contextlib
import functools
import os

# Inductor settings under which no measured time picks a kernel (torch >= 2.9 has them all).
REPRODUCIBLE_INDUCTOR = {
    "deterministic": True,
    "max_autotune_gemm": True,
    "triton.autotune_pointwise": False,
    "coordinate_descent_tuning": False,
}


PATH_AND_TIME_FREE_ENV = {"TRITON_DISABLE_LINE_INFO": "1"}
"""Triton's line tables name each kernel's source file in Inductor's cache and carry its
modification time (seen on the H200: two cold builds' cubins differed in exactly those two
bytes of ``.debug_line``); without them a kernel's binary follows from its PTX alone."""

FIXED_SOURCE_DATE_EPOCH = "315532800"
"""1980-01-01, as in wheels. MinGW's ld writes the link time into each Windows DLL's COFF header
unless ``SOURCE_DATE_EPOCH`` is set (seen on the H200: two cold builds of a Windows program had
identical weights and differing ``.pte`` files); GCC's ``__DATE__`` follows it too. A value the
environment sets is kept."""


def reproducible_environment() -> dict[str, str]:
    """The variables a reproducible lowering sets (its compilers and linkers inherit them)."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": inductor_cache_dir(),
        **PATH_AND_TIME_FREE_ENV,
        "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH") or FIXED_SOURCE_DATE_EPOCH,
    }


def inductor_cache_dir() -> str:
    """Where Inductor keeps its compiled files during a CUDA lowering.

    The ``.so`` records paths under it (its C++ wrapper's name and compile command, the Triton
    kernels' line tables), so it must not move between builds: ``$TORCHINDUCTOR_CACHE_DIR`` if
    set, else Inductor's own default with ``/tmp`` fixed (Inductor takes ``$TMPDIR``, which
    ``build --check`` and CI runners change).
    """
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured:
        return os.path.abspath(configured)
    import getpass
    import re

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join("/tmp", "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


@contextlib.contextmanager
def reproducible_inductor():
    """Lowering whose bytes depend on no timing: :data:`REPRODUCIBLE_INDUCTOR` in
    ``torch._inductor.config``, Inductor's cache at :func:`inductor_cache_dir`, Triton without
    line tables (:data:`PATH_AND_TIME_FREE_ENV`), linkers at a fixed time
    (:data:`FIXED_SOURCE_DATE_EPOCH`): :func:`reproducible_environment`, set in the environment, which Inductor's compile
    workers inherit when the lowering starts them).

    ExecuTorch's compile options (``max_autotune`` off, Triton-only GEMM and convolution
    backends) apply on top of it; these keys are not among them.
    """
    import torch
    from torch._inductor import config as inductor_config

    from ptebuild.errors import BuildError

    missing = [key for key in REPRODUCIBLE_INDUCTOR if not _has_config(inductor_config, key)]
    if missing:
        raise BuildError(
            f"torch {torch.__version__} lacks Inductor's {', '.join(missing)}: reproducible CUDA kernels "
            "need torch >= 2.9; or set compile_specs max_autotune = true (kernels chosen by timing, "
            "not byte-reproducible)"
        )
    environment = reproducible_environment()
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        with inductor_config.patch(dict(REPRODUCIBLE_INDUCTOR)), _first_working_config(), \
                int_arrays_keyed_by_live_writers():
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _first_working_config():
    """Triton kernels that keep several configs pick the first one that compiles and runs.

    Inductor's deterministic mode (torch 2.11 on the H200) can leave a kernel with several
    configs, timed when the AOTInductor wrapper is generated. Two cold builds of the robot policy
    had one symbol more or less in each method's ``.so`` before this choice, and matching symbol
    counts after it; the remaining difference then was the wrapper's int arrays
    (:func:`int_arrays_keyed_by_live_writers`), so how much each change did alone was not
    measured. The timings are
    still taken (a config that spills registers or fails stays out: that is a property of the
    code), but the choice among the working ones follows the configs' order, not the clock.
    """
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    timed = CachingAutotuner.benchmark_all_configs

    def in_order(self, *args, **kwargs):
        timings = timed(self, *args, **kwargs)
        return {
            launcher: (float(rank) if timing != float("inf") else timing)
            for rank, (launcher, timing) in enumerate(timings.items())
        }

    CachingAutotuner.benchmark_all_configs = in_order
    try:
        yield
    finally:
        CachingAutotuner.benchmark_all_configs = timed


@contextlib.contextmanager
def int_arrays_keyed_by_live_writers():
    """The C++ wrapper declares its size and stride arrays where they are used, whatever the
    addresses of Python objects.

    Inductor's ``CppWrapperCpu.codegen_int_array_var`` reuses an array already declared for the
    same values, keyed by ``id()`` of the ``writeline`` that declared it (torch 2.11: of the
    bound method itself; 2.13: of the object it is bound to). Both are short-lived: once one is
    freed, a new one can get its address and is handed the old variable with no declaration of
    its own. Seen on the H200: two cold
    builds of the robot policy differed only there (``buf10`` took ``int_array_12`` in one and
    declared ``int_array_14`` in the other), which changed every later array's number and the
    ``.so``; and a variable declared in another buffer would not compile. Keeping each such
    object (the method, what it is bound to, the graph) alive for as long as the wrapper lives
    makes its ``id`` unique, so the reuse happens only for the same writer, the same way in
    every build. PyTorch's own repository later took the same approach (its test
    ``test_int_array_declared_in_every_fresh_writeline_target``).
    """
    try:
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    except ImportError:  # no C++ wrapper in this torch: nothing to key
        yield
        return
    declare = getattr(CppWrapperCpu, "codegen_int_array_var", None)
    if declare is None:  # a torch without this cache
        yield
        return

    @functools.wraps(declare)
    def keeping_writers_alive(self, int_array, writeline, *args, **kwargs):
        alive = self.__dict__.setdefault("_ptebuild_int_array_writers", {})
        graph = kwargs.get("graph", args[1] if len(args) > 1 else None)
        for keyed in (writeline, getattr(writeline, "__self__", None), graph):
            alive[id(keyed)] = keyed
        return declare(self, int_array, writeline, *args, **kwargs)

    CppWrapperCpu.codegen_int_array_var = keeping_writers_alive
    try:
        yield
    finally:
        CppWrapperCpu.codegen_int_array_var = declare


def _has_config(config, dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if not hasattr(config, head):
        return False
    return not rest or hasattr(getattr(config, head), rest)
