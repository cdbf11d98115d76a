"""``run --audio``'s WAV reader: PCM of every width and channel count read as mono floats, and each
file it cannot take refused in one line that says how to make one it can."""

from __future__ import annotations

import math
import wave

import pytest

from ptebuild.errors import UsageError
from ptebuild.models.multimodal.audio import read_wav


def _wav(path, rate=16000, width=2, channels=1, samples=(0.0, 0.5, -0.5, 0.25)):
    with wave.open(str(path), "wb") as file:
        file.setnchannels(channels)
        file.setsampwidth(width)
        file.setframerate(rate)
        frames = bytearray()
        for value in samples:
            for channel in range(channels):
                v = value if channel == 0 else -value
                if width == 1:
                    frames += bytes([round(v * 127) + 128])
                else:
                    frames += round(v * ((1 << (8 * width - 1)) - 1)).to_bytes(width, "little", signed=True)
        file.writeframes(bytes(frames))
    return path


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_every_pcm_width_reads_as_the_same_samples(tmp_path, width):
    clip = read_wav(_wav(tmp_path / "a.wav", width=width), 16000)
    assert clip.samples == pytest.approx([0.0, 0.5, -0.5, 0.25], abs=1.5 / 127)
    assert clip.seconds == 4 / 16000


def test_channels_are_averaged(tmp_path):
    clip = read_wav(_wav(tmp_path / "a.wav", channels=2), 16000)
    assert clip.samples == pytest.approx([0.0, 0.0, 0.0, 0.0], abs=1e-4)


def test_another_rate_is_refused_with_the_fix(tmp_path):
    with pytest.raises(UsageError, match=r"^--audio .*a\.wav: its sample rate is 44100 Hz, the model's is 16000 Hz "
                                         r"\(ptebuild does not resample\); give a PCM WAV file at 16000 Hz \(for example: ffmpeg"):
        read_wav(_wav(tmp_path / "a.wav", rate=44100), 16000)


def test_what_is_not_a_wav_is_refused_in_one_line(tmp_path):
    (tmp_path / "a.mp3").write_bytes(b"ID3\x03\x00" + bytes(100))
    with pytest.raises(UsageError, match=r"^--audio .*a\.mp3: not a PCM WAV file \(.*\); give a PCM WAV file at 16000 Hz"):
        read_wav(tmp_path / "a.mp3", 16000)
    with pytest.raises(UsageError, match=r"^--audio .*gone\.wav: no such file; give"):
        read_wav(tmp_path / "gone.wav", 16000)
    with pytest.raises(UsageError, match="it holds no samples"):
        read_wav(_wav(tmp_path / "empty.wav", samples=()), 16000)


def test_a_sine_is_read_back_as_written(tmp_path):
    samples = [0.5 * math.sin(2 * math.pi * 440 * i / 16000) for i in range(800)]
    clip = read_wav(_wav(tmp_path / "a.wav", samples=samples), 16000)
    assert clip.samples == pytest.approx(samples, abs=1e-4)
