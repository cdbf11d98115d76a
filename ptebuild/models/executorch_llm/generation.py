"""Check an LLM program as an LLM runs, and generate text with it through ExecuTorch's own runner.

**The check** (:func:`check_generation`), in ExecuTorch's runtime:

1. Prefill: a seeded prompt of random token ids (``prompt_tokens`` of them, drawn from the
   tokenizer's ids with the model's seed) goes through ``forward`` from position 0, in one call
   when the program takes a dynamic sequence, else one token per call (or, without a KV cache,
   the whole sequence each call); the same calls go to the eager model (upstream's model after its
   source transforms, its KV cache zeroed as the runtime's planned memory is). The last position's
   logits are measured and judged as every check's outputs are (:func:`ptebuild.lowering.check.
   measure` and ``judge``), held to the program's tolerance for the logits' dtype
   (:mod:`ptebuild.tolerances`: the kind's defaults, the manifest's ``check`` over them).
2. Decode: ``decode_steps`` greedy steps through the program's own KV cache, each fed the
   program's greedy token, as a runner generates. The eager model is given the same tokens
   (teacher forcing), so every step compares the two on the same context: the step's logits
   (judged as the prefill's) and its token. A step agrees when the program's greedy token is the
   eager model's, or ties with it: eager's logits of the two tokens within the sum of their bounds
   (a right program may move each by its bound; random weights give near-ties). Float programs
   must agree on every step; quantized ones on ``min_token_agreement`` of them.

   The eager side (:func:`eager_logits`) knows every token in advance, so it runs once over the
   prompt and the decoded tokens and reads each position's logits, where that computes what its
   step-by-step calls would (upstream's ``Transformer`` with a dynamic sequence and a plain KV
   cache: :func:`takes_whole_sequence`); otherwise it is called as the program was. One eager
   call instead of ``1 + decode_steps``: an eager 8da4w model dequantizes its weights in every
   call (about 4 s per call at Llama-3.2-1B's size on 2 cores).

   The verdicts are the check's (:mod:`ptebuild.figures`): logits far from eager's (a cosine
   under :data:`~ptebuild.tolerances.WRONG_COSINE`, an error the size of the logits) or tokens
   under the floor name a program that computes something else
   (:class:`~ptebuild.lowering.check.WrongProgram`: not a tolerance problem, never "loosen the
   check"); logits close to eager's but beyond the tolerance are a tolerance miss, with the
   figures and the way to loosen it. The figures state the tolerance (``atol``, ``rtol``,
   ``min_cosine``, ``dtype``) and the data (``prompt_tokens``, ``prompt_seed``, ``decode_steps``).
3. The runner: ExecuTorch's ``TextLLMRunner`` loads the ``.pte``, ``.ptd`` and the tokenizer
   written beside the program and generates greedily from a text prompt; the bytes it prints must
   be the pieces of the greedy continuation of the same program run step by step here, as the
   runner prints them (:func:`printed`). This proves that the metadata methods (lengths, BOS/EOS,
   KV cache, dynamic shape) and the tokenizer fit the real runner. The runner's text is read from
   what it prints (its file descriptor 1), not from its Python token callback: executorch 1.5.1's
   binding hands each piece to the callback as ``str`` and fails on a piece that is part of a UTF-8
   character, which every byte-level tokenizer has. The runner is asked for the continuation up to
   the first id the tokenizer has no piece for (a ``vocab_size`` that pads the tokenizer: a random
   model picks such ids, a trained one does not), and the build says so in a warning.

**Generation** (:func:`generate_with_runner`, ``ptebuild run MANIFEST PROGRAM --prompt TEXT``):
``TextLLMRunner`` generates from the prompt, its text read as the check reads it; the prefill is
timed as a generation of one token, the decode as the whole generation less that
(``perf_counter``: the runner's own stats count whole milliseconds).

The runner and the method need ExecuTorch's LLM kernels registered in this process
(``executorch.extension.llm.custom_ops.custom_ops``: ``llama::custom_sdpa``, ``update_cache``;
``executorch.kernels.quantized``: quantized embeddings), imported by :func:`register_llm_kernels`.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ptebuild.errors import CheckError, LoadError
from ptebuild.plan import BuildPlan, ProgramPlan

PROMPT_TOKENS = 16
DECODE_STEPS = 16
RUNNER_PROMPTS = ("Once upon a time", "The robot", "Hello", "In the beginning", "1, 2, 3,")
"""The runner's prompts, tried in turn until the program's greedy continuation is tokens the
tokenizer has pieces for (:func:`_runner_continuation`): the first, nearly always."""
RUNNER_TOKENS = 8


def register_llm_kernels() -> None:
    """Register ExecuTorch's LLM operators (custom SDPA, KV-cache update, quantized embeddings) in
    this process: the runtime resolves a program's operators when its method is loaded. Also
    imports the runner, quietly: its tokenizers announce themselves on stderr when loaded."""
    import ctypes

    from ptebuild.lowering.check import native_stderr_silenced

    with native_stderr_silenced():
        import executorch.extension.llm.custom_ops.custom_ops
        import executorch.extension.llm.runner
        import executorch.kernels.quantized  # noqa: F401

        ctypes.CDLL(None).fflush(None)  # what C's stdio buffered goes out now, silenced


@contextlib.contextmanager
def _fd1_to(target: int) -> Iterator[None]:
    """File descriptor 1 pointed at ``target`` while the block runs; what C's buffers hold (the
    runner's and its tokenizer's prints) flushed there before it is pointed back."""
    import ctypes
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(target, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def runner_stdout_to_stderr() -> Iterator[None]:
    """The runner prints what it generates and its stats ("PyTorchObserver {...}") on file
    descriptor 1, which is a report's channel (``--json``, an executor's pipe): send it to fd 2
    while it runs (where :func:`~ptebuild.lowering.check.runtime_log` collects it)."""
    with _fd1_to(2):
        yield


class Printed:
    """What a runner printed on file descriptor 1 while :func:`runner_stdout_captured` ran."""

    def __init__(self) -> None:
        self.output = b""

    @property
    def text(self) -> bytes:
        """The generated text: what the runner printed before its closing newline and its stats line
        (``text_llm_runner.cpp``: ``printf("\\n")``, then ``PyTorchObserver {...}``)."""
        end = self.output.rfind(b"PyTorchObserver {")
        text = self.output[:end] if end >= 0 else self.output
        return text[:-1] if text.endswith(b"\n") else text


@contextlib.contextmanager
def runner_stdout_captured() -> Iterator[Printed]:
    """Collect what the runner prints on file descriptor 1 (the pieces it generates, its stats) into
    a temporary file, read into the yielded :class:`Printed` when the block ends."""
    import tempfile

    printed = Printed()
    with tempfile.TemporaryFile() as file:
        try:
            with _fd1_to(file.fileno()):
                yield printed
        finally:
            file.seek(0)
            printed.output = file.read()


def printed(piece: bytes) -> bytes:
    """What ExecuTorch's runner prints for a piece (``llm::safe_printf``): nothing for a piece of one
    byte that is neither printable ASCII nor whitespace (a byte-level piece of part of a character,
    a control code), else the piece up to a NUL byte (``printf("%s")``)."""
    if len(piece) == 1 and not (0x20 <= piece[0] <= 0x7E or piece[0] in b"\t\n\v\f\r"):
        return b""
    return piece.split(b"\0", 1)[0]


@dataclass(frozen=True)
class Shape:
    """How the program is called (from the model's table): a KV cache, a dynamic sequence."""

    use_kv_cache: bool
    dynamic: bool
    max_seq_length: int
    context_length: int

    @property
    def positions(self) -> int:
        """How many tokens one sequence may hold: the KV cache's length, else one call's."""
        if self.use_kv_cache:
            return self.context_length
        return self.max_seq_length - 1 if self.dynamic else self.max_seq_length


class _Stepper:
    """Calls ``forward`` of the program or of the eager model as an LLM runner does."""

    def __init__(self, call: Any, shape: Shape) -> None:
        self.call, self.shape = call, shape
        self.tokens: list[int] = []

    def feed(self, tokens: list[int]) -> Any:
        """Feed ``tokens`` after those fed so far; return the logits of the last one."""
        import torch

        start = len(self.tokens)
        self.tokens += tokens
        if not self.shape.use_kv_cache:
            ids = self.tokens if self.shape.dynamic else (self.tokens + [0] * self.shape.max_seq_length)[: self.shape.max_seq_length]
            return self.call(torch.tensor([ids], dtype=torch.long), None)
        if self.shape.dynamic:
            return self.call(torch.tensor([tokens], dtype=torch.long), torch.tensor([start], dtype=torch.long))
        logits = None
        for offset, token in enumerate(tokens):
            logits = self.call(torch.tensor([[token]], dtype=torch.long), torch.tensor([start + offset], dtype=torch.long))
        return logits


def _logit_rows(value: Any) -> Any:
    """The logits of each position a call returned, one row each (float64, on the CPU)."""
    import torch

    out = value[0] if isinstance(value, (list, tuple)) else value
    out = out.detach().to("cpu", torch.float64)  # the eager model's on the GPU, beside the program's
    return out.reshape(-1, out.shape[-1])


def _last_logits(value: Any) -> Any:
    return _logit_rows(value)[-1]


def eager_caller(model: Any, mutable_buffers: tuple[str, ...], device: str = "cpu") -> Any:
    """``call(tokens, input_pos, every=False)`` of the eager model (on ``device``), its mutable
    buffers zeroed first: the last position's logits, or (``every``) each position's rows. Its
    quantized embeddings dequantize only the rows looked up (:mod:`.eager_embedding`), its large
    quantized linear layers a block of rows at a time (:mod:`.eager_linear`): the same values."""
    import torch

    from ptebuild.models.executorch_llm.eager_embedding import looked_up_rows
    from ptebuild.models.executorch_llm.eager_linear import rows_in_chunks

    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name in mutable_buffers:
            if name in buffers:
                buffers[name].zero_()

    def call(tokens: Any, input_pos: Any, every: bool = False) -> Any:
        tokens = tokens.to(device)
        with torch.no_grad(), looked_up_rows(model), rows_in_chunks(model):
            out = model(tokens) if input_pos is None else model(tokens, {"input_pos": input_pos.to(device)})
        return _logit_rows(out) if every else _last_logits(out)

    return call


PLAIN_KV_CACHES = frozenset({"KVCache", "CustomKVCache"})
"""Upstream's KV caches that store each position's keys and values as computed (float): a call
over many tokens attends to what its step-by-step calls would read back. A quantized cache (the
current call attends to its own keys unquantized), a ring buffer or an attention sink do not."""


def takes_whole_sequence(model: Any, shape: Shape, length: int) -> bool:
    """Whether one eager call over ``length`` tokens from position 0 gives, at every position, the
    logits its step-by-step calls would: upstream's ``Transformer`` (every position's logits with
    ``generate_full_logits``), a dynamic sequence ``length`` fits (``max_seq_length - 1``, the
    program's own bound), no KV-sharing layers (upstream skips them in a call of many tokens) and
    only :data:`PLAIN_KV_CACHES`."""
    if not shape.dynamic or length > shape.max_seq_length - 1:
        return False
    if not isinstance(getattr(model, "generate_full_logits", None), bool):
        return False
    if getattr(model, "num_kv_shared_layers", None):
        return False
    caches = {type(module).__name__ for module in model.modules() if "kvcache" in type(module).__name__.lower()}
    return caches <= PLAIN_KV_CACHES


def eager_logits(model: Any, mutable_buffers: tuple[str, ...], shape: Shape, prompt: list[int], fed: list[int],
                 device: str = "cpu", whole: bool | None = None) -> list[Any]:
    """The eager model's logits of the prompt's last token and of each token of ``fed`` after it
    (teacher forcing): ``1 + len(fed)`` rows. One call over the whole sequence where
    :func:`takes_whole_sequence` (``whole`` overrides), else called as the program is
    (:class:`_Stepper`). The model's mutable buffers are zeroed first."""
    import torch

    call = eager_caller(model, mutable_buffers, device)
    tokens = prompt + fed
    if whole is None:
        whole = takes_whole_sequence(model, shape, len(tokens))
    if whole:
        saved = model.generate_full_logits
        model.generate_full_logits = True
        try:
            rows = call(torch.tensor([tokens], dtype=torch.long),
                        torch.tensor([0], dtype=torch.long) if shape.use_kv_cache else None, every=True)
        finally:
            model.generate_full_logits = saved
        return [rows[index] for index in range(len(prompt) - 1, len(tokens))]
    stepper = _Stepper(call, shape)
    return [stepper.feed(prompt)] + [stepper.feed([token]) for token in fed]


class ProgramCaller:
    """``call(tokens, input_pos)`` of a program's ``forward``: ``execute(inputs) -> outputs`` (a
    loaded ExecuTorch method's, or the CUDA program's compiled code), its inputs on ``device``;
    ``dtype``: its logits' (``float32``)."""

    def __init__(self, execute: Any, device: str = "cpu") -> None:
        self.execute, self.device, self.dtype = execute, device, ""

    def __call__(self, tokens: Any, input_pos: Any) -> Any:
        inputs = [tokens] if input_pos is None else [tokens, input_pos]
        outputs = list(self.execute([t.to(self.device) for t in inputs]))
        self.dtype = str(outputs[0].dtype).removeprefix("torch.")
        return _last_logits(outputs[0].cpu())


@dataclass(frozen=True)
class EagerAgreement:
    """What :func:`check_generation` found: the figures, and the program's own greedy continuation
    of the runner's prompt (what :func:`check_in_runner` must see the runner generate)."""

    figures: list[dict[str, Any]]
    continuation: bytes
    """What the runner must print: the pieces of the program's greedy tokens, as it prints them."""
    tokens: int
    """How many tokens the runner is asked for (the continuation may stop earlier, at EOS); 0 where
    the tokenizer has no piece for the first."""
    note: str = ""
    """Why the runner is asked for fewer tokens than the check's :data:`RUNNER_TOKENS` (a token the
    tokenizer has no piece for), in words; empty otherwise."""
    prompt: str = ""
    """The runner's prompt (one of :data:`RUNNER_PROMPTS`)."""


def check_generation(model: Any, program: ProgramPlan, shape: Shape, pte: Path, ptds: list[Path],
                     tokenizer: Any, mutable_buffers: tuple[str, ...], min_agreement: float,
                     execute: Any = None, device: str = "cpu", how: str = "", method: str = "forward") -> EagerAgreement:
    """The prefill and decode checks against the eager model (module docstring), then the program's
    own greedy continuation of the runner's prompt. Raises CheckError: a
    :class:`~ptebuild.lowering.check.WrongProgram` for a program that computes something else
    (logits far from eager's, tokens under the floor), else a tolerance miss with its figures.

    ``execute``: the program's ``forward`` as ``execute(inputs) -> outputs`` (the CUDA program's
    compiled code on the GPU, the eager model then on ``device`` too; ``how`` says so in messages);
    None: loaded here in ExecuTorch's runtime, once, and freed on return, so that the runner,
    which loads its own, never holds the weights beside it. ``method``: the program's method
    checked (one of a multi-method program's), ``model`` its eager model (the model, or the model
    with that method's LoRA adapter).
    """
    import torch

    from ptebuild.lowering.check import runtime_error, runtime_log
    from ptebuild.runtime import one_data_file

    if execute is None:  # ExecuTorch's runtime runs it: its LLM kernels must be there
        register_llm_kernels()
    prompt_length = max(1, min(PROMPT_TOKENS, shape.max_seq_length - 1))
    steps = max(1, min(DECODE_STEPS, shape.positions - prompt_length))
    generator = torch.Generator().manual_seed(program.seed)
    prompt = torch.randint(0, tokenizer.vocab_size, (prompt_length,), generator=generator).tolist()

    load: Callable[[bool], Any] | None = None
    if execute is None:
        def load(verify: bool) -> Any:
            from executorch.runtime import Runtime

            with one_data_file(pte, ptds, verify_bytes=verify) as ptd, runtime_log() as log:
                try:
                    return Runtime.get().load_program(pte, data_path=ptd).load_method(method).execute
                except Exception as exc:
                    raise runtime_error(f"to load {pte.name}", exc, log, program.name) from exc

        execute = load(True)
    ours = ProgramCaller(execute, device)
    stepper = _Stepper(ours, shape)
    with runtime_log() as log:
        try:
            actual = [stepper.feed(prompt)]
        except Exception as exc:
            raise runtime_error(f"to prefill {prompt_length} tokens", exc, log, program.name) from exc
    tolerance = program.check_settings().for_dtype(ours.dtype)

    def prefill(expected: Any) -> _Judged:
        return _judged(program, method, f"method {method!r}, the prefill of a seeded prompt of {prompt_length} token ids "
                       f"(seed {program.seed})", expected, actual[0], tolerance, how)

    fed: list[int] = []
    for step in range(steps):
        fed.append(int(actual[-1].argmax()))
        with runtime_log() as log:
            try:
                actual.append(stepper.feed([fed[-1]]))
            except Exception as exc:
                prefill(eager_logits(model, mutable_buffers, shape, prompt, [], device)[0])  # a wrong prefill is named first
                raise runtime_error(f"to decode step {step + 1}", exc, log, program.name) from exc
    expected = eager_logits(model, mutable_buffers, shape, prompt, fed, device)
    prefilled = prefill(expected[0])
    decode = _Decode(program, tolerance, how, method)
    for step in range(steps):
        decode.token(step, expected[step], actual[step])
        decode.logits(step, expected[step + 1], actual[step + 1])
    decode.verdict(min_agreement)
    # The runner's prompt from position 0, on the program as the runner loads it. A KV cache holds
    # nothing a new prompt reads (attention stops at the current position), so the same loaded
    # method serves; a state that is not indexed by position (LFM2's convolutions, a linear
    # attention's recurrent state) would carry the check's calls into it: a fresh load then.
    dtype = ours.dtype
    if carries_state(mutable_buffers) and load is not None:
        del stepper, ours, execute  # one loaded copy of the weights at a time

        def fresh() -> Callable[[list[int]], Any]:
            assert load is not None
            return _Stepper(ProgramCaller(load(False), device), shape).feed
    else:
        def fresh() -> Callable[[list[int]], Any]:
            return _Stepper(ProgramCaller(execute, device), shape).feed
    runner = _runner_continuation(fresh, tokenizer, shape, _stop_ids(pte, tokenizer))
    # The figures' fields as every check's (ptebuild.figures.OutputFigures), and the generation's own:
    # the tolerance the logits were held to, and the data (a seeded prompt, teacher-forced greedy steps).
    common = {"method": method, "output": 0, "dtype": dtype, **tolerance.to_json(), "data": "random",
              "samples": 0, "reason": "", "prompt_seed": program.seed}
    figures = [
        {**common, "stage": "prefill", "sizes": {"prompt_tokens": prompt_length}, "max_abs_error": prefilled.found.max_abs_error,
         "cosine": prefilled.found.cosine, "worst_excess": prefilled.found.worst_excess, "magnitude": prefilled.found.magnitude,
         "verdict": prefilled.verdict, "reason": prefilled.reason},
        {**common, "stage": "decode", "sizes": {"decode_steps": steps}, **decode.figures(), "tokens": steps,
         "min_token_agreement": min_agreement},
    ]
    return replace(runner, figures=figures)


def _runner_continuation(fresh: Callable[[], Callable[[list[int]], Any]], tokenizer: Any, shape: Shape,
                         stops: set[int]) -> EagerAgreement:
    """The greedy continuation the runner must print, from the first of :data:`RUNNER_PROMPTS`
    whose continuation the tokenizer has a piece for at every token (a model whose ``vocab_size``
    pads its tokenizer, with random weights, picks ids without one; the runner fails at such an
    id); else from the prompt whose continuation goes furthest before one, cut there, with a note.
    ``fresh()``: a ``feed`` of the program from position 0."""
    best: tuple[str, list[int], list[bytes | None], int] | None = None
    for prompt in RUNNER_PROMPTS:
        ids = tokenizer.encode(prompt)
        wanted = max(1, min(RUNNER_TOKENS, shape.positions - len(ids)))
        tokens = greedy_as_the_runner(fresh(), ids, wanted, stops)
        pieces = [tokenizer.piece(token) for token in tokens]
        known = next((i for i, piece in enumerate(pieces) if piece is None), len(pieces))
        if best is None or known > best[3]:
            best = (prompt, tokens, pieces, known)
        if known == len(tokens):
            break
    assert best is not None
    prompt, tokens, pieces, known = best
    note = ""
    if known < len(tokens):  # the runner would fail at that token ("Tokenizer error"): asked for those before it
        note = (f"the program's greedy token {known + 1} from {prompt!r} is id {tokens[known]}, which "
                f"{tokenizer.path.name} ({tokenizer.vocab_size} tokens) has no piece for: ExecuTorch's TextLLMRunner "
                + (f"was asked for the {known} before it" if known else f"was not run (nor from {len(RUNNER_PROMPTS) - 1} other prompts)")
                + f"; if {tokenizer.path.name} is the model's own (a vocab_size that pads it), a trained model does "
                "not generate these ids, else give the model's own tokenizer")
    continuation = b"".join(printed(piece) for piece in pieces[:known] if piece is not None)
    if known == len(tokens) > 1 and tokens[-1] in stops:
        continuation += b"\n"  # the runner's token generator prints a newline when it stops at an EOS
    return EagerAgreement([], continuation, known, note, prompt)


@dataclass(frozen=True)
class _Judged:
    """One call's logits against the eager model's, under the check's tolerance, judged as every
    check judges an output (:func:`ptebuild.lowering.check.judge`)."""

    found: Any
    verdict: str
    reason: str


def _judged(program: ProgramPlan, method: str, where: str, expected: Any, actual: Any, tolerance: Any, how: str) -> _Judged:
    """Measure and judge the logits of one call; raise as the check does (``refusal``: a wrong
    program, or a tolerance miss) where they fail."""
    from ptebuild.figures import Verdict
    from ptebuild.lowering.check import judge, measure, refusal

    found = measure(expected, actual, tolerance)
    verdict, reason, wrong = judge(found)
    if verdict is Verdict.FAILED:
        raise refusal(program, where, "0 (the last position's logits)", found, reason, wrong, how, method)
    return _Judged(found, verdict.value, reason)


class _Decode:
    """The decode steps' tokens and logits, and their verdict (module docstring, step 2)."""

    def __init__(self, program: ProgramPlan, tolerance: Any, how: str, method: str = "forward") -> None:
        self.program, self.tolerance, self.how, self.method = program, tolerance, how, method
        self.tokens: list[int] = []
        self.agreed = self.exact = 0
        self.found: list[Any] = []
        self.judged: list[tuple[int, Any, str, str, bool]] = []

    def token(self, step: int, expected: Any, actual: Any) -> None:
        """The eager model's greedy token, and whether the program's (fed to both next) agrees:
        the same token, or a tie: each logit within its bound of eager's can move a right program's
        by that bound, so two logits whose eager values are within the sum of their bounds may swap."""
        token, mine = int(expected.argmax()), int(actual.argmax())
        self.tokens.append(token)
        self.exact += mine == token
        mean = float(expected.abs().mean())

        def bound(index: int) -> float:
            return self.tolerance.atol + self.tolerance.rtol * max(abs(float(expected[index])), mean)

        self.agreed += mine == token or float(expected[token]) - float(expected[mine]) <= bound(token) + bound(mine)

    def logits(self, step: int, expected: Any, actual: Any) -> None:
        from ptebuild.lowering.check import judge, measure

        found = measure(expected, actual, self.tolerance)
        verdict, reason, wrong = judge(found)
        self.found.append(found)
        self.judged.append((step, found, verdict.value, reason, wrong))

    def verdict(self, min_agreement: float) -> None:
        """Raise where the decode fails: tokens under the floor or logits far from eager's (a wrong
        program), or logits beyond the tolerance (a tolerance miss); else return."""
        from ptebuild.lowering.check import refusal, wrong_program

        steps = len(self.tokens)
        share = self.agreed / steps
        worst = max(self.found, key=lambda f: f.worst_excess)
        if share < min_agreement:
            floor = ("a float program agrees on every step" if min_agreement >= 1.0 else
                     f"the program's floor is {min_agreement:.0%}")
            raise wrong_program(
                self.program, f"method {self.method!r}, greedy decoding through its KV cache ({steps} steps after the "
                              "prefill, each fed the program's greedy token, the eager model the same)", self.how,
                f"its greedy token agrees with the eager model's on {self.agreed} of {steps} steps ({share:.0%}; "
                f"{floor}, where a token that ties within the tolerance counts as agreeing); the decode logits differ by "
                f"up to {worst.max_abs_error:.3g} ({worst.worst_excess:.3g}x their bound, tolerance {self.tolerance}; least "
                f"cosine {min(f.cosine for f in self.found):.6f}) on logits of mean magnitude {worst.magnitude:.3g}",
                method=self.method,
            )
        failed = [j for j in self.judged if j[2] == "failed"]
        if failed:
            step, found, _, reason, wrong = next((j for j in failed if j[4]), failed[0])
            raise refusal(self.program, f"method {self.method!r}, decode step {step + 1} of {steps} through its KV cache",
                          "0 (the logits)", found, reason, wrong, self.how, self.method)

    def figures(self) -> dict[str, Any]:
        verdicts = {j[2] for j in self.judged}
        proves_nothing = verdicts == {"proves-nothing"}
        return {
            "max_abs_error": max(f.max_abs_error for f in self.found),
            "cosine": min(f.cosine for f in self.found),
            "worst_excess": max(f.worst_excess for f in self.found),
            "magnitude": min(f.magnitude for f in self.found),
            "tokens_agreed": self.agreed, "tokens_exact": self.exact,
            "verdict": "proves-nothing" if proves_nothing else "passed",
            "reason": next((j[3] for j in self.judged if j[2] == "proves-nothing"), "") if proves_nothing else "",
        }


def check_in_runner(program: ProgramPlan, pte: Path, ptds: list[Path], tokenizer_file: Path,
                    expected: EagerAgreement) -> int:
    """ExecuTorch's ``TextLLMRunner`` generates greedily from ``expected.prompt``; its text must be
    the program's own continuation (``expected``). Returns the number of tokens it generated.
    Raises CheckError."""
    register_llm_kernels()
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    from ptebuild.lowering.check import runtime_error, runtime_log
    from ptebuild.runtime import one_data_file

    if expected.tokens == 0:
        return 0
    stats: list[Any] = []
    with one_data_file(pte, ptds) as ptd, runtime_log() as log, runner_stdout_captured() as out:
        try:
            runner = TextLLMRunner(str(pte), str(tokenizer_file), str(ptd) if ptd else None)
            runner.generate(expected.prompt, GenerationConfig(echo=False, max_new_tokens=expected.tokens, temperature=0.0),
                            None, stats.append)
        except Exception as exc:
            raise runtime_error("in ExecuTorch's TextLLMRunner", exc, log, program.name) from exc
    del runner
    if out.text != expected.continuation:
        raise CheckError(
            f"ExecuTorch's TextLLMRunner generated {_shown(out.text)} from {expected.prompt!r}, the program run step by "
            f"step {_shown(expected.continuation)}: its metadata methods or its tokenizer do not fit the runner",
            location=f"programs.{program.name}",
        )
    return _emitted(stats)


def _shown(text: bytes) -> str:
    """Printed bytes in a message: as text, a byte that is not UTF-8 as ``\\xNN``."""
    return repr(text.decode(errors="backslashreplace"))


def _emitted(stats: list[Any]) -> int:
    """How many tokens the runner emitted: the prefill's, then those its stats count as generated."""
    import json

    return 1 + int(json.loads(stats[0].to_json_string()).get("generated_tokens", 0)) if stats else 0


KV_CACHE_BUFFER = re.compile(r"(^|\.)kv_cache\.|(^|\.)[kv]_cache(_scales|_zero_points)?$")
"""A mutable buffer of a KV cache (ExecuTorch's ``KVCache`` and ``QuantizedKVCache``: ``k_cache``,
``v_cache``, their scales and zero points), written at the positions each call names."""


def carries_state(mutable_buffers: tuple[str, ...]) -> bool:
    """True if a program's mutable buffers hold state besides KV caches (LFM2's ``conv_state``, a
    linear attention's recurrent state): state a new prompt from position 0 does not overwrite, so
    that a method that ran before computes something else than one freshly loaded."""
    return any(not KV_CACHE_BUFFER.search(name) for name in mutable_buffers)


def greedy_as_the_runner(feed: Callable[[list[int]], Any], prompt: list[int], wanted: int, stops: set[int]) -> list[int]:
    """The tokens ExecuTorch's ``TextLLMRunner`` emits, greedily, from ``prompt`` (``feed(tokens)``:
    the logits after feeding them), asked for ``wanted``: the prefill's token, emitted whatever it
    is; then up to ``wanted - 1`` more, each emitted and, if it is one of ``stops`` (the program's
    EOS ids), the last (``text_llm_runner.cpp``, ``text_token_generator.h``: the callback gets the
    piece before the EOS test). Raises nothing."""
    tokens = [int(feed(prompt).argmax())]
    while len(tokens) < wanted:
        tokens.append(int(feed([tokens[-1]]).argmax()))
        if tokens[-1] in stops:
            break
    return tokens


def _stop_ids(pte: Path, tokenizer: Any) -> set[int]:
    """The ids the runner stops at: the program's ``get_eos_ids`` (else the tokenizer's EOS)."""
    from ptebuild.runtime.llm_facts import metadata_values

    eos = metadata_values(pte).get("get_eos_ids")
    if isinstance(eos, list):
        return {int(i) for i in eos}
    if isinstance(eos, int):
        return {eos}
    return {tokenizer.eos}


@dataclass(frozen=True)
class Generation:
    """Text generated by ExecuTorch's ``TextLLMRunner`` from a prompt, with its speed."""

    program: str
    backend: str
    pte: Path
    ptd: Path | None
    tokenizer: Path
    prompt: str
    text: str
    """What the runner printed, as text (bytes that do not make a character shown as U+FFFD)."""
    prompt_tokens: int
    generated_tokens: int
    prefill_seconds: float
    """A generation of one token (the prompt's encoding, its prefill and the first sampling), the
    program loaded already (a one-token generation before)."""
    decode_seconds: float
    """The whole generation less :attr:`prefill_seconds`: from the first generated token to the last."""
    runner_stats: dict[str, Any]
    note: str = ""
    """Why fewer tokens were asked for than given (the KV cache's room), in words; empty otherwise."""

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        steps = self.generated_tokens - 1
        return steps / self.decode_seconds if steps > 0 and self.decode_seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program, "backend": self.backend, "pte": str(self.pte),
            "ptd": str(self.ptd) if self.ptd else None, "tokenizer": str(self.tokenizer),
            "prompt": self.prompt, "text": self.text, "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "prefill_tokens_per_second": self.prefill_tokens_per_second,
            "decode_tokens_per_second": self.decode_tokens_per_second,
            "runner_stats": self.runner_stats, "note": self.note,
        }


def generate_with_runner(plan: BuildPlan, program: ProgramPlan, prompt: str, *, max_new_tokens: int,
                         out_dir: Path | None) -> Generation:
    """Generate text from ``prompt`` with the built program through ``TextLLMRunner`` (greedy).

    Raises:
        LoadError: the program is not built, or its files do not belong together.
        BuildError: the runner fails (its line says why).
    """
    import json

    from ptebuild.lowering.check import runtime_error, runtime_log
    from ptebuild.models.executorch_llm.programs import data_file_names
    from ptebuild.runtime import one_data_file

    register_llm_kernels()
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    folder = out_dir if out_dir is not None else plan.out_dir()
    pte = folder / program.pte_name
    ptds = [folder / name for name in data_file_names(program)]
    tokenizer = folder / program.extra_outputs[0]
    for path in (pte, *ptds, tokenizer):
        if not path.is_file():
            command = f"ptebuild build {plan.manifest}" + (f" --out {out_dir}" if out_dir is not None else "")
            raise LoadError(f"{path}: program {program.name!r} is not built yet; run `{command}` first")
    ptd = ptds[0] if ptds else None
    stats: list[Any] = []
    asked, max_new_tokens, note = max_new_tokens, _room(pte, tokenizer, prompt, max_new_tokens), ""
    if max_new_tokens < asked:
        note = (f"{asked} new tokens do not fit the KV cache after this prompt (ExecuTorch 1.5.1's runner would run "
                f"past it and fail): generating {max_new_tokens}")

    def greedy(tokens: int) -> GenerationConfig:
        return GenerationConfig(echo=False, max_new_tokens=tokens, temperature=0.0)

    # one_data_file refuses a .ptd that is not the program's before anything runs.
    with one_data_file(pte, ptds) as data, runtime_log() as log:
        try:
            runner = TextLLMRunner(str(pte), str(tokenizer), str(data) if data else None)
            with runner_stdout_to_stderr():
                # A first token loads the program and its delegates (the runner loads on first
                # use); a second, timed, is the prefill (the prompt's encoding, its prefill and
                # the first sampling), which the timed generation repeats before it decodes.
                runner.generate(prompt, greedy(1))
                runner.reset()
                started = time.perf_counter()
                runner.generate(prompt, greedy(1))
                prefill_seconds = time.perf_counter() - started
                runner.reset()
            with runner_stdout_captured() as out:
                started = time.perf_counter()
                runner.generate(prompt, greedy(max_new_tokens), None, stats.append)
                seconds = time.perf_counter() - started
        except Exception as exc:
            raise runtime_error("in ExecuTorch's TextLLMRunner", exc, log, program.name) from exc
    runner_stats = json.loads(stats[0].to_json_string()) if stats else {}
    return Generation(
        program=program.name, backend=program.backend, pte=pte, ptd=ptd, tokenizer=tokenizer, prompt=prompt,
        text=out.text.decode(errors="replace"), prompt_tokens=int(runner_stats.get("prompt_tokens", 0)),
        generated_tokens=_emitted(stats), prefill_seconds=prefill_seconds,
        decode_seconds=max(0.0, seconds - prefill_seconds), runner_stats=runner_stats, note=note,
    )


def _room(pte: Path, tokenizer: Path, prompt: str, wanted: int) -> int:
    """How many of ``wanted`` new tokens the runner can generate after ``prompt``: its KV cache
    (``get_max_context_len``) holds the prompt and every generated token but the last. ExecuTorch
    1.5.1's runner does not bound it so ("Max new tokens resolved: 25, given pos_ 9, ...
    max_context_len 32"), and its call past the cache fails in a kernel ("arg 0 with type id 1")."""
    from ptebuild.models.executorch_llm.tokenizer import load_tokenizer
    from ptebuild.runtime.llm_facts import metadata_values

    context = metadata_values(pte).get("get_max_context_len")
    if not isinstance(context, int):
        return wanted
    prompt_tokens = len(load_tokenizer(tokenizer, str(pte), "tokenizer").encode(prompt))
    return max(1, min(wanted, context - prompt_tokens + 1))
