"""Every command and code block of README.md and docs/*.md, run as written (tests/docs/doc_blocks.py
says how each kind of block is run), so that the documentation never drifts from what ptebuild does.

Each page (or each scenario of a page) runs in its own copy of the repository's tracked files with
``.venv`` linked in and one cache folder shared by the session (so the robot is lowered once). Two
commands cannot run inside a test: ``./bootstrap.sh`` (it installs the environment the test runs
in) and ``.venv/bin/python -m pytest`` (this run): ``.ci/run`` runs both from a fresh clone, and
the test checks that it does, word for word.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from doc_blocks import LANGUAGES, PAGES, ROOT, Block, all_blocks, output_matches, scenarios

README_COMMANDS = (
    "./bootstrap.sh && .venv/bin/ptebuild build manifests/robot.toml",
    "./bootstrap.sh --test && .venv/bin/python -m pytest",
)
"""The README's two commands, which must stay word for word true."""
BY_CI = ("./bootstrap.sh", "./bootstrap.sh --test", ".venv/bin/python -m pytest")
"""Commands a test cannot run (they install its environment, or are this run): .ci/run runs them."""
CHECKERS = Path(__file__).resolve().parent


def test_the_readme_keeps_its_two_commands_and_ci_runs_them():
    commands = [c for b in _readme_blocks() if b.language == "sh" for c in b.commands()]
    assert commands[:2] == list(README_COMMANDS)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in BY_CI[1:]:
        assert command in ci, f".ci/run must run {command!r}, as the README says"
    # bootstrap.sh without --test installs a subset of what --test does: the same install line (uv's, and
    # pip's where uv cannot be had), fewer extras.
    bootstrap = (ROOT / "bootstrap.sh").read_text()
    assert 'uv_install .venv/bin/python -c constraints.txt -e ".$extras"' in bootstrap
    assert '.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".$extras"' in bootstrap


def test_every_block_is_run_or_checked():
    """A block of a language the runner does not know, or an unchecked block, fails here."""
    checkers = "".join(path.read_text() for path in CHECKERS.glob("test_*.py"))
    for block in all_blocks():
        assert block.language in LANGUAGES, f"{block.where}: a ```{block.language} block: give it one of {LANGUAGES}"
        if block.language == "text":
            assert "output" in block.directives, f"{block.where}: a text block must be the output of the command before it"
        checker = block.directives.get("checked-by", "")
        if block.language == "cpp" or checker:
            assert checker and f"def {checker}(" in checkers, f"{block.where}: name the test that checks this block"


def test_the_pages_link_to_each_other():
    """Every docs/ page is linked from the README, and every relative link of a page resolves."""
    import re

    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"(docs/{page.name}" in readme, f"the README does not link docs/{page.name}"
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_the_entry_point_block_is_the_demo_plugins():
    """docs/backends.md's entry point is what the demo plug-in declares (tests/plugins installs it,
    lists it, builds, inspects, verifies and packs its programs), in the group ptebuild reads."""
    from doc_blocks import blocks

    from ptebuild.backend_registry import GROUP

    [block] = [b for b in blocks(ROOT / "docs" / "backends.md")
               if b.directives.get("checked-by") == "test_the_entry_point_block_is_the_demo_plugins"]
    demo = tomllib.loads((ROOT / "tests" / "plugins" / "ptebuild_demo_backend" / "pyproject.toml").read_text())
    documented = tomllib.loads(block.text)["project"]["entry-points"]
    assert documented == demo["project"]["entry-points"] and list(documented) == [GROUP]


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.slow] if any(b.slow for b in found) else [])
    for name, found in scenarios().items()
])
def test_page(name, tmp_path, docs_cache):
    project = _copy(tmp_path / "project")
    runner = _Runner(project, docs_cache, tmp_path)
    try:
        for block in scenarios()[name]:
            runner.run(block)
    finally:
        runner.close()


def test_the_files_a_page_writes_are_valid_manifests_and_python():
    """The fast sibling of the slow page runs: every manifest a page writes (its file= and append=
    blocks, put together in order) is valid against the manifest's model and JSON Schema, and every
    Python block compiles."""
    checked = 0
    for name, found in scenarios().items():
        files: dict[str, str] = {}
        for block in found:
            if block.language == "python":
                compile(block.text, block.where, "exec")
            target = block.directives.get("file") or block.directives.get("append")
            if target:
                files[target] = files.get(target, "") + ("\n" if "append" in block.directives else "") + block.text
                if "file" in block.directives:
                    files[target] = block.text
        for target, text in files.items():
            if target.endswith(".toml"):
                _check_manifest(Block(ROOT / name.split("#")[0], 0, "toml", text))
                checked += 1
    assert checked >= 1


# -- running ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docs_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("docs-cache")


def _readme_blocks() -> list[Block]:
    from doc_blocks import blocks

    return blocks(ROOT / "README.md")


def _copy(dest: Path) -> Path:
    """The repository's tracked files (the tests aside) in ``dest``, with ``.venv`` linked in."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in listed:
        if not name or name.startswith("tests/") or not (ROOT / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


class _Runner:
    """Runs one scenario's blocks in order in ``project``."""

    def __init__(self, project: Path, cache: Path, scratch: Path) -> None:
        self.project = project
        self.scratch = scratch
        self.server = None
        self.substitutions: dict[str, str] = {}
        self.output = ""
        self.env = {**os.environ, "PTEBUILD_CACHE": str(cache), "PYTHONWARNINGS": "ignore",
                    "PATH": f"{project / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()

    def run(self, block: Block) -> None:
        if "checked-by" in block.directives:
            return  # its own test checks it (test_every_block_is_run_or_checked: that test exists)
        needs = block.directives.get("requires")
        if needs:
            _require(needs, block)
        if block.directives.get("server") == "nginx" and self.server is None:
            self._start_nginx()
        if "file" in block.directives or "append" in block.directives:
            self._write(block)
        elif block.language == "sh":
            self._commands(block)
        elif block.language == "python":
            self._python(block)
        elif block.language == "toml":
            _check_manifest(block)
        elif block.language == "text":
            assert output_matches(block.text, self.output), f"{block.where}: the output differs:\n{self.output[-4000:]}"
        elif block.language == "yaml":
            import yaml

            assert yaml.safe_load(block.text) is not None, block.where

    def _write(self, block: Block) -> None:
        target = self.project / block.directives.get("file", block.directives.get("append", ""))
        target.parent.mkdir(parents=True, exist_ok=True)
        if "append" in block.directives:
            with open(target, "a") as f:
                f.write("\n" + block.text)
        else:
            target.write_text(block.text)

    def _commands(self, block: Block) -> None:
        expected_exit = int(block.directives.get("exit", "0"))
        commands = block.commands()
        for index, command in enumerate(commands):
            parts = [part.strip() for part in command.split("&&")]
            runnable = [self._substituted(part) for part in parts if part not in BY_CI]
            if not runnable:
                continue
            done = subprocess.run(["bash", "-c", " && ".join(runnable)], cwd=self.project, env=self.env,
                                  capture_output=True, text=True, timeout=1800)
            self.output = done.stdout + done.stderr
            want = expected_exit if index == len(commands) - 1 else 0
            assert done.returncode == want, f"{block.where}: `{command}` exited {done.returncode}:\n{self.output[-4000:]}"
            assert "Traceback" not in self.output, f"{block.where}: `{command}`:\n{self.output[-4000:]}"

    def _python(self, block: Block) -> None:
        script = self.project / f"doc_block_{block.line}.py"
        script.write_text(block.text)
        done = subprocess.run([sys.executable, script.name], cwd=self.project, env=self.env, capture_output=True,
                              text=True, timeout=1800)
        self.output = done.stdout + done.stderr
        assert done.returncode == 0, f"{block.where}: the Python block failed:\n{self.output[-4000:]}"


    def _substituted(self, command: str) -> str:
        for old, new in self.substitutions.items():
            command = command.replace(old, new)
        return command

    def _start_nginx(self) -> None:
        """A real cache server for the page's remote-cache commands: nginx with WebDAV, at the
        address the page names (``http://cache.internal:8080``)."""
        from helpers import unavailable
        from nginx_server import has_dav_module, nginx_binary, start_nginx

        binary = nginx_binary()
        if binary is None or not has_dav_module(binary):
            unavailable("nginx with the WebDAV module is not installed (bootstrap.sh --test installs it)")
        self.server = start_nginx(self.scratch / "nginx", binary)
        self.substitutions["http://cache.internal:8080"] = self.server.url


def _check_manifest(block: Block) -> None:
    """A manifest shown for reference (not built here): valid against the manifest's model and schema."""
    from jsonschema import Draft202012Validator

    from ptebuild.manifest.schema import Manifest, json_schema

    document = tomllib.loads(block.text)
    Manifest.model_validate(document)
    errors = [f"{e.json_path}: {e.message}" for e in Draft202012Validator(json_schema()).iter_errors(document)]
    assert not errors, f"{block.where}: {errors}"


def _require(what: str, block: Block) -> None:
    if what == "gpu":
        if shutil.which("nvidia-smi") is None:
            pytest.skip(f"{block.where} needs a CUDA GPU (the GPU machine runs it: tests/cuda/run_on_gpu.sh)")
        return
    raise AssertionError(f"{block.where}: unknown requirement {what!r}")
