"""Audio for ``ptebuild run --audio``: a WAV file read as the model's encoder takes it.

The file: RIFF WAVE, PCM of 16, 24 or 32 bits (or 8-bit unsigned), mono or several channels
(averaged), at the model's sample rate (16 kHz for Voxtral Realtime: nothing is resampled). It
becomes a log-mel spectrogram by ExecuTorch's own audio front end
(``executorch.extension.audio.mel_spectrogram.WhisperAudioProcessor``, streaming: no 30-second
padding), ``num_mel_bins`` bins every ``hop_length`` samples, cut to the encoder's multiple of
frames. Reading the file imports nothing heavy; the spectrogram imports torch and executorch.
"""

from __future__ import annotations

import wave
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import UsageError


@dataclass(frozen=True)
class Clip:
    """A WAV file's samples, mono, in [-1, 1]."""

    path: Path
    rate: int
    samples: list[float]

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.rate


def read_wav(path: Path, rate: int) -> Clip:
    """The samples of ``path``, mono. Raises UsageError (one line, with the fix) for a file that is
    not a PCM WAV at ``rate`` Hz."""
    fix = f"give a PCM WAV file at {rate} Hz (for example: ffmpeg -i IN -ac 1 -ar {rate} OUT.wav)"
    try:
        with wave.open(str(path), "rb") as file:
            width, channels, found, frames = file.getsampwidth(), file.getnchannels(), file.getframerate(), file.getnframes()
            data = file.readframes(frames)
    except FileNotFoundError:
        raise UsageError(f"--audio {path}: no such file; {fix}") from None
    except (wave.Error, EOFError, OSError) as exc:
        raise UsageError(f"--audio {path}: not a PCM WAV file ({exc}); {fix}") from None
    if found != rate:
        raise UsageError(f"--audio {path}: its sample rate is {found} Hz, the model's is {rate} Hz (ptebuild does not "
                         f"resample); {fix}")
    if width not in (1, 2, 3, 4):
        raise UsageError(f"--audio {path}: samples of {width} bytes; {fix}")
    values = _decode(data, width)
    mono = [sum(values[i:i + channels]) / channels for i in range(0, len(values) - channels + 1, channels)]
    if not mono:
        raise UsageError(f"--audio {path}: it holds no samples; {fix}")
    return Clip(path, rate, mono)


def _decode(data: bytes, width: int) -> list[float]:
    """PCM bytes (little-endian; 8-bit unsigned, else signed) as floats in [-1, 1]."""
    if width == 1:
        return [(b - 128) / 128.0 for b in data]
    if width == 3:
        scale = float(1 << 23)
        return [int.from_bytes(data[i:i + 3], "little", signed=True) / scale for i in range(0, len(data) - 2, 3)]
    typecode = "h" if width == 2 else "i"
    values = array(typecode)
    values.frombytes(data[: len(data) - len(data) % width])
    import sys

    if sys.byteorder != "little":
        values.byteswap()
    scale = float(1 << (8 * width - 1))
    return [v / scale for v in values]


def mel_frames(clip: Clip, num_mel_bins: int, hop_length: int, multiple: int, most: int) -> Any:
    """The clip's log-mel spectrogram ``[1, num_mel_bins, frames]``, ``frames`` cut to a multiple of
    ``multiple``. Raises UsageError if it is longer than ``most`` frames or shorter than ``multiple``."""
    import torch
    from executorch.extension.audio.mel_spectrogram import WhisperAudioProcessor

    processor = WhisperAudioProcessor(feature_size=num_mel_bins, sampling_rate=clip.rate, hop_length=hop_length, streaming=True)
    with torch.no_grad():
        mel = processor(torch.tensor(clip.samples, dtype=torch.float32))
    frames = mel.shape[-1] // multiple * multiple
    if frames < multiple:
        raise UsageError(f"--audio {clip.path}: {clip.seconds:.3f} s is shorter than the encoder's least input "
                         f"({multiple} frames of {hop_length} samples); give a longer clip")
    if frames > most:
        raise UsageError(f"--audio {clip.path}: {clip.seconds:.1f} s is longer than the program takes "
                         f"({most * hop_length / clip.rate:g} s: its model's max_audio_seconds); give a shorter clip, "
                         "or raise max_audio_seconds and build again")
    return mel[..., :frames].contiguous()
