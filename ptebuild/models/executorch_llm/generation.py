"""Check an LLM program as an LLM runs: prefill and decode against the eager model, then ExecuTorch's own runner.

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

The eager side is :mod:`.eager_reference`; what the runner prints is read through
:mod:`.native_output`; text generated for ``ptebuild run --prompt`` is :mod:`.runner`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ptebuild.errors import CheckError
from ptebuild.figures import GenerationFigures, Verdict
from ptebuild.models.executorch_llm.eager_reference import Shape, Stepper, eager_logits, last_logits
from ptebuild.models.executorch_llm.native_output import emitted_tokens, printed, register_llm_kernels, runner_stdout_captured
from ptebuild.plan import ProgramPlan

PROMPT_TOKENS = 16
DECODE_STEPS = 16
RUNNER_PROMPTS = ("Once upon a time", "The robot", "Hello", "In the beginning", "1, 2, 3,")
"""The runner's prompts, tried in turn until the program's greedy continuation is tokens the
tokenizer has pieces for (:func:`_runner_continuation`): the first, nearly always."""
RUNNER_TOKENS = 8


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
        return last_logits(outputs[0].cpu())


@dataclass(frozen=True)
class EagerAgreement:
    """What :func:`check_generation` found: the figures, and the program's own greedy continuation
    of the runner's prompt (what :func:`check_in_runner` must see the runner generate)."""

    figures: list[GenerationFigures]
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

    from ptebuild.lowering.check import runtime_error, runtime_log, wrong_at
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
    stepper = Stepper(ours, shape)
    with runtime_log() as log:
        try:
            actual = [stepper.feed(prompt)]
        except Exception as exc:
            raise runtime_error(f"to prefill {prompt_length} tokens", exc, log, program.name) from exc
    tolerance = program.check_settings().for_dtype(ours.dtype)

    def prefill(expected: Any) -> JudgedLogits:
        return judged_logits(program, method, f"method {method!r}, the prefill of a seeded prompt of {prompt_length} token ids "
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
    with wrong_at(method, first_call(shape, prompt)):
        prefilled = prefill(expected[0])
        decode = DecodeSteps(program, tolerance, how, method)
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
            return Stepper(ProgramCaller(load(False), device), shape).feed
    else:
        def fresh() -> Callable[[list[int]], Any]:
            return Stepper(ProgramCaller(execute, device), shape).feed
    runner = _runner_continuation(fresh, tokenizer, shape, _stop_ids(pte, tokenizer))
    # The figures' fields as every check's (ptebuild.figures.OutputFigures), and the generation's own:
    # the tolerance the logits were held to, and the data (a seeded prompt, teacher-forced greedy steps).
    common: dict[str, Any] = {"method": method, "output": 0, "dtype": dtype, "atol": tolerance.atol, "rtol": tolerance.rtol,
              "min_cosine": tolerance.min_cosine, "data": "random", "samples": 0, "prompt_seed": program.seed}
    figures = [
        GenerationFigures(**common, stage="prefill", sizes={"prompt_tokens": prompt_length},
                          max_abs_error=prefilled.found.max_abs_error, cosine=prefilled.found.cosine,
                          worst_excess=prefilled.found.worst_excess, magnitude=prefilled.found.magnitude,
                          verdict=Verdict(prefilled.verdict), reason=prefilled.reason),
        replace(decode.figures(**common), stage="decode", sizes={"decode_steps": steps}, tokens=steps,
                min_token_agreement=min_agreement),
    ]
    return replace(runner, figures=figures)


def first_call(shape: Shape, prompt: list[int]) -> tuple[Any, ...]:
    """The inputs of the program's first call on ``prompt`` from an empty cache, as :class:`Stepper`
    makes it: what the search for the first divergence runs the program on."""
    import torch

    if not shape.use_kv_cache:
        ids = prompt if shape.dynamic else (prompt + [0] * shape.max_seq_length)[: shape.max_seq_length]
        return (torch.tensor([ids], dtype=torch.long),)
    tokens = prompt if shape.dynamic else prompt[:1]
    return (torch.tensor([tokens], dtype=torch.long), torch.tensor([0], dtype=torch.long))


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
class JudgedLogits:
    """One call's logits against the eager model's, under the check's tolerance, judged as every
    check judges an output (:func:`ptebuild.lowering.check.judge`)."""

    found: Any
    verdict: str
    reason: str


def judged_logits(program: ProgramPlan, method: str, where: str, expected: Any, actual: Any, tolerance: Any, how: str) -> JudgedLogits:
    """Measure and judge the logits of one call; raise as the check does (``refusal``: a wrong
    program, or a tolerance miss) where they fail."""
    from ptebuild.lowering.check import judge, measure, refusal

    found = measure(expected, actual, tolerance)
    verdict, reason, wrong = judge(found)
    if verdict is Verdict.FAILED:
        raise refusal(program, where, "0 (the last position's logits)", found, reason, wrong, how, method)
    return JudgedLogits(found, verdict.value, reason)


class DecodeSteps:
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

    def figures(self, **common: Any) -> GenerationFigures:
        """The decode's figures: the worst over its steps, and how many tokens agreed."""
        verdicts = {j[2] for j in self.judged}
        proves_nothing = verdicts == {"proves-nothing"}
        return GenerationFigures(
            **common, sizes={}, stage="decode",
            max_abs_error=max(f.max_abs_error for f in self.found),
            cosine=min(f.cosine for f in self.found),
            worst_excess=max(f.worst_excess for f in self.found),
            magnitude=min(f.magnitude for f in self.found),
            tokens_agreed=self.agreed, tokens_exact=self.exact,
            verdict=Verdict.PROVES_NOTHING if proves_nothing else Verdict.PASSED,
            reason=next((j[3] for j in self.judged if j[2] == "proves-nothing"), "") if proves_nothing else "",
        )


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
    return emitted_tokens(stats)


def _shown(text: bytes) -> str:
    """Printed bytes in a message: as text, a byte that is not UTF-8 as ``\\xNN``."""
    return repr(text.decode(errors="backslashreplace"))


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
