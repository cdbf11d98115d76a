"""What many test files need: the real command line in a fresh process, free ports, cache records,
the chat model's generation check inputs.

Imported by bare name (``from helpers import ptebuild``): pytest puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ptebuild(*args, cwd: Path | None = None, env: dict | None = None, trace_imports: bool = False,
             timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m ptebuild ARGS`` in a new process, as users and CI run it (output captured)."""
    flags = ["-X", "importtime"] if trace_imports else []
    return subprocess.run(
        [sys.executable, *flags, "-m", "ptebuild", *map(str, args)], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}, timeout=timeout,
    )


def first_program_inputs(manifest: Path) -> dict[str, str]:
    """The key's inputs of the manifest's first program (``keys.program_inputs``), read as a build
    reads them: for tests that change one file and ask what the key saw."""
    from ptebuild.builder.keys import program_inputs
    from ptebuild.hashing import hash_file
    from ptebuild.manifest import load_manifest

    plan = load_manifest(manifest)
    return program_inputs(plan.programs[0], plan, hash_file)


def build_json(*args, **kwargs) -> tuple[int, dict]:
    """``ptebuild build ARGS --json``: (exit code, the report)."""
    result = ptebuild("build", *args, "--json", **kwargs)
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON on stdout (exit {result.returncode}):\n{result.stdout}\n{result.stderr}") from None


def chat_check_inputs(manifest: Path, scratch: Path):
    """What ``generation.check_generation`` takes for ``chat_xnnpack`` of ``manifest``
    (``manifests/chat.toml`` or a copy; nothing built): ``(program, shape, tokenizer, KV cache
    buffers, token floor, eager)``, ``eager(seed)`` upstream's eager model of the chat params with
    the random weights of ``seed``. Each seed's checkpoint is written into a folder of its own under
    ``scratch``: upstream maps the file, so a checkpoint written again over it would change the
    weights of a model made before."""
    from ptebuild.manifest import load_manifest
    from ptebuild.models.executorch_llm import token_agreement_floor
    from ptebuild.models.executorch_llm.build import random_checkpoint
    from ptebuild.models.executorch_llm.eager_reference import Shape
    from ptebuild.models.executorch_llm.export import llm_config
    from ptebuild.models.executorch_llm.spec import LlmModelSpec, LlmXnnpackOptions
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer

    program = next(p for p in load_manifest(manifest).programs if p.name == "chat_xnnpack")
    spec = LlmModelSpec.model_validate(program.model_entry)
    options = LlmXnnpackOptions.model_validate(program.options)

    def eager(seed: int):
        from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

        folder = scratch / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        checkpoint = random_checkpoint(spec, manifest.parent, seed, folder)
        config = llm_config(spec.model_copy(update={"checkpoint": str(checkpoint)}), options, program, manifest.parent, {}, None)
        return _prepare_for_llama_export(config).model

    tokenizer = load_tokenizer(manifest.parent / "chat" / "tokenizer.json", str(manifest), "models.chat.tokenizer")
    buffers = tuple(f"layers.{i}.attention.kv_cache.{c}" for i in (0, 1) for c in ("k_cache", "v_cache"))
    return program, Shape(True, True, 64, 64), tokenizer, buffers, token_agreement_floor(program), eager


STARTS = ("foreground", "background")
"""How a shell starts a program: ``foreground`` with SIGINT's default disposition, ``background``
(``cmd &`` in a script, or a CI runner's non-interactive shell) with SIGINT ignored."""


def started(how: str):
    """A ``preexec_fn`` that gives a child SIGINT's disposition as a shell that starts it ``how``
    would (:data:`STARTS`), whatever the test run's own (pytest started as a background job has
    SIGINT ignored, and its children would inherit that)."""
    disposition = {"foreground": signal.SIG_DFL, "background": signal.SIG_IGN}[how]
    return lambda: signal.signal(signal.SIGINT, disposition)


def unavailable(message: str):
    """A real component a test needs is missing: skip the test on a developer's machine, fail it
    under CI (``.ci/run`` installs every component, so a missing one there is a broken setup)."""
    import pytest

    if os.environ.get("PTEBUILD_TESTS_REQUIRE_ALL"):
        pytest.fail(f"{message} (required under CI: .ci/run installs it)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, why: str):
    """``import name``, or :func:`unavailable` (a third-party component: Ray, executorch's CUDA code)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"{name} cannot be imported ({exc}): {why}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def record_key(i: int) -> str:
    return f"{i:032x}"


def put_record(store, i: int, digests: list[str], last_use: float) -> None:
    """An action record ``i`` in ``store`` naming ``digests``, last used at ``last_use``."""
    record = {"outputs": [{"name": f"o{j}", "digest": d} for j, d in enumerate(digests)]}
    store.actions.put(record_key(i), f"prog{i}", record)
    os.utime(store.actions.path(record_key(i)), (last_use, last_use))


def transparent_huge_pages() -> str:
    """The kernel's mode for them (``always``, ``madvise``, ``never``), or '' where it has none."""
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return ""
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else ""


THP_ELIGIBLE = """
def thp_eligible(address):
    # The kernel's THPeligible ('1' or '0') for the mapping of this process that holds address.
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "THPeligible:":
                return line.split()[1]
    return ""
"""
"""Source of ``thp_eligible(address)``, for scripts and model factories that run in other processes."""
