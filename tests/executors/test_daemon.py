"""The warm worker server, for real: a detached server per cache folder, tasks of the tiny project."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import STARTS, started
from project_copy import copy_project

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks_for_tests import cli_build, local_reference, make_tasks, run_all, slow_on_first_attempt, stored, wait_for

from ptebuild.builder.executors.daemon import DaemonExecutor
from ptebuild.cli import main
from ptebuild.daemon import protocol
from ptebuild.worker.tasks import EventKind

ROOT = Path(__file__).resolve().parents[2]


def server_status(cache: Path) -> dict | None:
    try:
        with protocol.connect(protocol.socket_path(cache), timeout=2) as sock:
            return protocol.request(sock, {"op": "status"}, timeout=5)
    except OSError:
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead for our purposes
        if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
            return False
    return True


def all_statuses(cache: Path) -> list[dict]:
    """The status of every server answering in ``cache``: a build in another process may have
    another toolchain id than this one, while ptebuild's sources are being edited."""
    found = []
    for path in protocol.workers_dir(cache).glob("*.sock"):
        with contextlib.suppress(OSError):
            with protocol.connect(path, timeout=2) as sock:
                found.append(protocol.request(sock, {"op": "status"}, timeout=5))
    return found


def stop_servers(cache: Path) -> None:
    """Stop the servers the tests started in ``cache`` (by their pid files), and wait for them."""
    for pid_file in protocol.workers_dir(cache).glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not alive(pid), 15, f"server {pid} to exit")


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache folder whose warm server the module's tests share (started by the first build)."""
    cache = tmp_path_factory.mktemp("daemon") / "cache"
    yield cache
    stop_servers(cache)


def outputs(event) -> dict[str, str]:
    assert event.kind is EventKind.DONE, event.text
    return {o.name: o.sha256 for o in event.result.outputs}


def test_concurrent_builds_start_one_server_and_the_next_build_starts_warm(warm, tmp_path):
    manifest = copy_project(tmp_path / "project")
    # Two builds at once, on a cache with no server: one server is started, both are served.
    first = DaemonExecutor(jobs=1, cache_dir=warm, idle=120)
    second = DaemonExecutor(jobs=1, cache_dir=warm, idle=120)
    tasks = make_tasks(manifest, tmp_path / "staging")
    finals = {}
    first.submit(tasks["tiny_portable"])
    second.submit(replace(tasks["tiny_portable"], task_id="other", store=str(tmp_path / "staging" / "other")))
    deadline = time.monotonic() + 180
    while len(finals) < 2 and time.monotonic() < deadline:
        for executor in (first, second):
            for event in executor.poll(0.05):
                if event.kind in (EventKind.DONE, EventKind.FAILED):
                    finals[event.task_id] = event
    first.close()
    second.close()
    assert {name: e.kind for name, e in finals.items()} == {"tiny_portable": EventKind.DONE, "other": EventKind.DONE}
    assert outputs(finals["tiny_portable"]) == outputs(finals["other"])
    for name, event in finals.items():
        task = tasks["tiny_portable"] if name == "tiny_portable" else replace(tasks["tiny_portable"], store=str(tmp_path / "staging" / "other"))
        for output in event.result.outputs:  # in the task's store, by digest
            assert stored(task, output).stat().st_size == output.size
    status = server_status(warm)
    assert status is not None and status["tasks_run"] == 2
    assert len(list(protocol.workers_dir(warm).glob("*.sock"))) == 1

    # The next build: the same server, and its task starts without importing torch.
    again = DaemonExecutor(jobs=1, cache_dir=warm)
    task = make_tasks(manifest, tmp_path / "staging2")["tiny_portable"]
    started = time.monotonic()
    first_progress = None

    def note(event):
        nonlocal first_progress
        if event.kind is EventKind.PROGRESS and first_progress is None:
            first_progress = time.monotonic() - started

    final = run_all(again, {task.task_id: task}, on_event=note)[task.task_id]
    again.close()
    assert final.kind is EventKind.DONE, final.text
    assert server_status(warm)["pid"] == status["pid"]
    assert first_progress is not None and first_progress < 1.5, f"first progress after {first_progress:.2f}s"


def test_progress_names_the_stage_and_the_result_keeps_the_stages(warm, tmp_path):
    manifest = copy_project(tmp_path / "project")
    task = make_tasks(manifest, tmp_path / "staging")["tiny_xnnpack"]
    executor = DaemonExecutor(jobs=1, cache_dir=warm)
    lines, stored_news = [], []

    def on_event(event):
        if event.kind is EventKind.PROGRESS:
            lines.append((event.stage, event.text))
        elif event.kind is EventKind.STORED:  # before the check: each output in the store by then
            stored_news.append({o.name: (o.sha256, stored(task, o).stat().st_size == o.size) for o in event.outputs})
            lines.append(("", "stored"))

    final = run_all(executor, {task.task_id: task}, on_event=on_event)[task.task_id]
    executor.close()
    assert final.kind is EventKind.DONE, final.text
    assert stored_news == [{o.name: (o.sha256, True) for o in final.result.outputs}]
    assert lines.index(("", "stored")) == lines.index(("checking", "checking against eager PyTorch")) - 1
    assert ("export", "exporting forward") in lines and ("lowering", "lowering for xnnpack") in lines
    assert ("emitting", "emitting the program") in lines
    assert ("checking", "checking against eager PyTorch") in lines
    spans = [s.stage.value for s in final.result.stages]
    assert spans == ["model-import", "export", "lowering", "emitting", "checking", "storing"]
    assert final.result.insight.to_json()["delegation"]["methods"]["forward"]["delegated"]["XnnpackBackend"]["subgraphs"] >= 1


FRESH_BUILD = """
import json, sys
from ptebuild.worker.tasks import Task
from ptebuild.worker.execute import prepare_worker, run_task
prepare_worker()
result = run_task(Task.from_json(json.loads(sys.argv[1])), lambda text: None)
print(json.dumps({o.name: o.sha256 for o in result.outputs}))
"""


def fresh_build(task) -> dict[str, str]:
    """The task built by a new interpreter that never saw the daemon."""
    done = subprocess.run([sys.executable, "-c", FRESH_BUILD, json.dumps(task.to_json())],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_edited_model_is_built_with_the_new_code(warm, tmp_path):
    manifest = copy_project(tmp_path / "project")
    executor = DaemonExecutor(jobs=1, cache_dir=warm)
    task = make_tasks(manifest, tmp_path / "before")["tiny_portable"]
    before = outputs(run_all(executor, {task.task_id: task})[task.task_id])

    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace("nn.ReLU()", "nn.Tanh()").replace(
        "return self.head(torch.relu(", "return self.head(torch.tanh("))
    task = make_tasks(manifest, tmp_path / "after")["tiny_portable"]
    after = outputs(run_all(executor, {task.task_id: task})[task.task_id])
    executor.close()
    assert after != before, "the warm server built the old model code"
    assert after == fresh_build(replace(task, store=str(tmp_path / "fresh")))


def test_a_task_runs_in_the_builds_folder_and_environment(warm, tmp_path, monkeypatch):
    manifest = copy_project(tmp_path / "project")
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace(
        "def make_tiny(**kwargs) -> Tiny:\n",
        "def make_tiny(**kwargs) -> Tiny:\n"
        "    import os\n"
        "    if os.environ.get('TINY_MARK') != 'mark' or os.getcwd() != os.environ.get('TINY_CWD'):\n"
        "        raise RuntimeError(f'cwd {os.getcwd()}, mark {os.environ.get(\"TINY_MARK\")}')\n",
    ))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TINY_MARK", "mark")
    monkeypatch.setenv("TINY_CWD", str(tmp_path))
    executor = DaemonExecutor(jobs=1, cache_dir=warm)
    task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
    final = run_all(executor, {task.task_id: task})[task.task_id]
    executor.close()
    assert final.kind is EventKind.DONE, final.text


@pytest.mark.slow
def test_server_killed_mid_task_retries_once_then_fails_clearly(warm, tmp_path):
    manifest = copy_project(tmp_path / "project")
    marker = tmp_path / "first-attempt"
    slow_on_first_attempt(manifest, marker)
    task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
    warnings = []
    executor = DaemonExecutor(jobs=1, cache_dir=warm, report=warnings.append)
    executor.submit(task)
    wait = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < wait, "the task never started"
        executor.poll(0.05)
    server = server_status(warm)
    child = server["running"][0]["pid"]
    os.kill(server["pid"], signal.SIGKILL)
    final = None
    deadline = time.monotonic() + 180
    while final is None:
        assert time.monotonic() < deadline
        for event in executor.poll(0.1):
            if event.kind in (EventKind.DONE, EventKind.FAILED):
                final = event
    assert final.kind is EventKind.DONE, final.text  # the retry, on a new server, built it
    assert warnings and "retrying once" in warnings[0]
    wait_for(lambda: not alive(child), 10, "the killed server's child to die with it")
    assert server_status(warm)["pid"] != server["pid"]
    # The new server swept the killed one's log folder.
    assert not list(protocol.workers_dir(warm).glob(f"children-{server['pid']}-*"))

    # Killed twice: the task fails, with one line that says what happened and what to do.
    marker.unlink()
    executor.submit(replace(task, task_id="again"))
    kills = 0
    final = None
    deadline = time.monotonic() + 180
    while final is None:
        assert time.monotonic() < deadline
        for event in executor.poll(0.05):
            if event.kind in (EventKind.DONE, EventKind.FAILED):
                final = event
        if marker.exists() and kills < 2:
            os.kill(server_status(warm)["pid"], signal.SIGKILL)
            marker.unlink()
            kills += 1
    executor.close()
    assert final.kind is EventKind.FAILED
    assert "warm worker server died while building it, twice" in final.text and "--no-daemon" in final.text
    assert "\n" not in final.text


def test_a_client_killed_mid_task_has_its_child_killed(warm, tmp_path):
    manifest = copy_project(tmp_path / "project")
    marker = tmp_path / "started"
    slow_on_first_attempt(manifest, marker)
    task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
    client = subprocess.Popen([sys.executable, "-c", (
        "import json, sys, time\n"
        "from ptebuild.worker.tasks import Task\n"
        "from ptebuild.builder.executors.daemon import DaemonExecutor\n"
        f"executor = DaemonExecutor(jobs=1, cache_dir={str(warm)!r})\n"
        "executor.submit(Task.from_json(json.loads(sys.argv[1])))\n"
        "while True:\n"
        "    executor.poll(0.1)\n"
    ), json.dumps(task.to_json())], cwd=ROOT)
    try:
        wait_for(marker.exists, 120, "the task to start")
        running = [r for status in all_statuses(warm) for r in status["running"]]
        assert [r["client"] for r in running] == [client.pid]
        client.kill()  # kill -9 of a build
        client.wait(timeout=10)
        wait_for(lambda: not alive(running[0]["pid"]), 10, "its child to be killed")
        wait_for(lambda: all(s["running"] == [] for s in all_statuses(warm)), 10, "the server to forget the task")
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


@pytest.mark.slow
def test_the_cli_build_through_the_warm_server_equals_a_local_build(warm, tmp_path, tmp_path_factory):
    manifest, expected = local_reference(tmp_path_factory.getbasetemp())
    built = cli_build(manifest, tmp_path / "out", "--executor", "daemon", env={"PTEBUILD_CACHE": str(warm)})
    assert built == expected


@pytest.mark.slow
def test_another_toolchain_memory_limit_and_idle_exit(tmp_path, monkeypatch, capsys):
    # Another interpreter setup names another socket.
    other = subprocess.run(
        [sys.executable, "-c", "from ptebuild.daemon import protocol; print(protocol.toolchain_id())"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() != protocol.toolchain_id()

    # Something answering at our socket with another toolchain's hello is hung up on and replaced.
    cache = tmp_path / "cache"
    path = protocol.socket_path(cache)
    path.parent.mkdir(parents=True)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    seen = []

    def impostor():
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                reader = protocol.Reader()
                for message in reader.feed(conn.recv(1 << 16)):
                    seen.append(message["op"])
                    protocol.send(conn, {"op": "hello", "protocol": protocol.PROTOCOL, "toolchain": "0" * 20, "pid": 1})
                conn.close()

    threading.Thread(target=impostor, daemon=True).start()
    # An idle server of another toolchain (an older ptebuild): stopped when ours starts.
    from ptebuild.daemon.launch import start_detached

    stale = start_detached(protocol.socket_path(cache, "f" * 20), idle=60)
    wait_for(lambda: protocol.socket_path(cache, "f" * 20).exists(), 120, "the stale server to listen")
    manifest = copy_project(tmp_path / "project")
    task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
    monkeypatch.setenv("PTEBUILD_DAEMON_MAX_RSS", "64MiB")  # read by the server the build starts
    executor = DaemonExecutor(jobs=1, cache_dir=cache, idle=3)
    try:
        final = run_all(executor, {task.task_id: task})[task.task_id]
        listener.close()
        assert seen and set(seen) == {"hello"}, seen  # greeted, never given a task
        wait_for(lambda: not alive(stale), 15, "the stale server to be retired")
        # The real server took the socket over, and killed the task's child for its memory.
        assert final.kind is EventKind.FAILED
        assert "over the limit of 64.0 MiB (PTEBUILD_DAEMON_MAX_RSS)" in final.text, final.text

        assert main(["workers", "status", "--cache", str(cache), "--json"]) == 0
        [server] = json.loads(capsys.readouterr().out)["servers"]
        assert server["current"] and server["alive"] and server["clients"] == 1 and server["tasks_run"] == 1
        executor.close()
        # No client, no task: it exits by itself after its idle time.
        wait_for(lambda: not alive(server["pid"]), 15, "the idle server to exit", interval=0.2)
        assert not path.exists()
        assert main(["workers", "status", "--cache", str(cache)]) == 0
        assert "no warm worker server" in capsys.readouterr().out
    finally:
        executor.close()
        listener.close()
        stop_servers(cache)


@pytest.mark.parametrize("start", STARTS)
def test_ctrl_c_of_a_build_kills_its_task_on_the_warm_server(warm, tmp_path, start):
    """However the build was started (a background job has SIGINT ignored), its SIGINT kills its task."""
    manifest = copy_project(tmp_path / "project")
    marker = tmp_path / "started"
    slow_on_first_attempt(manifest, marker)
    build = subprocess.Popen(
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--executor", "daemon", "--only", "tiny_portable"],
        cwd=ROOT, env={**os.environ, "PTEBUILD_CACHE": str(warm)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=started(start),
    )
    try:
        wait_for(marker.exists, 120, "the task to start")
        [running] = [r for status in all_statuses(warm) for r in status["running"] if r["client"] == build.pid]
        build.send_signal(signal.SIGINT)
        _, stderr = build.communicate(timeout=30)
        assert build.returncode == 130, stderr
        wait_for(lambda: not alive(running["pid"]), 10, "its child to be killed")
        assert not list(Path(manifest.parent, "out").glob("*.pte"))
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()


def test_workers_status_and_stop(warm, capsys):
    pids = {status["pid"] for status in all_statuses(warm)}
    assert pids, "the tests before left no server running"
    assert main(["workers", "status", "--cache", str(warm)]) == 0
    out = capsys.readouterr().out
    assert all(f": pid {pid}," in out for pid in pids), out
    assert main(["workers", "stop", "--cache", str(warm)]) == 0
    out = capsys.readouterr().out
    assert all(f"(pid {pid})" in out for pid in pids), out
    for pid in pids:
        wait_for(lambda: not alive(pid), 15, "the stopped server to exit")
    assert main(["workers", "stop", "--cache", str(warm)]) == 0
    assert "no warm worker server running" in capsys.readouterr().out


def test_a_read_only_cache_folder_fails_the_task_with_one_line(tmp_path):
    if os.geteuid() == 0:
        # root writes anyway: make the workers folder's place a file instead
        cache = tmp_path / "cache"
        cache.mkdir()
        (cache / "workers").write_text("not a folder")
    else:
        cache = tmp_path / "cache"
        cache.mkdir(mode=0o500)
    manifest = copy_project(tmp_path / "project")
    task = make_tasks(manifest, tmp_path / "staging")["tiny_portable"]
    executor = DaemonExecutor(jobs=1, cache_dir=cache)
    final = run_all(executor, {task.task_id: task}, timeout=30)[task.task_id]
    executor.close()
    assert final.kind is EventKind.FAILED
    assert final.text.startswith("cannot start the warm worker server in ") and "--no-daemon" in final.text
    assert "\n" not in final.text


@pytest.mark.slow
def test_backends_that_do_not_survive_fork_run_in_a_fresh_interpreter(warm, tmp_path, monkeypatch):
    """CUDA tasks (and every task with PTEBUILD_DAEMON_FRESH=1) are not forked from the warm server."""
    from ptebuild.daemon.children import needs_fresh_interpreter

    manifest = copy_project(tmp_path / "project")
    portable = make_tasks(manifest, tmp_path / "store")["tiny_portable"]
    cuda = replace(portable, plan=replace(portable.plan, backend="cuda"))
    assert needs_fresh_interpreter(cuda.to_json())  # as the server receives it
    assert not needs_fresh_interpreter(portable.to_json())

    forked = DaemonExecutor(jobs=1, cache_dir=warm)
    task = make_tasks(manifest, tmp_path / "forked")["tiny_portable"]
    expected = outputs(run_all(forked, {task.task_id: task})[task.task_id])
    forked.close()

    cache = tmp_path / "cache"
    monkeypatch.setenv("PTEBUILD_DAEMON_FRESH", "1")  # read by the server this build starts
    executor = DaemonExecutor(jobs=1, cache_dir=cache, idle=30)
    progress = []
    try:
        task = make_tasks(manifest, tmp_path / "fresh")["tiny_portable"]
        final = run_all(executor, {task.task_id: task}, on_event=lambda e: progress.append(e.text or ""))[task.task_id]
        assert any("in a fresh interpreter" in text for text in progress), progress
        assert outputs(final) == expected
        wait_for(lambda: not server_status(cache)["running"], 30, "the fresh child to be reaped")
        assert server_status(cache)["tasks_run"] == 1
        assert not list(protocol.workers_dir(cache).glob("children-*/submit-*.json"))
    finally:
        executor.close()
        stop_servers(cache)


# -- a library upgraded under a running server -----------------------------------------------------


def _tabulate_wheel(folder: Path, version: str, probe: str) -> Path:
    """A real wheel of ``tabulate`` (a distribution the warm server imports with executorch):
    the installed code plus ``STALE_PROBE = probe``, so a model can tell which copy it got."""
    import base64
    import hashlib as _hashlib
    import zipfile

    import tabulate

    source = Path(tabulate.__file__).read_text() + f"\nSTALE_PROBE = {probe!r}\n"
    info = f"tabulate-{version}.dist-info"
    files = {
        "tabulate/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: tabulate\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: ptebuild-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": b"tabulate\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(_hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"tabulate-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _pip_install(wheel: Path, target: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
         "--no-deps", "--upgrade", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_a_library_upgraded_under_a_running_server_is_never_lowered_with_its_old_code(tmp_path):
    """The server keeps every module it imported (tabulate, with executorch): after a ``pip install``
    of another version, a task must not run with the old copy while the record names the new one."""
    site = tmp_path / "site"
    _pip_install(_tabulate_wheel(tmp_path / "wheels", "0.10.0.post1", "one"), site)
    manifest = copy_project(tmp_path / "project")
    (manifest.parent / "tiny.toml").write_text(
        (manifest.parent / "tiny.toml").read_text().split("[programs.tiny_xnnpack]")[0]
    )
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace(
        "def make_tiny(**kwargs) -> Tiny:\n    return Tiny(**kwargs)\n",
        "def make_tiny(**kwargs) -> Tiny:\n"
        "    import tabulate\n"
        "    tiny = Tiny(**kwargs)\n"
        "    with torch.no_grad():\n"
        "        tiny.head.bias.fill_({'one': 1.0, 'two': 2.0}[tabulate.STALE_PROBE])\n"
        "    return tiny\n",
    ))
    cache = tmp_path / "cache"
    env = {"PYTHONPATH": str(site), "PTEBUILD_CACHE": str(cache), "PTEBUILD_DAEMON_IDLE": "120"}
    try:
        before = cli_build(manifest, tmp_path / "out", "--executor", "daemon", env=env)
        [server] = all_statuses(cache)

        _pip_install(_tabulate_wheel(tmp_path / "wheels", "0.10.0.post2", "two"), site)
        after = cli_build(manifest, tmp_path / "out", "--executor", "daemon", "--explain", env=env)
        fresh = cli_build(manifest, tmp_path / "fresh", "--executor", "local", "--no-cache", env=env)
        assert before != fresh, "the probe does not reach the program's bytes"
        assert after == fresh, "the warm server lowered with the tabulate it imported before the upgrade"
        statuses = all_statuses(cache)
        assert server["pid"] not in [s["pid"] for s in statuses], "the stale server still serves"
        wait_for(lambda: not alive(server["pid"]), 30, "the stale server to exit")
    finally:
        stop_servers(cache)


# Slow: a library upgraded mid-task on a fresh server (9-13 s); tests/test_deps.py's sibling-package change stays in the default run.
@pytest.mark.slow
def test_a_library_upgraded_while_a_task_runs_fails_that_task_with_one_line(tmp_path):
    """Which version did the lowering use? Neither can be known: the task fails, naming it."""
    site = tmp_path / "site"
    _pip_install(_tabulate_wheel(tmp_path / "wheels", "0.10.0.post1", "one"), site)
    newer = _tabulate_wheel(tmp_path / "wheels", "0.10.0.post2", "two")
    manifest = copy_project(tmp_path / "project")
    (manifest.parent / "tiny.toml").write_text(
        (manifest.parent / "tiny.toml").read_text().split("[programs.tiny_xnnpack]")[0]
    )
    model = manifest.parent / "tinymodels" / "tiny.py"
    model.write_text(model.read_text().replace(
        "def make_tiny(**kwargs) -> Tiny:\n    return Tiny(**kwargs)\n",
        "def make_tiny(**kwargs) -> Tiny:\n"
        "    import subprocess, sys, tabulate\n"
        f"    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--upgrade',\n"
        f"                    '--target', {str(site)!r}, {str(newer)!r}], check=True)\n"
        "    return Tiny(**kwargs)\n",
    ))
    done = subprocess.run(
        [sys.executable, "-m", "ptebuild", "build", str(manifest), "--executor", "local", "--no-cache"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert done.returncode == 1, done.stderr[-2000:]
    # (pip --target leaves the old dist-info beside the new one: both versions are named)
    assert (f"error: {manifest}: programs.tiny_portable: distribution tabulate changed while the program was "
            "lowered (0.10.0.post1 -> 0.10.0.post1|0.10.0.post2); build again") in done.stderr, done.stderr[-2000:]
    assert not list((manifest.parent / "out").glob("*.pt[ed]"))
