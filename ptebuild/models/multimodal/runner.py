"""``ptebuild run MANIFEST PROGRAM --audio FILE --prompt TEXT``: a built multimodal program
generates text from a prompt and an audio clip in ExecuTorch's ``MultimodalRunner``, greedily,
timed stage by stage.

The clip (:mod:`.audio`) becomes the encoder's mel spectrogram with the program's own metadata
(``sample_rate``, ``num_mel_bins``, ``hop_length``). The stages:

- **encoder**: ``audio_encoder`` on the clip's frames in ExecuTorch's runtime (one warm-up call,
  then one timed): frames per second of audio;
- **prefill**: the runner's generation of one token (the prompt's encoding and embedding, the
  audio's encoding and both prefilled, the first sampling), after a warm-up that loads the program:
  positions per second, the encoder's time included as the runner spends it;
- **decode**: the rest of the generation, tokens per second.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.models.executorch_llm.runner import Generation, built_files
from ptebuild.plan import BuildPlan, ProgramPlan


@dataclass(frozen=True)
class AudioGeneration(Generation):
    """:class:`~ptebuild.models.executorch_llm.runner.Generation` from a prompt and an audio clip."""

    audio: Path | None = None
    audio_seconds: float = 0.0
    mel_frames: int = 0
    encoder_seconds: float = 0.0
    """One ``audio_encoder`` call on the clip's frames (after a warm-up)."""

    @property
    def encoder_audio_per_second(self) -> float:
        """Seconds of audio encoded per second."""
        return self.audio_seconds / self.encoder_seconds if self.encoder_seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "audio": str(self.audio), "audio_seconds": self.audio_seconds,
                "mel_frames": self.mel_frames, "encoder_seconds": self.encoder_seconds,
                "encoder_audio_per_second": self.encoder_audio_per_second}


def generate_from_audio(plan: BuildPlan, program: ProgramPlan, prompt: str, audio: Path, *, max_new_tokens: int,
                        out_dir: Path | None) -> AudioGeneration:
    """Raises LoadError (not built, files that do not belong together), UsageError (the clip), BuildError (the runner)."""
    from ptebuild.lowering.check import runtime_error, runtime_log
    from ptebuild.models.executorch_llm.native_output import (
        emitted_tokens,
        register_llm_kernels,
        runner_stdout_captured,
        runner_stdout_to_stderr,
    )
    from ptebuild.models.multimodal.audio import mel_frames, read_wav
    from ptebuild.models.multimodal.spec import MultimodalModelSpec
    from ptebuild.models.multimodal.voxtral import FRAME_MULTIPLE, HOP_LENGTH, SAMPLE_RATE
    from ptebuild.runtime import one_data_file
    from ptebuild.runtime.llm_facts import metadata_values

    pte, ptds, tokenizer = built_files(plan, program, out_dir)
    facts = metadata_values(pte)
    rate, hop = int(facts.get("sample_rate", SAMPLE_RATE)), int(facts.get("hop_length", HOP_LENGTH))
    clip = read_wav(audio, rate)
    spec = MultimodalModelSpec.model_validate(program.model_entry)
    mel = mel_frames(clip, int(facts.get("num_mel_bins", 128)), hop, FRAME_MULTIPLE, spec.audio_frames)

    register_llm_kernels()
    from executorch.extension.llm.runner import GenerationConfig, MultimodalRunner, make_audio_input, make_text_input
    from executorch.runtime import Runtime

    def greedy(tokens: int) -> GenerationConfig:
        return GenerationConfig(echo=False, max_new_tokens=tokens, temperature=0.0)

    def inputs() -> list[Any]:
        return [make_text_input(prompt), make_audio_input(mel)]

    stats: list[Any] = []
    with one_data_file(pte, ptds) as data, runtime_log() as log:
        try:
            encoder = Runtime.get().load_program(pte, data_path=data).load_method("audio_encoder")
            encoder.execute([mel])
            started = time.perf_counter()
            encoder.execute([mel])
            encoder_seconds = time.perf_counter() - started
            del encoder
        except Exception as exc:
            raise runtime_error("to run audio_encoder on the clip", exc, log, program.name) from exc
        try:
            runner = MultimodalRunner(str(pte), str(tokenizer), str(data) if data else None)
            with runner_stdout_to_stderr():
                runner.generate(inputs(), greedy(1), None, None)  # loads the program and its delegates
                runner.reset()
                started = time.perf_counter()
                runner.generate(inputs(), greedy(1), None, None)
                prefill_seconds = time.perf_counter() - started
                runner.reset()
            with runner_stdout_captured() as out:
                started = time.perf_counter()
                runner.generate(inputs(), greedy(max_new_tokens), None, stats.append)
                seconds = time.perf_counter() - started
        except Exception as exc:
            raise runtime_error("in ExecuTorch's MultimodalRunner", exc, log, program.name) from exc
    runner_stats = json.loads(stats[0].to_json_string()) if stats else {}
    return AudioGeneration(
        program=program.name, backend=program.backend, pte=pte, ptd=ptds[0] if ptds else None, tokenizer=tokenizer,
        prompt=prompt, text=out.text.decode(errors="replace"), prompt_tokens=int(runner_stats.get("prompt_tokens", 0)),
        generated_tokens=emitted_tokens(stats), prefill_seconds=prefill_seconds,
        decode_seconds=max(0.0, seconds - prefill_seconds), runner_stats=runner_stats, runner="MultimodalRunner",
        audio=audio, audio_seconds=clip.seconds, mel_frames=int(mel.shape[-1]), encoder_seconds=encoder_seconds,
    )
