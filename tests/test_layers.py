"""The package's layers hold: no module imports from a layer above its own, not even inside a
function (a hidden circle), and the CLI is the only layer that prints.

The layers, lowest first, as the README's Layout lists them. Floor one is every top-level module
of ``ptebuild`` but the package's face (``__init__``, ``__main__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ptebuild"

LAYERS = [
    {"<floor one>"},
    {"insight"},
    {"store", "shims", "runtime"},
    {"lowering"},
    {"backends"},
    {"manifest"},
    {"worker"},
    {"daemon"},
    {"builder"},
    {"release"},
    {"api"},
    {"cli"},
]


def layer_of(module: str) -> int:
    """``ptebuild.store.cas`` -> the index of its layer (floor one for top-level modules)."""
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)  # the package's face re-exports everything (lazily)
    top = parts[1]
    if (PACKAGE / f"{top}.py").is_file():
        return 0
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"{module}: in no layer; add its package to LAYERS (and the README)")


def imports(path: Path, module: str) -> list[tuple[int, str]]:
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("ptebuild")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("ptebuild"):
                targets = [name] if node.module else [f"{name}.{alias.name}" for alias in node.names]
                found += [(node.lineno, t) for t in targets]
    return found


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield path, ".".join(parts)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path, module in modules():
        if module in ("ptebuild", "ptebuild.__main__"):
            continue
        own = layer_of(module)
        for line, target in imports(path, module):
            if target == "ptebuild" or target.startswith("ptebuild.__"):
                continue  # __version__
            if layer_of(target) > own:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} imports {target}")
    assert upward == [], "\n".join(upward)


def test_only_the_cli_prints():
    printing = []
    for path, module in modules():
        if module.startswith(("ptebuild.cli", "ptebuild.__main__")):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "exit"):
                printing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.func.id}()")
    allowed = {"ptebuild/daemon/server.py"}  # the warm server's own log (its stdout is a log file)
    assert [p for p in printing if p.split(":")[0] not in allowed] == [], "\n".join(printing)
