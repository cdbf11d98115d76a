"""Read a model's weights as people save them: a state dict, a checkpoint that holds one, or safetensors.

- ``*.safetensors``: read with the ``safetensors`` package (tensors only, nothing executed);
- anything else: ``torch.load(..., weights_only=True)`` (no code runs while loading);
- ``weights_key`` (a key, or a dotted path such as ``"state.model"``) picks the state dict
  inside a checkpoint: ``{"model": state_dict, "epoch": 3}`` -> ``"model"``; PyTorch Lightning's
  ``{"state_dict": ..., "epoch": ..., "optimizer_states": ...}`` -> ``"state_dict"``;
- a file whose top level is not a state dict (a mapping of names to tensors) and no key named: a
  located error that lists the entries it has and names the likeliest one;
- ``weights_prefix`` (``"model."``, ``"module."``) is stripped from the names that begin with it,
  the others left out (Lightning's module holds its loss and metrics beside ``self.model``);
  :func:`prefix_hint` notices such a prefix on the names of a file that does not fit;
- a whole pickled module (``torch.save(model)``) is refused in one line: unpickling it would run
  its code; its state dict is what to save.

Runs in a worker (imports torch). Errors are :class:`~ptebuild.errors.ManifestError` located at
``models.<model>.weights`` or ``.weights_key`` (exit 2: the manifest must say which entry).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ptebuild.errors import ManifestError
from ptebuild.typos import did_you_mean

if TYPE_CHECKING:
    import torch

SAFETENSORS_SUFFIX = ".safetensors"
_LIKELY = ("state_dict", "model_state_dict", "model", "state", "module", "net", "weights")
"""Entry names that usually hold the model's state dict, the likeliest first (Lightning's first)."""


def load_state_dict(path: Path, weights_key: str | None, *, manifest: str, model: str, weights: str,
                    weights_prefix: str | None = None) -> Mapping[str, torch.Tensor]:
    """The state dict in ``path`` (``weights`` is its name in the manifest, for messages), its
    names less ``weights_prefix`` (only those that have it).

    Raises FileNotFoundError if there is no file; ManifestError (located) if ``weights_key``
    names no entry, the file holds no state dict where one is looked for, no name has
    ``weights_prefix``, or the file is a whole pickled module; other exceptions as the readers
    raise them (a corrupt file).
    """
    state = _load(path, weights_key, manifest=manifest, model=model, weights=weights)
    if weights_prefix is None:
        return state
    stripped = {name[len(weights_prefix):]: tensor for name, tensor in state.items() if name.startswith(weights_prefix)}
    if not stripped:
        found = common_prefix(list(state))
        hint = f"its names begin with {found!r}: set weights_prefix = {found!r}" if found else \
            "drop weights_prefix, or name the prefix its names begin with"
        raise ManifestError(f"no name in {weights!r} begins with {weights_prefix!r} (its first is {next(iter(state))!r}); "
                            f"{hint}", manifest=manifest, location=f"models.{model}.weights_prefix")
    return stripped


def common_prefix(names: list[str]) -> str | None:
    """The dotted prefix every name begins with (``"model."``), None if they share none."""
    if not names:
        return None
    first = names[0].split(".")
    depth = 0
    while depth < len(first) - 1 and all(n.split(".")[: depth + 1] == first[: depth + 1] and n.count(".") > depth for n in names):
        depth += 1
    return ".".join(first[:depth]) + "." if depth else None


def prefix_hint(own: Mapping[str, tuple[int, ...]], saved: Mapping[str, tuple[int, ...]]) -> str:
    """``every name the model expects is in the file with the prefix 'model.' ...: set
    weights_prefix = 'model.'`` when one prefix, stripped from the file's names (name -> shape),
    gives every name of the model's (``own``: name -> shape) with its shape; else empty."""
    missing = [name for name in own if name not in saved]
    if not missing:
        return ""
    candidates: dict[str, int] = {}
    for name in saved:
        for expected in missing:
            if name.endswith("." + expected):
                prefix = name[: len(name) - len(expected)]
                candidates[prefix] = candidates.get(prefix, 0) + 1
    for prefix in sorted(candidates, key=lambda p: (-candidates[p], p)):
        if all(saved.get(prefix + name) == shape for name, shape in own.items()):
            return (f"every name the model expects is in the file with the prefix {prefix!r} (and the same shape): "
                    f"set weights_prefix = {prefix!r}")
    return ""


def _load(path: Path, weights_key: str | None, *, manifest: str, model: str, weights: str) -> Mapping[str, torch.Tensor]:
    if path.name.lower().endswith(SAFETENSORS_SUFFIX):
        from safetensors.torch import load_file

        if not path.is_file():
            raise FileNotFoundError(path)
        loaded: Any = load_file(path, device="cpu")
    else:
        import pickle

        import torch

        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            pickled = _pickled_class(str(exc))
            if pickled is None:
                raise
            raise ManifestError(
                f"{weights!r} is a whole pickled {pickled} (torch.save(model)), which ptebuild does not unpickle: loading "
                "it would run code; save its weights instead: torch.save(model.state_dict(), path)",
                manifest=manifest, location=f"models.{model}.weights") from None
    where = f"models.{model}"
    if weights_key is not None:
        loaded = _entry(loaded, weights_key, manifest=manifest, where=f"{where}.weights_key", weights=weights)
        if not _is_state_dict(loaded):
            raise ManifestError(f"entry {weights_key!r} of {weights!r} is {_kind(loaded)}, not a state dict (names -> tensors); "
                                f"{_advice(loaded, weights_key)}", manifest=manifest, location=f"{where}.weights_key")
        return loaded
    if not _is_state_dict(loaded):
        raise ManifestError(f"{weights!r} is {_kind(loaded)}, not a state dict (names -> tensors); {_advice(loaded, None)}",
                            manifest=manifest, location=f"{where}.weights")
    return loaded


def _pickled_class(message: str) -> str | None:
    """The class a refused ``weights_only`` load names (``GLOBAL kws.model.KwsNet``) when it is a
    module's (an ``nn.Module`` subclass of the user's or torch's), else None."""
    import re

    found = re.search(r"GLOBAL ([\w.]+) was not an allowed global", message)
    if found is None:
        return None
    name = found.group(1)
    module, _, cls = name.rpartition(".")
    try:
        import importlib

        import torch

        value = getattr(importlib.import_module(module), cls)
    except Exception:  # the user's module may not import here: still a class by its name
        return f"{cls}" if cls[:1].isupper() else None
    return cls if isinstance(value, type) and issubclass(value, torch.nn.Module) else None


def _entry(loaded: Any, weights_key: str, *, manifest: str, where: str, weights: str) -> Any:
    """Follow ``weights_key`` into ``loaded``: the whole key first, else its dotted parts."""
    if isinstance(loaded, Mapping) and weights_key in loaded:
        return loaded[weights_key]
    value = loaded
    walked: list[str] = []
    for part in weights_key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            at = f"entry {'.'.join(walked)!r} of {weights!r}" if walked else repr(weights)
            if not isinstance(value, Mapping):
                raise ManifestError(f"{weights_key!r}: {at} is {_kind(value)}, which has no entries; "
                                    "name an entry on the way to the state dict", manifest=manifest, location=where)
            names = [str(k) for k in value]
            raise ManifestError(f"{weights_key!r}: {at} has no entry {part!r}{did_you_mean(part, names)}; it has "
                                f"{_listing(value)}: name one of them", manifest=manifest, location=where)
        walked.append(part)
        value = value[part]
    return value


def _is_state_dict(value: Any) -> TypeGuard[Mapping[str, torch.Tensor]]:
    import torch

    return isinstance(value, Mapping) and bool(value) and all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _kind(value: Any) -> str:
    """What a checkpoint entry is, in a few words (``a dict of 3 entries``, ``an int``)."""
    if isinstance(value, Mapping):
        return "an empty dict" if not value else f"a dict of {len(value)} entries"
    name = type(value).__name__
    return f"an {name}" if name[:1].lower() in "aeiou" else f"a {name}"


def _listing(value: Mapping[Any, Any], limit: int = 8) -> str:
    """The entries of a checkpoint level, each with what it is (the state dicts said so)."""
    items = []
    for key, entry in list(value.items())[:limit]:
        what = f"a state dict of {len(entry)} tensors" if _is_state_dict(entry) else _kind(entry)
        items.append(f"{key} ({what})")
    more = f" and {len(value) - limit} more" if len(value) > limit else ""
    return ", ".join(items) + more


def _advice(value: Any, key: str | None) -> str:
    """How to name the state dict: the entries this level has, and the one that looks like it."""
    prefix = f"{key}." if key else ""
    if not isinstance(value, Mapping) or not value:
        return "give weights a state dict (torch.save(model.state_dict(), path)) or a .safetensors file"
    found = _state_dicts(value, prefix)
    likely = sorted(found, key=lambda path: (_rank(path.rsplit(".", 1)[-1]), -found[path]))
    hint = f"set weights_key = {likely[0]!r}" if likely else "set weights_key to the entry that holds it"
    return f"it holds {_listing(value)}; {hint}"


def _state_dicts(value: Mapping[Any, Any], prefix: str, depth: int = 2) -> dict[str, int]:
    """The dotted paths (below ``value``, at most ``depth`` deep) to state dicts, with their sizes."""
    found: dict[str, int] = {}
    for key, entry in value.items():
        if not isinstance(key, str):
            continue
        if _is_state_dict(entry):
            found[prefix + key] = len(entry)
        elif isinstance(entry, Mapping) and depth > 1:
            found.update(_state_dicts(entry, f"{prefix}{key}.", depth - 1))
    return found


def _rank(name: str) -> int:
    return _LIKELY.index(name) if name in _LIKELY else len(_LIKELY)
