"""Tiny programs exported once per session, with external weights, for the runtime and lowering tests.

Everything lands in one folder, as a build would leave it:

- ``a.pte`` + ``a_weights.ptd`` and ``b.pte`` + ``b_weights.ptd``: portable, same
  architecture and parameter names, different seeds, keyed by sha256;
- ``a_raw.pte`` + ``a_raw.ptd``, ``b_raw.*``: the same two without sha256 keying (the bug);
- ``xa.pte`` + ``xa_weights.ptd``, ``xb.*``: XNNPACK, delegate constants tagged external;
- ``xinline.pte``: XNNPACK with its constants inside the ``.pte`` (needs no ``.ptd``);
- ``multi.pte`` + ``multi_weights.ptd``: two methods sharing one network
  whose two layers hold equal values;
- ``ptebuild.json``: the build record naming each program's files.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ptebuild.runtime.record import update_record


class TwoLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


class Twin(torch.nn.Module):
    """Two layers holding equal values under different names: two keys, one blob each pair."""

    def __init__(self) -> None:
        super().__init__()
        self.left = torch.nn.Linear(4, 4)
        self.right = torch.nn.Linear(4, 4)
        self.right.load_state_dict(self.left.state_dict())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.right(torch.relu(self.left(x)))


def twin(seed: int) -> Twin:
    torch.manual_seed(seed)
    return Twin().eval()


class Plain(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Doubled(Plain):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) * 2


EXAMPLE = (torch.ones(1, 4),)


def two_linear(seed: int) -> TwoLinear:
    torch.manual_seed(seed)
    return TwoLinear().eval()


@dataclass(frozen=True)
class Built:
    """A program written to ``folder``: its ``.pte``, its ``.ptd`` files and the eager model."""

    pte: Path
    ptds: tuple[Path, ...]
    model: torch.nn.Module
    renamed: dict[str, str]

    @property
    def ptd(self) -> Path:
        (only,) = self.ptds
        return only


def export_portable(
    folder: Path, name: str, methods: dict[str, torch.nn.Module], data_name: str, keyed: bool
) -> Built:
    from executorch.exir import ExecutorchBackendConfig, to_edge

    from ptebuild.lowering.weightkeys import key_constants_by_sha256

    programs = {m: torch.export.export(mod, EXAMPLE) for m, mod in methods.items()}
    config = ExecutorchBackendConfig(external_constants=lambda node: data_name)
    et = to_edge(programs).to_executorch(config)
    renamed = key_constants_by_sha256(et, config) if keyed else {}
    return _write(folder, name, et, next(iter(methods.values())), renamed)


def export_xnnpack(
    folder: Path, name: str, model: torch.nn.Module, data_name: str | None
) -> Built:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import (
        delegate_external_constants_pass_unlifted,
    )

    from ptebuild.lowering.weightkeys import key_constants_by_sha256

    config = ExecutorchBackendConfig()
    program = torch.export.export(model, EXAMPLE)
    if data_name is not None:
        tagged = program.module()
        delegate_external_constants_pass_unlifted(tagged, gen_tag_fn=lambda node: data_name)
        program = torch.export.export(tagged, EXAMPLE)
        config = ExecutorchBackendConfig(external_constants=lambda node: data_name)
    et = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch(
        config
    )
    renamed = key_constants_by_sha256(et, config)
    return _write(folder, name, et, model, renamed)


def _write(folder: Path, name: str, et, model: torch.nn.Module, renamed: dict[str, str]) -> Built:
    pte = folder / f"{name}.pte"
    with open(pte, "wb") as f:
        et.write_to_file(f)
    et.write_tensor_data_to_file(str(folder))
    ptds = tuple(folder / f"{tag}.ptd" for tag in sorted(et._tensor_data))
    return Built(pte, ptds, model, renamed)


@dataclass(frozen=True)
class Programs:
    folder: Path
    a: Built
    b: Built
    a_raw: Built
    b_raw: Built
    xa: Built
    xb: Built
    xinline: Built
    multi: Built


def build_all(folder: Path) -> Programs:
    """Exports every program of the module docstring into ``folder``."""
    model_a, model_b = two_linear(0), two_linear(1)
    shared = twin(2)
    built = Programs(
        folder=folder,
        a=export_portable(folder, "a", {"forward": model_a}, "a_weights", keyed=True),
        b=export_portable(folder, "b", {"forward": model_b}, "b_weights", keyed=True),
        a_raw=export_portable(folder, "a_raw", {"forward": model_a}, "a_raw", keyed=False),
        b_raw=export_portable(folder, "b_raw", {"forward": model_b}, "b_raw", keyed=False),
        xa=export_xnnpack(folder, "xa", model_a, "xa_weights"),
        xb=export_xnnpack(folder, "xb", model_b, "xb_weights"),
        xinline=export_xnnpack(folder, "xinline", model_a, None),
        multi=export_portable(
            folder,
            "multi",
            {"forward": Plain(shared), "doubled": Doubled(shared)},
            "multi_weights",
            keyed=True,
        ),
    )
    update_record(
        folder,
        None,
        {
            name: {
                "kind": "program",
                "outputs": {p.name: {"sha256": sha256_of(p), "bytes": p.stat().st_size} for p in (b.pte, *b.ptds)},
            }
            for name, b in vars(built).items()
            if isinstance(b, Built)
        },
    )
    return built


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def patched(raw: bytes, offset: int, fmt: str, value) -> bytes:
    """``raw`` with ``value`` packed at ``offset`` in struct format ``fmt`` (for bad-header tables)."""
    out = bytearray(raw)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)
