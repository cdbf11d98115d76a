"""Check a multimodal program as ExecuTorch's ``MultimodalRunner`` runs it: encoder, prefill and
decode against the eager model, then the runner itself.

In ExecuTorch's runtime, on the program and its ``.ptd`` as written (one loaded copy of the weights):

1. **Encoder**: a seeded mel spectrogram (``AUDIO_FRAMES`` frames of ``num_mel_bins``, normal
   values, the model's seed) through ``audio_encoder``, against the eager model's encoder
   (upstream's export wrapper called eagerly): error and cosine under the program's tolerance for
   its dtype, judged as every check's outputs are (:func:`ptebuild.lowering.check.judge`).
2. **Prefill**, in the runner's order: a seeded prompt of ``PROMPT_TOKENS`` token ids through
   ``token_embedding`` and ``text_decoder`` at positions ``0..n-1``, then the program's own audio
   embeddings through ``text_decoder`` at the next positions. The eager model gets the same calls
   with its own embeddings, its KV cache zeroed first as the runtime's planned memory is. The
   last position's logits are judged.
3. **Decode**: ``DECODE_STEPS`` greedy steps through the program's KV cache, each fed the program's
   greedy token (``token_embedding`` then ``text_decoder`` at the next position), the eager model
   the same tokens (teacher forcing): each step's logits judged and its token compared, a tie within
   the tolerance counting as agreement (:class:`~ptebuild.models.executorch_llm.generation.DecodeSteps`,
   the text LLM check's). A float program agrees on every step.
4. **The runner**: ``MultimodalRunner`` loads the ``.pte``, the ``.ptd`` and the tokenizer written
   beside the program and generates greedily from the same inputs (the prompt's ids, then the
   audio); what it prints must be the pieces of the program's greedy tokens of step 3. This proves
   that the metadata methods (``get_max_seq_len``, BOS/EOS...) and the methods' layout fit the runner.

A program that computes something else (logits or embeddings far from eager's, tokens under the
floor) is a :class:`~ptebuild.lowering.check.WrongProgram`; close but beyond the tolerance is a
tolerance miss with its figures. The figures state the tolerance and the data (seeded mel frames,
prompt ids, decode steps).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ptebuild.errors import CheckError
from ptebuild.figures import CheckFigures, GenerationFigures, OutputFigures, Verdict
from ptebuild.plan import ProgramPlan

PROMPT_TOKENS = 8
DECODE_STEPS = 16
AUDIO_FRAMES = 32
"""The check's audio: 32 mel frames (0.32 s), 4 positions of the text decoder."""
RUNNER_TOKENS = 8


@dataclass(frozen=True)
class Inputs:
    """The check's seeded inputs: a mel spectrogram ``[1, bins, frames]`` and a prompt's token ids."""

    mel: Any
    """None: the prompt alone (a program without an audio encoder)."""
    prompt: list[int]


def seeded_inputs(seed: int, num_mel_bins: int, frames: int, vocab_size: int, prompt_tokens: int) -> Inputs:
    import torch

    generator = torch.Generator().manual_seed(seed)
    mel = torch.randn(1, num_mel_bins, frames, generator=generator)
    prompt = torch.randint(0, vocab_size, (prompt_tokens,), generator=generator).tolist()
    return Inputs(mel, prompt)


class _Program:
    """The program's methods loaded in ExecuTorch's runtime, called as the runner calls them."""

    def __init__(self, pte: Path, ptd: Path | None, methods: list[str]) -> None:
        from executorch.runtime import Runtime

        loaded = Runtime.get().load_program(pte, data_path=ptd)
        self.methods = {name: loaded.load_method(name) for name in methods}

    def call(self, method: str, *inputs: Any) -> Any:
        return self.methods[method].execute(list(inputs))[0]


def check_multimodal(eager: Any, program: ProgramPlan, pte: Path, ptds: list[Path], tokenizer: Any, tokenizer_file: Path,
                     mutable_buffers: tuple[str, ...], dims: Any, min_agreement: float = 1.0) -> list[CheckFigures]:
    """Steps 1 to 4 of the module docstring, for the methods the program holds (a program of some
    of them, an encoder file or a decoder file, is run with the eager model's outputs for the
    others). ``eager``: the model as a module of the program's methods (:func:`ptebuild.models.
    multimodal.voxtral.methods_module`, or the backend's transform of it). Raises CheckError (a
    wrong program, or a tolerance miss)."""
    import torch

    from ptebuild.lowering.check import runtime_error, runtime_log, wrong_at
    from ptebuild.models.executorch_llm.generation import DecodeSteps, judged_logits
    from ptebuild.models.executorch_llm.native_output import register_llm_kernels
    from ptebuild.runtime import one_data_file

    register_llm_kernels()
    present = [method.name for method in program.methods]
    from ptebuild.models.multimodal.spec import MultimodalModelSpec

    positions = MultimodalModelSpec.model_validate(program.model_entry).max_seq_length
    prompt_tokens = max(1, min(PROMPT_TOKENS, positions // 4))
    inputs = seeded_inputs(program.seed, dims.num_mel_bins, AUDIO_FRAMES, tokenizer.vocab_size, prompt_tokens)
    audio_positions = AUDIO_FRAMES // 8
    steps = max(1, min(DECODE_STEPS, positions - prompt_tokens - audio_positions - 1))
    zero_state(eager, mutable_buffers)
    figures: list[CheckFigures] = []
    fed: list[int] = []

    with one_data_file(pte, ptds, verify_bytes=True) as ptd, runtime_log() as log, torch.no_grad():
        try:
            ours = _Program(pte, ptd, present)
        except Exception as exc:
            raise runtime_error(f"to load {pte.name}", exc, log, program.name) from exc

        def run(method: str, *args: Any) -> Any:
            """The program's method where it holds it, else the eager model's (a program of some methods)."""
            if method not in ours.methods:
                return getattr(eager, method)(*args)
            try:
                return ours.call(method, *args)
            except Exception as exc:
                raise runtime_error(f"to run {method}", exc, log, program.name) from exc

        def judged(method: str, where: str, output: str, expected: Any, actual: Any, sizes: dict[str, int],
                   inputs: tuple[Any, ...]) -> None:
            figures.append(_judged_output(program, method, where, output, expected, actual, sizes, inputs))

        eager_audio = eager.audio_encoder(inputs.mel)
        audio = run("audio_encoder", inputs.mel)
        if "audio_encoder" in present:
            judged("audio_encoder", f"method 'audio_encoder', a seeded mel spectrogram of {AUDIO_FRAMES} frames of "
                   f"{dims.num_mel_bins} bins (seed {program.seed})", "0 (the audio embeddings)", eager_audio, audio,
                   {"mel_frames": AUDIO_FRAMES}, (inputs.mel,))
        ids = torch.tensor([inputs.prompt], dtype=torch.long)
        if "text_decoder" not in present:
            if "token_embedding" in present:
                judged("token_embedding", f"method 'token_embedding', {prompt_tokens} seeded token ids (seed {program.seed})",
                       "0 (the embeddings)", eager.token_embedding(ids), run("token_embedding", ids),
                       {"prompt_tokens": prompt_tokens}, (ids,))
            ours.methods.clear()
            return figures

        def decoder(call: Any, embeds: Any, start: int) -> Any:
            return call("text_decoder", embeds, torch.arange(start, start + embeds.shape[1], dtype=torch.long))[0, -1]

        def eager_call(method: str, *args: Any) -> Any:
            return getattr(eager, method)(*args)

        decoder(run, run("token_embedding", ids), 0)
        actual = [decoder(run, audio, prompt_tokens)]
        decoder(eager_call, eager.token_embedding(ids), 0)
        expected = [decoder(eager_call, eager_audio, prompt_tokens)]
        dtype = str(actual[0].dtype).removeprefix("torch.")
        tolerance = program.check_settings().for_dtype(dtype)
        # What the search for the first divergence feeds the text decoder, from an empty cache.
        embeds = torch.cat([eager.token_embedding(ids), eager_audio], dim=1)
        decoder_inputs = (embeds, torch.arange(embeds.shape[1], dtype=torch.long))
        with wrong_at("text_decoder", decoder_inputs):
            prefilled = judged_logits(program, "text_decoder", f"method 'text_decoder', the prefill of a seeded prompt of "
                                      f"{prompt_tokens} token ids and the audio's {audio_positions} embeddings "
                                      f"(seed {program.seed})", expected[0], actual[0], tolerance, "")
        position = prompt_tokens + audio_positions
        for _ in range(steps):
            fed.append(int(actual[-1].argmax()))
            fed_id = torch.tensor([[fed[-1]]], dtype=torch.long)
            actual.append(decoder(run, run("token_embedding", fed_id), position))
            expected.append(decoder(eager_call, eager.token_embedding(fed_id), position))
            position += 1
        runner_inputs = inputs
        if "audio_encoder" not in present:  # the runner then gets the prompt alone: the program's continuation of it
            runner_inputs = Inputs(None, inputs.prompt)
            continuation = [int(decoder(run, run("token_embedding", ids), 0).argmax())]
            while len(continuation) < min(RUNNER_TOKENS, steps):
                last = torch.tensor([[continuation[-1]]], dtype=torch.long)
                continuation.append(int(decoder(run, run("token_embedding", last), prompt_tokens + len(continuation) - 1).argmax()))
        else:
            continuation = fed[:RUNNER_TOKENS]
        ours.methods.clear()  # the loaded program goes before the runner loads its own
    decode = DecodeSteps(program, tolerance, "", "text_decoder")
    for step in range(steps):
        decode.token(step, expected[step], actual[step])
        decode.logits(step, expected[step + 1], actual[step + 1])
    with wrong_at("text_decoder", decoder_inputs):
        decode.verdict(min_agreement)
    common: dict[str, Any] = {"output": 0, "dtype": dtype, "atol": tolerance.atol, "rtol": tolerance.rtol,
                              "min_cosine": tolerance.min_cosine, "data": "random", "samples": 0, "prompt_seed": program.seed}
    figures.append(GenerationFigures(
        **common, method="text_decoder", stage="prefill",
        sizes={"prompt_tokens": prompt_tokens, "audio_positions": audio_positions},
        max_abs_error=prefilled.found.max_abs_error, cosine=prefilled.found.cosine, worst_excess=prefilled.found.worst_excess,
        magnitude=prefilled.found.magnitude, verdict=Verdict(prefilled.verdict), reason=prefilled.reason))
    runner_tokens = None
    if "token_embedding" in present:
        runner_tokens = check_in_runner(program, pte, ptds, tokenizer, tokenizer_file, runner_inputs, continuation)
    figures.append(replace(decode.figures(**common, method="text_decoder"), stage="decode", sizes={"decode_steps": steps},
                           tokens=steps, min_token_agreement=min_agreement, runner_tokens=runner_tokens))
    return figures


def _judged_output(program: ProgramPlan, method: str, where: str, output: str, expected: Any, actual: Any,
                   sizes: dict[str, int], inputs: tuple[Any, ...]) -> OutputFigures:
    """One method's output against the eager model's, under the program's tolerance for its dtype;
    raises as every check does where it fails."""
    from ptebuild.lowering.check import judge, measure, refusal

    dtype = str(actual.dtype).removeprefix("torch.")
    tolerance = program.check_settings().for_dtype(dtype)
    found = measure(expected, actual, tolerance)
    verdict, reason, wrong = judge(found)
    if verdict is Verdict.FAILED:
        raise refusal(program, where, output, found, reason, wrong, "", method, inputs)
    return OutputFigures(method=method, output=0, dtype=dtype, atol=tolerance.atol, rtol=tolerance.rtol,
                         min_cosine=tolerance.min_cosine, data="random", samples=0, sizes=sizes,
                         max_abs_error=found.max_abs_error, cosine=found.cosine, worst_excess=found.worst_excess,
                         magnitude=found.magnitude, verdict=verdict, reason=reason)


def zero_state(model: Any, mutable_buffers: tuple[str, ...]) -> None:
    """The eager model's mutable buffers (its KV cache) zeroed, as the runtime's planned memory starts."""
    import torch

    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name in mutable_buffers:
            if name in buffers:
                buffers[name].zero_()


def check_in_runner(program: ProgramPlan, pte: Path, ptds: list[Path], tokenizer: Any, tokenizer_file: Path,
                    inputs: Inputs, tokens: list[int]) -> int:
    """ExecuTorch's ``MultimodalRunner`` generates greedily from the check's prompt ids and audio;
    it must print the pieces of ``tokens`` (the program's greedy tokens, run step by step).
    Returns the number of tokens it printed. Raises CheckError."""
    from executorch.extension.llm.runner import GenerationConfig, MultimodalRunner, make_audio_input, make_token_input

    from ptebuild.lowering.check import runtime_error, runtime_log
    from ptebuild.models.executorch_llm.native_output import printed, runner_stdout_captured
    from ptebuild.runtime import one_data_file

    stops = {tokenizer.eos}
    if tokens and tokens[0] in stops:
        return 0
    wanted: list[int] = []
    for token in tokens:
        wanted.append(token)
        if token in stops:
            break
    pieces = [tokenizer.piece(token) for token in wanted]
    if any(piece is None for piece in pieces):
        return 0  # the runner fails at an id the tokenizer has no piece for (a vocab_size that pads it)
    expected = b"".join(printed(piece) for piece in pieces if piece is not None)
    with one_data_file(pte, ptds) as ptd, runtime_log() as log, runner_stdout_captured() as out:
        try:
            runner = MultimodalRunner(str(pte), str(tokenizer_file), str(ptd) if ptd else None)
            media = [make_audio_input(inputs.mel)] if inputs.mel is not None else []
            runner.generate([make_token_input(list(inputs.prompt)), *media],
                            GenerationConfig(echo=False, max_new_tokens=len(wanted), temperature=0.0), None, None)
        except Exception as exc:
            raise runtime_error("in ExecuTorch's MultimodalRunner", exc, log, program.name) from exc
    del runner
    text = out.text.rstrip(b"\n")
    if text != expected.rstrip(b"\n"):
        raise CheckError(
            f"ExecuTorch's MultimodalRunner generated {text.decode(errors='backslashreplace')!r} from the check's prompt"
            f"{' and audio' if inputs.mel is not None else ''}, the program run step by step "
            f"{expected.decode(errors='backslashreplace')!r}: its metadata methods or its tokenizer do not fit the runner",
            location=f"programs.{program.name}",
        )
    return len(wanted)
