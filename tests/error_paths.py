"""Every error ptebuild raises on purpose, found in its source: for tests/test_errors.py.

:func:`error_paths` walks ``ptebuild/`` for ``raise <a PtebuildError class>(message, ...)`` and
renders each message as the template its f-string spells (``{}`` for a value; a module's string
constant, such as :data:`ptebuild.errors.REPORT`, by its text), keeping its last clause: what
follows the last ``"; "``, which is where the fix goes. A message given as a variable (an error
passed on from below) is ``<the expression>``. Imports nothing of ptebuild.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ptebuild"
ERRORS = {"PtebuildError", "UsageError", "ManifestError", "DataNameError", "FormatError", "BuildError", "StaleWorker",
          "CheckError", "StoreError", "CorruptObject", "PackError", "LoadError", "BoundByPosition"}


def _constants() -> dict[str, str]:
    """Module-level string constants of the package, by name (a name bound twice to two texts is left out)."""
    found: dict[str, str] = {}
    twice: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                name = node.targets[0].id
                if found.get(name, node.value.value) != node.value.value:
                    twice.add(name)
                found[name] = node.value.value
    return {k: v for k, v in found.items() if k not in twice}


def _template(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and value.value.id in constants:
                parts.append(constants[value.value.id])
            else:
                parts.append("{}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left, constants), _template(node.right, constants)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return None


def last_clause(message: str) -> str:
    return message.rsplit("; ", 1)[-1]


def error_paths() -> dict[str, dict[str, list[str]]]:
    """``{module: {function: [last clause of each raise, in order]}}``, modules relative to ``ptebuild/``."""
    constants = _constants()
    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()

        def visit(node: ast.AST, scope: list[str]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(child, [*scope, child.name])
                    continue
                if isinstance(child, ast.Raise) and isinstance(child.exc, ast.Call):
                    func = child.exc.func
                    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                    if name in ERRORS:
                        found.setdefault(module, {}).setdefault(".".join(scope) or "<module>", []).append(_clause(child.exc, constants))
                visit(child, scope)

        visit(ast.parse(path.read_text()), [])
    return found


def _clause(call: ast.Call, constants: dict[str, str]) -> str:
    fix = next((k.value for k in call.keywords if k.arg == "fix"), None)
    message = call.args[0] if call.args else None
    for node in (fix, message):
        if node is None:
            continue
        text = _template(node, constants)
        if text is not None:
            return last_clause(text)
        return f"<{ast.unparse(node)}>"
    return "<no message>"


FIX_WORDS = re.compile(
    r"\b(add|build|call|change|check|choose|clear|close|correct|declare|delete|drop|fix|give|install|keep|leave|"
    r"link|list|make|name|pack|pass|point|put|raise|rebuild|regenerate|remove|rename|repair|report|restore|return|run|"
    r"save|separate|set|start|use|write|compare|did you mean|undo)\b", re.IGNORECASE)
"""Words a clause that says what to do contains (imperatives, or a did-you-mean)."""


def render(found: dict[str, dict[str, list[str]]]) -> str:
    """``found`` as tests/test_errors.py's ERROR_PATHS is written (``python tests/error_paths.py``
    prints it: paste it there once each new or changed ending says what to do)."""
    lines = ["ERROR_PATHS = {"]
    for module, functions in found.items():
        lines.append(f"    {module!r}: {{".replace("'", '"'))
        for function, clauses in functions.items():
            lines.append(f'        "{function}": [')
            lines += [f"            {_quoted(clause)}," for clause in clauses]
            lines.append("        ],")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    """A Python literal of ``text`` in double quotes (JSON's escapes are Python's for these texts)."""
    import json

    return json.dumps(text, ensure_ascii=False)


if __name__ == "__main__":
    print(render(error_paths()))
