"""Shim lists as text: module-definition (``.def``) files and the TOML form used by manifests.

``.def`` (read as llvm-dlltool's COFFModuleDefinition.cpp and MSVC's LINK read it)::

    ; comment to end of line
    LIBRARY aoti_cuda_shims.dll        ; ".dll" is appended when the name has no extension
    EXPORTS
        aoti_torch_check                ; a code export
        some_table DATA                 ; imported as __imp_some_table only
        some_const CONSTANT
        by_number @7 NONAME             ; exported by ordinal only
        with_hint @8                    ; @N without NONAME is the hint; @0 means none
        alias=internal_name             ; the left name is the one imported
        hidden PRIVATE                  ; in the DLL, left out of the import library

Tokens split on white space, ``=``, ``,`` and ``;``; ``"quoted names"`` are never keywords;
keywords are upper case. NAME, BASE=, HEAPSIZE, STACKSIZE and VERSION are read and ignored.
Weak aliases (``name == target``) are refused: they are not plain imports.

TOML (``*.toml``), small and line-mergeable::

    dll = "aoti_cuda_shims.dll"
    exports = [
        "aoti_torch_check",                          # a code export
        { name = "some_table", type = "data" },      # type: "code" | "data" | "const"
        { name = "by_number", ordinal = 7, noname = true },
        { name = "hidden", private = true },
    ]

Both readers raise :class:`UsageError` with ``file:line: what; fix`` (TOML: ``file: exports[i]:``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from ptebuild.errors import UsageError
from ptebuild.shims.model import (
    EXPORT_TYPES,
    MAX_ORDINAL,
    Export,
    ExportType,
    ShimList,
    conflict_message,
    symbol_name_problem,
)

KEYWORDS = frozenset(
    {"BASE", "CONSTANT", "DATA", "EXPORTS", "HEAPSIZE", "LIBRARY", "NAME", "NONAME", "PRIVATE", "STACKSIZE", "VERSION"}
)
# Characters that end an unquoted word (llvm's Lexer uses "=,;\r\n \t\v"; \f is white space too).
_WORD_END = frozenset("=,;\r\n \t\v\f")


@dataclasses.dataclass(frozen=True)
class _Token:
    text: str
    line: int
    quoted: bool = False

    @property
    def keyword(self) -> str | None:
        return self.text if not self.quoted and self.text in KEYWORDS else None

    @property
    def is_name(self) -> bool:
        return self.quoted or (self.text not in KEYWORDS and self.text not in ("=", "==", ","))


def _tokenize(text: str, source: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch in " \t\r\v\f":
            i += 1
        elif ch == ";":
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif ch == "=":
            if text.startswith("==", i):
                tokens.append(_Token("==", line))
                i += 2
            else:
                tokens.append(_Token("=", line))
                i += 1
        elif ch == ",":
            tokens.append(_Token(",", line))
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise UsageError(f"{source}:{line}: unterminated quoted name; close it with '\"'")
            word = text[i + 1 : end]
            if "\n" in word:
                raise UsageError(f"{source}:{line}: quoted name runs past the end of the line; close it with '\"'")
            tokens.append(_Token(word, line, quoted=True))
            i = end + 1
        else:
            start = i
            while i < n and text[i] not in _WORD_END:
                i += 1
            tokens.append(_Token(text[start:i], line))
    return tokens


class _DefParser:
    def __init__(self, tokens: list[_Token], source: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.source = source
        self.dll: str | None = None
        self.exports: list[Export] = []
        self.lines: dict[str, tuple[Export, int]] = {}

    def error(self, token: _Token | None, message: str) -> UsageError:
        line = token.line if token else (self.tokens[-1].line if self.tokens else 1)
        return UsageError(f"{self.source}:{line}: {message}")

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self) -> _Token | None:
        token = self.peek()
        if token is not None:
            self.pos += 1
        return token

    def parse(self) -> None:
        while (token := self.next()) is not None:
            keyword = token.keyword
            if keyword in ("LIBRARY", "NAME"):
                self.parse_library(token)
            elif keyword == "EXPORTS":
                while (name := self.peek()) is not None and name.is_name:
                    self.parse_export()
            elif keyword in ("HEAPSIZE", "STACKSIZE"):
                self.expect_number(token)
                if (comma := self.peek()) is not None and comma.text == "," and not comma.quoted:
                    self.next()
                    self.expect_number(comma)
            elif keyword == "VERSION":
                version = self.next()
                if version is None or not version.is_name:
                    raise self.error(token, "VERSION needs a number like 1.0")
            else:
                raise self.error(
                    token, f"unexpected {token.text!r}; expected LIBRARY, NAME, EXPORTS or an export under EXPORTS"
                )

    def expect_number(self, after: _Token) -> int:
        token = self.next()
        if token is None or not token.text.isdigit():
            raise self.error(token or after, f"{after.text} needs a decimal number")
        return int(token.text)

    def parse_library(self, directive: _Token) -> None:
        token = self.peek()
        if token is None or not token.is_name:
            return  # "LIBRARY" alone: the name comes from --dll, as with llvm-dlltool -D.
        self.next()
        name = token.text
        if "." not in name.rsplit("/", 1)[-1]:
            name += ".dll" if directive.keyword == "LIBRARY" else ".exe"
        self.dll = name
        if (base := self.peek()) is not None and base.keyword == "BASE":
            self.next()
            equal = self.next()
            if equal is None or equal.text != "=" or equal.quoted:
                raise self.error(equal or base, "expected '=' after BASE; write BASE=0x10000000")
            value = self.next()
            try:
                int(value.text, 0) if value is not None else int("")
            except ValueError:
                raise self.error(value or equal, "BASE= needs a number like 0x10000000") from None

    def parse_export(self) -> None:
        token = self.next()
        assert token is not None
        name, name_line = token.text, token.line
        problem = symbol_name_problem(name)
        if problem:
            raise self.error(token, f"{problem}; a linker cannot import it")
        if (equal := self.peek()) is not None and equal.text == "=" and not equal.quoted:
            self.next()
            internal = self.next()
            if internal is None or not internal.is_name:
                raise self.error(internal or equal, f"expected the internal name after '{name}='")
        ordinal: int | None = None
        noname = private = False
        export_type: ExportType = "code"
        while (token := self.peek()) is not None:
            if token.text.startswith("@") and not token.quoted:
                self.next()
                digits = token.text[1:]
                if digits == "":
                    number = self.next()
                    digits = number.text if number is not None else ""
                if not digits.isascii() or not digits.isdigit():
                    raise self.error(token, f"export {name!r}: expected a decimal ordinal after '@', got {digits!r}")
                value = int(digits)
                if value > MAX_ORDINAL:
                    raise self.error(token, f"export {name!r}: ordinal {value} is outside 0..{MAX_ORDINAL}")
                ordinal = value or None  # @0 means "no ordinal", as in llvm-dlltool
                if (after := self.peek()) is not None and after.keyword == "NONAME":
                    self.next()
                    noname = True
            elif token.keyword == "DATA":
                self.next()
                if export_type != "const":  # CONSTANT wins over DATA, as in llvm-dlltool
                    export_type = "data"
            elif token.keyword == "CONSTANT":
                self.next()
                export_type = "const"
            elif token.keyword == "PRIVATE":
                self.next()
                private = True
            elif token.keyword == "NONAME":
                raise self.error(token, f"export {name!r}: NONAME must follow an @ordinal; write '{name} @N NONAME'")
            elif token.text == "==" and not token.quoted:
                raise self.error(token, f"export {name!r}: weak aliases (==) are not supported; export the name itself")
            elif token.text == "," and not token.quoted:
                raise self.error(token, "unexpected ','; put one export per line")
            else:
                break
        if noname and ordinal is None:
            raise self.error(token, f"export {name!r}: NONAME needs a non-zero @ordinal")
        export = Export(name, export_type, ordinal, noname, private)
        if name in self.lines:
            first, first_line = self.lines[name]
            if first != export:
                raise self.error(token, f"{conflict_message(first, export)} (first at line {first_line})")
        else:
            self.lines[name] = (export, name_line)
        self.exports.append(export)


def parse_def(text: str, source: str, dll: str | None = None) -> ShimList:
    """Parse ``.def`` text. ``dll`` overrides LIBRARY (llvm-dlltool's ``-D``).

    Raises :class:`UsageError` (``source:line: message``) on anything llvm-dlltool would refuse,
    on names a linker cannot take and on one name declared twice with different attributes.
    """
    parser = _DefParser(_tokenize(text, source), source)
    parser.parse()
    name = dll or parser.dll
    if not name:
        raise UsageError(f"{source}: no DLL name; add 'LIBRARY aoti_cuda_shims.dll' or pass --dll")
    try:
        return ShimList(name, tuple(parser.exports))
    except UsageError as exc:
        raise UsageError(f"{source}: {exc}") from None


def _needs_quotes(name: str) -> bool:
    return name in KEYWORDS or any(ch in _WORD_END or ch == '"' for ch in name)


def format_def(shims: ShimList) -> str:
    """The ``.def`` text of ``shims``; :func:`parse_def` reads it back to an equal list."""
    dll = f'"{shims.dll}"' if _needs_quotes(shims.dll) else shims.dll
    lines = [f"LIBRARY {dll}", "EXPORTS"]
    for export in shims.exports:
        name = f'"{export.name}"' if _needs_quotes(export.name) else export.name
        attributes = export.describe()
        lines.append(f"    {name}" if attributes == "code" else f"    {name} {attributes}")
    return "\n".join(lines) + "\n"


_TOML_EXPORT_KEYS = {"name", "type", "ordinal", "noname", "private"}


def parse_toml(text: str, source: str, dll: str | None = None) -> ShimList:
    """Parse the TOML form (see the module docstring). Raises :class:`UsageError`."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML: {exc}; correct the TOML there") from None
    unknown = set(document) - {"dll", "exports"}
    if unknown:
        raise UsageError(f"{source}: unknown key {sorted(unknown)[0]!r}; a shim list has only 'dll' and 'exports'")
    name = dll or document.get("dll")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{source}: dll: missing or not a string; write dll = \"aoti_cuda_shims.dll\"")
    entries = document.get("exports", [])
    if not isinstance(entries, list):
        raise UsageError(f"{source}: exports: not an array; write exports = [\"name\", {{ name = \"x\", type = \"data\" }}]")
    exports: list[Export] = []
    seen: dict[str, tuple[Export, int]] = {}
    for index, entry in enumerate(entries):
        where = f"{source}: exports[{index}]"
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: neither a name nor a table; write a name or a table like {{ name = \"x\", type = \"data\" }}")
        extra = set(entry) - _TOML_EXPORT_KEYS
        if extra:
            raise UsageError(f"{where}: unknown key {sorted(extra)[0]!r}; use {', '.join(sorted(_TOML_EXPORT_KEYS))}")
        kind = entry.get("type", "code")
        if kind not in EXPORT_TYPES:
            raise UsageError(f"{where}: unknown type {kind!r}; use one of {', '.join(EXPORT_TYPES)}")
        ordinal = entry.get("ordinal")
        if ordinal is not None and (isinstance(ordinal, bool) or not isinstance(ordinal, int)):
            raise UsageError(f"{where}: ordinal is not an integer; give one in 1..{MAX_ORDINAL}")
        flags = {key: entry.get(key, False) for key in ("noname", "private")}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise UsageError(f"{where}: {key} is not a boolean; write true or false")
        if not isinstance(entry.get("name"), str):
            raise UsageError(f"{where}: name: missing or not a string; write name = \"the symbol\"")
        try:
            export = Export(entry["name"], kind, ordinal or None, flags["noname"], flags["private"])
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
        if export.name in seen and seen[export.name][0] != export:
            raise UsageError(f"{where}: {conflict_message(seen[export.name][0], export)}, first at exports[{seen[export.name][1]}]; keep one")
        seen.setdefault(export.name, (export, index))
        exports.append(export)
    try:
        return ShimList(name, tuple(exports))
    except UsageError as exc:
        raise UsageError(f"{source}: {exc}") from None


def format_toml(shims: ShimList) -> str:
    """The TOML form of ``shims``, one export per line so that git merges it line by line."""
    lines = [f"dll = {_toml_string(shims.dll)}", "exports = ["]
    for export in shims.exports:
        if export == Export(export.name):
            lines.append(f"    {_toml_string(export.name)},")
            continue
        fields = [f"name = {_toml_string(export.name)}"]
        if export.type != "code":
            fields.append(f'type = "{export.type}"')
        if export.ordinal is not None:
            fields.append(f"ordinal = {export.ordinal}")
        if export.noname:
            fields.append("noname = true")
        if export.private:
            fields.append("private = true")
        lines.append("    { " + ", ".join(fields) + " },")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def parse_shim_text(data: bytes, source: str, dll: str | None = None) -> ShimList:
    """Parse a ``.toml`` (by the ``source`` suffix) or ``.def`` shim list from bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{source}: not UTF-8 text (byte {exc.start}); save the list as UTF-8") from None
    if "\x00" in text:
        raise UsageError(f"{source}:{text.count(chr(10), 0, text.index(chr(0))) + 1}: NUL byte in a text file; give a .def or shim list (text)")
    if source.lower().endswith(".toml"):
        return parse_toml(text, source, dll)
    return parse_def(text, source, dll)


def load_shim_list(path: Path, dll: str | None = None) -> ShimList:
    """Read a shim list from ``path``: TOML if it ends in ``.toml``, else a ``.def`` file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}; give a shim list you can read") from None
    return parse_shim_text(data, str(path), dll)
