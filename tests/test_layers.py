"""The package's layers hold: no module imports from a layer above its own, not even inside a
function (a hidden circle), no modules import each other in a circle (within a layer too, at any
depth: inside functions and under ``TYPE_CHECKING``; a registry's module names, which
:func:`importlib.import_module` loads, and a package's lazy exports count as imports), no module imports another's private names,
the CLI is the only layer that prints, and ``runtime/`` names no backend outside the payload
readers of ``runtime/payload_readers/`` (one module per delegate format, found by delegate id).

The layers, lowest first, as the README's Layout lists them. Floor one is every top-level module
of ``ptebuild`` but the package's face (``__init__``, ``__main__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ptebuild"

LAYERS = [
    {"<floor one>"},
    {"insight", "results"},  # results.py: the values that cross seams, the program's insight among them
    {"store", "shims", "runtime"},
    {"lowering"},
    {"backends"},
    {"models"},
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
    parts = module_of(module).split(".")
    if len(parts) == 1:
        return len(LAYERS)  # the package's face re-exports everything (lazily)
    top = parts[1]
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    if (PACKAGE / f"{top}.py").is_file():
        return 0
    raise AssertionError(f"{module}: in no layer; add its package to LAYERS (and the README)")


def _registrations(tree: ast.AST) -> set[int]:
    """The ids of the string constants a registry loads by :func:`importlib.import_module`: the
    values of a dict (``{"xnnpack": "ptebuild.backends.xnnpack"}``), the items of a tuple or list
    (``READER_MODULES``) and a call's arguments, but a module run as its own process (the item
    after ``"-m"``: ``python -m ptebuild.daemon.server`` is another process, not an import); a
    name assigned on its own (an entry-point group, ``GROUP = "ptebuild.backends"``) is no module."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            found.update(id(v) for v in node.values)
        elif isinstance(node, (ast.Tuple, ast.List)):
            after_m = {id(b) for a, b in zip(node.elts, node.elts[1:], strict=False)
                       if isinstance(a, ast.Constant) and a.value == "-m"}
            found.update(id(e) for e in node.elts if id(e) not in after_m)
        elif isinstance(node, ast.Call):
            found.update(id(a) for a in node.args)
    return found


def imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every ptebuild name the module imports: import statements at any depth, a
    registry's module names (a string ``ptebuild.x.y`` or ``ptebuild.x.y:NAME`` that
    :func:`importlib.import_module` loads: the model kinds, the backends, the executors) and the
    modules behind a package's lazy exports it imports (:mod:`ptebuild.import_closure`)."""

    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    registered = _registrations(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) in registered \
                and node.value.startswith("ptebuild.") and _is_module(node.value.partition(":")[0]):
            found.append((node.lineno, node.value.partition(":")[0]))
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module in LAZY:
            found += [(node.lineno, LAZY[node.module][a.name]) for a in node.names if a.name in LAZY[node.module]]
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("ptebuild")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("ptebuild"):  # each name as imported: a module, or a name of one
                found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def _lazy_exports() -> dict[str, dict[str, str]]:
    from ptebuild import import_closure

    found = {}
    for path in PACKAGE.rglob("__init__.py"):
        if "__pycache__" in path.parts:
            continue
        name = ".".join(("ptebuild", *path.parent.relative_to(PACKAGE).parts))
        exports = import_closure.lazy_exports(path.read_bytes(), name)
        if exports:
            found[name] = exports
    return found


LAZY = _lazy_exports()
"""package -> exported name -> the module defining it (each package's lazy exports)."""


def module_of(target: str) -> str:
    """The module an import names: ``ptebuild.store.Store`` -> ``ptebuild.store`` (the package's
    ``__init__``), ``ptebuild.store.cas`` -> itself."""
    relative = Path(*target.split(".")[1:]) if "." in target else Path()
    if (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file():
        return target
    return target.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """Module -> the ptebuild modules it imports (anywhere in its file)."""
    graph: dict[str, set[str]] = {}
    for path, module in modules():
        graph[module] = {module_of(t) for _, t in imports(path, module)} - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
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
            if layer_of(target) > own:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} imports {target}")
    assert upward == [], "\n".join(upward)


def test_no_import_cycle():
    graph = import_graph()
    graph.pop("ptebuild", None)  # the package's face imports its entry points lazily, by name
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_another_modules_private_names():
    private = []
    for path, module in modules():
        for line, target in imports(path, module):
            name = target.rpartition(".")[2]
            imported = module_of(target)
            if imported != target and name.startswith("_") and not name.startswith("__") and imported != module:
                private.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} imports {target}")
    assert private == [], "\n".join(private)


def private_names_defined(path: Path) -> set[str]:
    """The private methods and ``self._x`` attributes a module defines."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id == "self":
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


OWN_PRIVATES_ONLY = ("builder", "worker", "daemon", "api", "cli")
"""The packages whose modules reach each other through public names only, attributes too (a
unit's helpers are its own: ``builder._located(...)`` from another module is refused)."""


def test_no_module_reaches_into_another_modules_private_attributes():
    defined: dict[str, set[str]] = {}
    for path, module in modules():
        for name in private_names_defined(path):
            defined.setdefault(name, set()).add(module)
    reaching = []
    for path, module in modules():
        if module.split(".")[1:2] == [] or module.split(".")[1] not in OWN_PRIVATES_ONLY:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in defined and module not in defined[node.attr] \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                reaching.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr} of {sorted(defined[node.attr])}")
    assert reaching == [], "\n".join(reaching)


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


def test_runtime_names_no_backend():
    """``runtime/`` reads delegates through the payload readers (found by delegate id): outside the
    readers' own modules, no delegate id and no backend's name is written in it (``portable`` is
    also ExecuTorch's name for its own kernels, which the runtime runs)."""
    from ptebuild.backends import backend_names, get_backend

    ids = {reader.delegate_id for name in backend_names() for reader in get_backend(name).payload_readers}
    names = {f"{quote}{name}{quote}" for name in backend_names() if name != "portable" for quote in "\"'`"}
    found = []
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        if "payload_readers" in path.parts:
            continue
        text = path.read_text()
        found += [f"{path.relative_to(PACKAGE.parent)}: {word}" for word in sorted(ids | names) if word in text]
    assert ids and found == [], "\n".join(found)
