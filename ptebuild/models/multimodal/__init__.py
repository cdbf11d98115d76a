"""The ``executorch-multimodal`` model kind: models that hear, from ExecuTorch's own multimodal
definitions and export code, as one program of several methods for ExecuTorch's MultimodalRunner.

A model table names a ``family`` (``voxtral-realtime``), its ``params.json``, an optional checkpoint
and the tokenizer the runner uses (:mod:`.spec`). A program is every method of the model in one
``.pte`` (for Voxtral Realtime: ``audio_encoder``, ``token_embedding``, ``text_decoder``, the text
decoder's KV cache named in it), its weights in one ``.ptd`` (``data_name``), keyed by SHA-256,
each weight once. The family's module (:mod:`.voxtral`) makes the eager model and exports the
methods with upstream's own code; the program's backend lowers them through its own hooks
(partitioners, emit config, weight keys), as for every other kind (:mod:`.build`). The check
(:mod:`.check`) runs the encoder, the prefill of a prompt and the audio, and 16 greedy decode
steps against the eager model, then ExecuTorch's ``MultimodalRunner`` on the same inputs.

Backends: those whose programs ExecuTorch's pip runtime runs here, portable and XNNPACK (float32,
or 8da4w: the backend's own transform of the eager model, torchao's 4-bit linears, checked
against that quantized eager model). Others are refused in one line. A program holds every method
of the model, or those its ``methods`` name (an encoder file and a decoder file, as mobile apps
ship them; sharing one ``data_name``, their weights are one ``.ptd``).

Nothing here imports torch or executorch; :mod:`.build` and :mod:`.check` do, in a worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptebuild.backends.base import CheckTolerances
from ptebuild.models.base import BuildJob, BuiltProgram, ModelKind, ResolvedModel
from ptebuild.models.executorch_llm.programs import tokenizer_output
from ptebuild.plan import DimPlan, InputPlan, MethodPlan

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ptebuild.backends.base import Backend
    from ptebuild.plan import BuildPlan, ProgramPlan

BACKENDS = ("portable", "xnnpack")
"""Where a multimodal program is lowered and checked here: the backends whose programs ExecuTorch's
pip runtime and MultimodalRunner run on this machine."""

FLOAT_CHECK = CheckTolerances(atol=1e-3, rtol=1e-4, min_cosine=0.9999)
"""Embeddings and logits of a float32 program against the eager model: the summation order of
XNNPACK's and the portable kernels (the text LLM kind's float tolerance)."""


def methods(spec: Any, sizes: dict[str, int]) -> dict[str, MethodPlan]:
    """The program's methods as upstream exports them (:mod:`.voxtral`): their inputs, for the report
    and the lowered program's figures. ``sizes``: the params' ``num_mel_bins`` and ``dim``."""
    bins, dim = sizes["num_mel_bins"], sizes["dim"]
    seq = DimPlan(name="seq", min=1, max=spec.max_seq_length, example=4)
    frames = DimPlan(name="mel_frames", min=8, max=spec.audio_frames, example=min(160, spec.audio_frames), multiple_of=8)
    return {
        "audio_encoder": MethodPlan(name="audio_encoder", function="audio_encoder",
                                    inputs=(InputPlan(name="mel", shape=(1, bins, "mel_frames"), dtype="float32"),),
                                    dims=(frames,)),
        "token_embedding": MethodPlan(name="token_embedding", function="token_embedding",
                                      inputs=(InputPlan(name="token_ids", shape=(1, "seq"), dtype="int64", low=0, high=1),),
                                      dims=(seq,)),
        "text_decoder": MethodPlan(name="text_decoder", function="text_decoder",
                                   inputs=(InputPlan(name="input_embeds", shape=(1, "seq", dim), dtype="float32"),
                                           InputPlan(name="cache_position", shape=("seq",), dtype="int64", low=0, high=1)),
                                   dims=(seq,)),
    }


def _sizes(params: Path, display: str, model_name: str) -> dict[str, int]:
    """``num_mel_bins`` and ``dim`` of a Voxtral Realtime ``params.json`` (read as upstream's
    ``VoxtralRealtimeConfig.from_params_json`` reads them). Raises ManifestError."""
    import json

    from ptebuild.errors import ManifestError

    try:
        data = json.loads(params.read_text())
        encoder = data["multimodal"]["whisper_model_args"]["encoder_args"]
        sizes = {"num_mel_bins": int(encoder.get("audio_encoding_args", {}).get("num_mel_bins", 128)), "dim": int(data["dim"])}
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{display}: models.{model_name}.params: {params.name} is not a params JSON ({exc}); "
                            "give upstream's params.json of the model") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"{display}: models.{model_name}.params: {params.name} has no {exc} where Voxtral Realtime's "
                            "params.json has it (dim, multimodal.whisper_model_args.encoder_args...); give upstream's "
                            "params.json of the model") from None
    return sizes


class MultimodalKind(ModelKind):
    name = "executorch-multimodal"
    generates_text = True
    hears = True
    no_etrecord = "its programs are several methods exported by ExecuTorch's multimodal export code, which writes none"
    no_test_cases = ("a multimodal program's test case is a generation through its KV cache across methods, which "
                     "ExecuTorch's BundledProgram (one call per case) does not hold; its check is the generation check")

    def spec_model(self) -> type[BaseModel]:
        from ptebuild.models.multimodal.spec import MultimodalModelSpec

        return MultimodalModelSpec

    def resolve(self, spec: Any, *, display: str, model_name: str, manifest_dir: Path, offline: bool = False) -> ResolvedModel:
        from ptebuild.models.model_files import check_model_files

        fixes = {
            "params": "give the model's params.json in its family's format",
            "tokenizer": "give a tokenizer.json, a tiktoken file or a SentencePiece model",
            "checkpoint": "give the family's checkpoint (consolidated.safetensors), or leave it out for random weights",
        }
        check_model_files(spec, fixes, display=display, model_name=model_name, manifest_dir=manifest_dir, offline=offline)
        sizes = {"num_mel_bins": 128, "dim": 0} if offline else _sizes(manifest_dir / spec.params, display, model_name)
        return ResolvedModel(methods=methods(spec, sizes), seed=spec.seed, weights=spec.checkpoint, sources=tuple(spec.sources),
                             model_files=(("params", spec.params), ("tokenizer", spec.tokenizer)))

    def program_problem(self, spec: Any, backend_name: str, backend: Backend, options: Any,
                        data_name: str | None) -> tuple[str, str] | None:
        if backend_name not in BACKENDS:
            return ("backend", f"a multimodal program is lowered and checked for {' or '.join(BACKENDS)} (ExecuTorch's "
                               f"MultimodalRunner runs those here), not {backend_name!r}; use one of them")
        quantize = getattr(options, "quantize", "none")
        if quantize not in ("none", "8da4w"):
            return ("options.quantize", f"a multimodal program is float32, or 8da4w (4-bit linear weights, as upstream's "
                                        f"export quantizes them), not {quantize!r}: PT2E int8 needs calibration data of "
                                        "every method; use quantize = '8da4w', or remove quantize")
        return None

    def check_defaults(self, backend: Backend, options: Any) -> CheckTolerances:
        if getattr(options, "quantize", "none") != "none":  # against torchao's quantized eager model, as XNNPACK's 8da4w is checked
            return backend.check_defaults(options)
        return FLOAT_CHECK

    def extra_outputs(self, program_name: str, resolved: ResolvedModel, options: Any) -> tuple[str, ...]:
        return (tokenizer_output(program_name, dict(resolved.model_files)["tokenizer"]),)

    def build(self, job: BuildJob) -> BuiltProgram:
        from ptebuild.insight.stages import Stage
        from ptebuild.models.multimodal.build import build_program

        job.stages.begin(Stage.LOWER)  # the model, export, lowering and emitting in one; the check begins with "checking"
        return build_program(job.program, job.manifest_dir, job.display, job.outputs, job.progress)


    def generate(self, plan: BuildPlan, program: ProgramPlan, prompt: str, *, max_new_tokens: int,
                 out_dir: Path | None, audio: Path | None = None) -> Any:
        from ptebuild.errors import UsageError
        from ptebuild.models.multimodal.runner import generate_from_audio

        if audio is None:
            raise UsageError(f"{plan.manifest}: program {program.name!r} generates from a prompt and an audio clip; "
                             "give --audio FILE (a 16 kHz PCM WAV file)")
        return generate_from_audio(plan, program, prompt, audio, max_new_tokens=max_new_tokens, out_dir=out_dir)


KIND = MultimodalKind()
