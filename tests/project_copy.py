"""Copies of the test projects: the tiny one (``tests/manifests/tiny.toml`` and its models), the chat LLM's
(``manifests/chat.toml``)."""

from __future__ import annotations

import shutil
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent / "manifests"


def copy_project(dest: Path) -> Path:
    """Copy tiny.toml and its models into ``dest``; return the manifest's path."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(MANIFESTS / "tiny.toml", dest / "tiny.toml")
    shutil.copytree(MANIFESTS / "tinymodels", dest / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "tiny.toml"


def copy_chat_project(dest: Path) -> Path:
    """Copy ``manifests/chat.toml`` and its ``chat/`` folder (params, tokenizer) into ``dest``; return the manifest."""
    manifests = Path(__file__).resolve().parents[1] / "manifests"
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(manifests / "chat.toml", dest / "chat.toml")
    shutil.copytree(manifests / "chat", dest / "chat", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "chat.toml"
