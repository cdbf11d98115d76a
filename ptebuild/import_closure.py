"""The import closure of ptebuild's own modules, read from their source (AST), never listed by hand.

A module *imports* another of ptebuild's when its code, at any depth (inside a function too),
says so:

- ``import ptebuild.a.b`` or ``from ptebuild.a import b`` (or their relative forms): ``ptebuild.a.b``,
  and every package above it (Python runs each package's ``__init__`` on the way);
- a string constant that is exactly a module's dotted name, or ``module:attribute``: how the
  registries name what they load by :func:`importlib.import_module` (the backends, the model
  kinds), so a registration is an edge like an import;
- ``from ptebuild.p import name`` where ``name`` is a lazy export of the package ``p``
  (:func:`ptebuild.lazy.lazy_exports` over a dict literal of ``name -> relative module``): the
  module that defines it, which the package's ``__getattr__`` imports then.

What is under ``if TYPE_CHECKING:`` never runs and is left out. A name that is no module of
ptebuild (torch, a stdlib module, an attribute) is no edge.

:func:`closure` follows the edges from some entry modules to every module they can run. Parsing
costs about 4 ms a module; callers keep the answer (:mod:`ptebuild.own_code` memoises it by the
digest of ptebuild's files). Imports neither torch nor pydantic.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_files(root: Path, package: str = "ptebuild") -> dict[str, Path]:
    """Every module of the package folder ``root``: dotted name -> file (``__init__.py`` for a package)."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _relative(package: str, name: str, level: int) -> str:
    base = package.split(".")
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def lazy_exports(source: bytes, module: str) -> dict[str, str]:
    """A package's lazy exports: exported name -> the dotted name of the module defining it
    (``__getattr__ = lazy_exports(__name__, TABLE)`` with ``TABLE`` a dict literal of strings)."""
    tree = ast.parse(source)
    tables = {
        target.id: node.value
        for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(target, ast.Name)
    }
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "lazy_exports"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id in tables):
            continue
        table = tables[node.args[1].id]
        for key, value in zip(table.keys, table.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                relative = value.value if value.value.startswith(".") else f".{value.value}"
                level = len(relative) - len(relative.lstrip("."))
                found[str(key.value)] = _relative(module, relative[level:], level)
    return found


def named_modules(source: bytes, module: str, is_package: bool) -> set[str]:
    """Every dotted name the module's code may import (see the module's docstring), unfiltered:
    for ``from a import b`` both ``a`` and ``a.b`` (``b`` may be a submodule or a lazy export)."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                origin = _relative(package, node.module or "", node.level)
            else:
                origin = node.module or ""
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ptebuild"):
            names.add(node.value.partition(":")[0])
        pending.extend(ast.iter_child_nodes(node))
    return names


def edges(
    names: Iterable[str], modules: Mapping[str, Path] | set[str], lazy: Mapping[str, Mapping[str, str]] | None = None
) -> set[str]:
    """The modules of ``modules`` that importing each of ``names`` runs: it and its packages, and
    for a package's lazy export (``lazy``: package -> name -> module), the module defining it."""
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            prefix = ".".join(parts[:depth])
            if prefix in modules:
                found.add(prefix)
        package, _, attribute = name.rpartition(".")
        exported = (lazy or {}).get(package, {}).get(attribute)
        if name not in modules and exported is not None:
            found |= edges([exported], modules)
    return found


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports (itself left out)."""
    sources = {name: path.read_bytes() for name, path in modules.items()}
    lazy = {name: lazy_exports(sources[name], name) for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        named = named_modules(sources[name], name, path.name == "__init__.py")
        graph[name] = edges(named, modules, lazy) - {name}
    return graph


def closure(entries: Iterable[str], graph: Mapping[str, Iterable[str]]) -> dict[str, str | None]:
    """Every module reachable from ``entries`` (entries included, and their packages):
    module -> the module that first imports it (None for an entry). KeyError for an entry
    that is no module of the graph."""
    reached: dict[str, str | None] = {}
    queue: list[tuple[str, str | None]] = []
    for entry in entries:
        if entry not in graph:
            raise KeyError(entry)
        queue.extend((package, None) for package in sorted(edges([entry], set(graph))))
    while queue:
        module, by = queue.pop(0)
        if module in reached:
            continue
        reached[module] = by
        queue.extend((imported, module) for imported in sorted(graph[module]))
    return reached
