"""Known limits of the pinned toolchain, explained: what a failure of ExecuTorch 1.5.1 or PyTorch
2.13 (2.11 on the GPU machine) means, and what to do.

Each entry of :data:`KNOWN_LIMITS` is a :class:`KnownLimit`: the backends it concerns (empty: any),
a pattern matched against the failure's text (its one-line cause and the rest the log keeps),
optionally operators the model must call (matched against the exported graph's operator names,
``aten.conv_transpose2d.input``: a substring is enough), what to do, and the upstream change
that fixes it and the release that carries it where known. :func:`explain` returns the first
entry that matches, or None; a failed lowering's line gets the entry's :meth:`KnownLimit.advice`
appended (one clause; the log keeps the whole text).

The check (``lowering/check.py``) may call :func:`explain` too, with the text of a mismatch, or
:func:`by_name` where it recognised the failure itself: a static int8 XNNPACK program whose
answers depend on the order of its calls is ``xnnpack-static-int8-batch-order``.

Sources: the notes of runs on the H200 (``/work/shared/docs/cuda-notes.md``), ExecuTorch 1.5.1's
code as installed, and pytorch/executorch#24222 (fixes for 1.6, "cherry-pick to release/1.6").
Imports nothing heavy: no torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ptebuild.errors import BuildError


@dataclass(frozen=True)
class KnownLimit:
    """One known failure of the pinned toolchain."""

    name: str
    """A stable identifier (``cuda-attention-bfloat16``), for tests and logs."""
    toolchain: str
    """Whose limit: ``ExecuTorch 1.5.1's CUDA backend``."""
    pattern: re.Pattern[str]
    """Matched (searched) in the failure's text."""
    what_to_do: str
    """The way out, one clause."""
    backends: tuple[str, ...] = ()
    """The backends it concerns; empty: any."""
    operators: tuple[str, ...] = ()
    """The model calls one of these operators (substrings of the exported graph's operator names);
    empty: the text alone decides."""
    fixed_by: str = ""
    """The upstream change that fixes it and the release that carries it, where known."""
    unfixed: str = ""
    """Set instead when no upstream change fixes it yet: what upstream's code does."""
    applied_by_ptebuild: str = ""
    """Set when ptebuild applies a fix itself (then a failure means the fix did not cover the case)."""

    def matches(self, text: str, operators: Iterable[str] = (), backend: str | None = None) -> bool:
        if self.backends and backend is not None and backend not in self.backends:
            return False
        if self.operators:
            names = list(operators)
            if names and not any(wanted in name for wanted in self.operators for name in names):
                return False
        return bool(self.pattern.search(text))

    def advice(self) -> str:
        """One clause for the failure's line: ``known limit of X: what to do (fixed upstream by ...)``,
        what to do last (the fix ends an error's line); a limit no upstream change fixes yet ends
        ``; not fixed upstream yet (what upstream's code does)``."""
        fixed = f" (fixed upstream by {self.fixed_by})" if self.fixed_by else ""
        if self.unfixed:
            fixed = f"; not fixed upstream yet ({self.unfixed})"
        return f"known limit of {self.toolchain}: {self.what_to_do}{fixed}"


KNOWN_LIMITS: tuple[KnownLimit, ...] = (
    KnownLimit(
        name="cuda-attention-bfloat16",
        toolchain="ExecuTorch 1.5.1's CUDA backend",
        pattern=re.compile(r"Expected bfloat16 inputs"),
        backends=("cuda",),
        what_to_do=(
            "its attention kernel (scaled_dot_product_attention, as nn.TransformerEncoderLayer and "
            "nn.MultiheadAttention call it) takes bfloat16 only: export the model in bfloat16 (the factory "
            "returns model.to(torch.bfloat16), its float inputs declare dtype = \"bfloat16\")"
        ),
        operators=("scaled_dot_product_attention", "_scaled_dot_product", "multi_head_attention"),
        unfixed="executorch/backends/cuda/triton/kernels/sdpa.py refuses other dtypes",
    ),
    KnownLimit(
        name="cuda-transposed-convolution",
        toolchain="ExecuTorch 1.5.1's CUDA backend",
        pattern=re.compile(r"NoValidChoicesError|max_autotune_conv_backends"),
        backends=("cuda",),
        what_to_do=(
            "Inductor has no Triton kernel for this convolution and ExecuTorch's CUDA runtime no ATen one; "
            "ptebuild lowers transposed convolutions of 1 or 2 spatial dims without dilation as convolutions, "
            "so this one has dilation or 3 spatial dims: give it dilation 1 and at most 2 spatial dims"
        ),
        operators=("conv_transpose", "convolution"),
        fixed_by="pytorch/executorch#24222 (transposed convolutions, 1-D and 2-D, no dilation, for 1.6)",
        applied_by_ptebuild="backends/cuda/conv_transpose.py",
    ),
    KnownLimit(
        name="cuda-missing-fallback-kernel",
        toolchain="ExecuTorch 1.5.1's CUDA runtime",
        pattern=re.compile(r"missing fallback kernels?|calls C shims that ExecuTorch [\d.]+'s CUDA runtime does not define"),
        backends=("cuda",),
        what_to_do=(
            "the compiled code would call an ATen kernel the device's runtime does not have (it has only "
            "int4/int8 matmuls, sort and randint); rewrite the operator named with ones Inductor compiles "
            "itself: F.interpolate without antialias, an nn.LSTM unrolled into matmuls (nn.LSTMCell calls "
            "_thnn_fused_lstm_cell), masks with torch.where instead of x[mask] = v"
        ),
        fixed_by="pytorch/executorch#24222 and #24299 (scatter, index_put and mask indexing, for 1.6)",
    ),
    KnownLimit(
        name="xnnpack-static-int8-batch-order",
        toolchain="ExecuTorch 1.5.1's XNNPACK delegate",
        pattern=re.compile(r"depends? on (the order|what ran before)|order[- ]dependent", re.IGNORECASE),
        backends=("xnnpack",),
        what_to_do=(
            "a static int8 program with a dynamic dim answered wrongly once a larger size followed a smaller "
            "one on the same loaded program (its float program does not): give that dim one size (min = max, "
            "a program per size) or use quantize = 'int8-dynamic'"
        ),
        fixed_by="not known (the upstream cause is not identified; google/XNNPACK#6222 fixed a like sizing of "
                 "dynamic quantization parameters at the first shape)",
    ),
    KnownLimit(
        name="cuda-attention-mask",
        toolchain="ExecuTorch 1.5.1's CUDA backend",
        pattern=re.compile(r"attn_mask (head dimension must be 1|shape mismatch|must have dtype torch\.bool)"),
        backends=("cuda",),
        what_to_do=(
            "its attention kernel takes a boolean mask of 4 dims [batch, 1, queries, keys] or none; a float mask, "
            "or the 2-dim [queries, keys] one of ExecuTorch's own Llama attention (its LLM export without the "
            "custom SDPA), is refused: build the mask as (positions allowed).view(1, 1, L, S) in bool, or call "
            "scaled_dot_product_attention with is_causal=True and no mask"
        ),
        operators=("scaled_dot_product_attention",),
        unfixed="executorch/backends/cuda/triton/kernels/sdpa.py checks the mask's dims and dtype and broadcasts none",
    ),
    KnownLimit(
        name="coreml-input-dtype",
        toolchain="coremltools 9.0 (ExecuTorch 1.5.1's Core ML backend)",
        pattern=re.compile(r"_construct_ct_tensor_type_from_torch[\s\S]*?KeyError: torch\.\w+"),
        backends=("coreml",),
        what_to_do=(
            "a Core ML model takes float32, float16, int32, int16 and bool inputs (int64 and float64 as int32 "
            "and float32), not uint8, int8 or bfloat16: declare the input float32 or int32 (an image as float "
            "pixel values), or export a bfloat16 model in float32 or float16 (Core ML computes in its "
            "compute_precision anyway)"
        ),
        unfixed="coremltools/converters/mil/frontend/torch/utils.py maps no other torch dtype",
    ),
    KnownLimit(
        name="openvino-input-bfloat16",
        toolchain="OpenVINO 2025.4's PyTorch frontend (ExecuTorch 1.5.1's OpenVINO backend)",
        pattern=re.compile(r"openvino_compile[\s\S]*?KeyError: torch\.\w+"),
        backends=("openvino",),
        what_to_do=(
            "its inputs may be float32, float16, float64, int64, int32, uint8, int8 or bool, not bfloat16: export "
            "the model in float32 (OpenVINO computes it in bf16 on CPUs with AMX or AVX512-BF16 anyway) or float16"
        ),
        unfixed="openvino/frontend/pytorch/torchdynamo/compile.py's dtype_mapping has no bfloat16",
    ),
    KnownLimit(
        name="openvino-zero-dim",
        toolchain="ExecuTorch 1.5.1's OpenVINO runtime",
        pattern=re.compile(r"OpenVINO delegate has arguments of 0 dims"),
        backends=("openvino",),
        what_to_do=(
            "a delegate that takes or returns a tensor of 0 dims (a scalar such as x.sum(), or an input of shape []) "
            "fails to run (error 0x1, Internal; seen with inputs and outputs alike): give it one dim (return "
            "x.sum().reshape(1), declare the input with shape [1])"
        ),
        unfixed="seen with openvino 2025.4.1; the cause inside the runtime is not identified",
    ),
    KnownLimit(
        name="xnnpack-cond-branches",
        toolchain="ExecuTorch 1.5.1's XNNPACK partitioner",
        pattern=re.compile(r"was not decomposed or delegated"),
        backends=("xnnpack",),
        operators=("cond",),
        what_to_do=(
            "it does not partition inside torch.cond's branches, where to_edge_transform_and_lower keeps the operators "
            "it would have delegated (aten.linear) undecomposed, so nothing runs them: build this model for portable, "
            "or compute both branches and pick with torch.where"
        ),
        unfixed="seen with ExecuTorch 1.5.1: both branches' linear layers left undecomposed and undelegated",
    ),
    KnownLimit(
        name="coreml-state-target",
        toolchain="coremltools 9.0 (ExecuTorch 1.5.1's Core ML backend)",
        pattern=re.compile(r"State model is supported only >= iOS18"),
        backends=("coreml",),
        what_to_do=(
            "a model that updates a buffer in place becomes a Core ML model with state, which loads on iOS 18 and "
            "macOS 15 or later: set compile_specs = { minimum_deployment_target = \"iOS18\" } (or macOS15)"
        ),
    ),
    KnownLimit(
        name="vulkan-state",
        toolchain="ExecuTorch 1.5.1's Vulkan partitioner",
        pattern=re.compile(r"the Vulkan graph has[\s\S]*the model updates buffers in place|"
                           r"the graph has [\s\S]*the model updates buffers in place"),
        backends=("vulkan",),
        what_to_do=(
            "the delegate of a model that updates a buffer in place does not bind to its call (seen: a graph with one "
            "output more than the call passes, or its outputs in another order): keep the state outside the model (take "
            "it as an input and return the new one), or build this model for XNNPACK or portable"
        ),
        unfixed="seen with ExecuTorch 1.5.1",
    ),
    KnownLimit(
        name="xnnpack-pt2e-state",
        toolchain="torchao's PT2E quantization (XNNPACK int8, int8-dynamic)",
        pattern=re.compile(r"the model updates buffers in place \([^)]*\) and is PT2E-quantized"),
        backends=("xnnpack",),
        what_to_do=(
            "it quantizes a state's in-place updates like any value (seen: a counter clamped to int8's range, a running "
            "mean's add applied to a copy of the buffer, values that depend only on buffers folded into constants at "
            "conversion), so the program computes something else: keep the state outside the model (take it as an "
            "input and return the new one), or use quantize = '8da4w' or none"
        ),
        unfixed="seen with torchao 0.18's prepare_pt2e and convert_pt2e",
    ),
    KnownLimit(
        name="xnnpack-bfloat16-depthwise-convolution",
        toolchain="ExecuTorch 1.5.1's XNNPACK runtime",
        pattern=re.compile(r"Failed to create depthwise convolution node \d+ with code: xnn_status_invalid_parameter"),
        backends=("xnnpack",),
        what_to_do=(
            "its partitioner delegates a bfloat16 depthwise convolution (a Conv1d or Conv2d with groups equal to its "
            "channels: LFM2's short convolutions, Qwen3.5's linear attention) that its runtime cannot create, so the "
            "program does not load: build the model in float32, or in bfloat16 without enable_bf16 (nothing is then "
            "delegated: ExecuTorch's portable kernels run it)"
        ),
        unfixed="seen with ExecuTorch 1.5.1 (LFM2 and Qwen3.5 with dtype_override = 'bf16' and enable_bf16)",
    ),
    KnownLimit(
        name="xnnpack-quantized-pad",
        toolchain="ExecuTorch 1.5.1's XNNPACK delegate",
        pattern=re.compile(r"Failed to create StaticConstantPad node \d+ with code: xnn_status_invalid_parameter"),
        backends=("xnnpack",),
        what_to_do=(
            "its partitioner delegates a constant pad whose input and output XNNPACK holds in different datatypes or "
            "quantizations (a pad of a dequantized tensor read in float: torchvision's swin_t int8), which its runtime "
            "cannot create, so the program does not load; ptebuild leaves such pads to the kernels, so this pad is "
            "another case: quantize with quantize = 'int8-dynamic', or keep the pad's neighbours float"
        ),
        unfixed="executorch/backends/xnnpack/partition/config/generic_node_configs.py ConstantPadConfig takes the pad as "
                "float whatever surrounds it",
        applied_by_ptebuild="backends/xnnpack/pad.py",
    ),
    KnownLimit(
        name="executorch-runtime-torch-2.11",
        toolchain="ExecuTorch 1.5.1's pip runtime under torch 2.11",
        pattern=re.compile(r"tensor does not have a device"),
        what_to_do=(
            "the wheel's native runtime was built against another torch: check portable and XNNPACK programs "
            "on a machine with torch 2.13 (CPU), and share the cache with it"
        ),
    ),
)
"""The table, first match wins (see the module docstring)."""


def explain(text: str, operators: Iterable[str] = (), backend: str | None = None) -> KnownLimit | None:
    """The known limit a failure's ``text`` (for a model calling ``operators``, lowered for
    ``backend``) matches, or None."""
    names = list(operators)
    return next((limit for limit in KNOWN_LIMITS if limit.matches(text, names, backend)), None)


def by_name(name: str) -> KnownLimit:
    """The entry called ``name`` (KeyError if none): for a caller that recognised the failure itself
    (the check, finding a program whose answers depend on the order of its calls)."""
    for limit in KNOWN_LIMITS:
        if limit.name == name:
            return limit
    raise KeyError(name)


def operators_of(graph_module: object) -> list[str]:
    """The operator names (``aten.conv_transpose2d.input``) an exported graph calls, subgraphs
    included; for :func:`explain`."""
    names = []
    modules = getattr(graph_module, "modules", lambda: [graph_module])()
    for module in modules:
        graph = getattr(module, "graph", None)
        for node in getattr(graph, "nodes", ()):
            if getattr(node, "op", None) == "call_function":
                names.append(str(node.target))
    return names


def explained(error: BuildError, backend: str) -> BuildError:
    """``error`` with the known limit it is appended to its message (the check's failures)."""
    found = explain(error.message + "\n" + "\n".join(getattr(error, "__notes__", ())), (), backend)
    if found is None:
        return error
    again = type(error)(f"{error.message}; {found.advice()}", manifest=error.manifest, location=error.location)
    for note in getattr(error, "__notes__", ()):
        again.add_note(note)
    return again
