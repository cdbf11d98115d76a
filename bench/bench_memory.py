"""Benchmark (not a test): peak memory of the builder and of a worker building a program whose
``.ptd`` holds 2 GiB of weights, against the lowering's own need.

Run (it needs about 12 GiB of memory; on a shared machine under the heavy lock)::

    flock /work/wt/heavy.lock .venv/bin/python bench/bench_memory.py [--gib 2] [--check on|off|both]
                                                                    [--executor local|daemon]

The model is an MLP of ``depth`` square ``Linear`` layers without bias, random weights from a seed
(``--gib 2``: two 16384 x 16384 layers, 536,870,912 float32 parameters, 2 GiB), one portable program
with a data name: its ``.ptd`` holds every weight. Everything is written to a fresh temporary folder
deleted at the end.

Figures printed (peak resident memory, ``VmHWM``, of each process):

* **plain export**: a one-process script, what a user would write with ExecuTorch's API: the same
  factory and seed, ``torch.export``, ``to_edge``, ``to_executorch`` with the weights external,
  ``write_to_file`` of the ``.pte`` and ``write_tensor_data_to_file`` of the ``.ptd``. This is the
  lowering's own need (ExecuTorch's emitter holds the weights more than once on its way).
* **plain export + run**: the same script, then the program loaded with its ``.ptd`` in
  ExecuTorch's runtime and run once, compared with the eager model: what a check needs on top.
* **ptebuild**: ``ptebuild build --executor local -j1`` (or ``daemon``) from an empty cache, with
  the check off (``check = { enabled = false }``) and on; the builder process (the CLI) and the
  worker process (sampled every 20 ms, with its descendants'; ``VmHWM`` is a high-water mark, so
  the samples miss nothing but the last 20 ms of a process).

The targets (issue 27): the builder's peak at most a constant (:data:`BUILDER_LIMIT`); the worker's
at most the lowering's own need plus a constant (:data:`WORKER_MARGIN`): with the check off against
the plain export, with the check on against the plain export and run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

MIB = 1 << 20
BUILDER_LIMIT = 300 * MIB
"""The builder's peak: Python, ptebuild's own modules, the cache's sqlite and buffers; never a weights file."""
WORKER_MARGIN = 300 * MIB
"""What a worker may hold beyond the lowering's own need: ptebuild's modules, the check's inputs,
buffers of a few MiB."""

MODEL = '''
import torch
from torch import nn


def make_mlp(width: int, depth: int) -> nn.Module:
    """``depth`` square Linear layers without bias, weights uniform in [-1/sqrt(width), 1/sqrt(width)]."""
    layers = []
    bound = width ** -0.5
    with torch.no_grad():
        for _ in range(depth):
            layer = nn.Linear(width, width, bias=False, device="meta")
            layer.weight = nn.Parameter(torch.empty(width, width).uniform_(-bound, bound))
            layers += [layer, nn.ReLU()]
    return nn.Sequential(*layers[:-1]).eval()
'''

MANIFEST = '''
[defaults]
out = "out"

[models.mlp]
factory = "bigmodels.mlp:make_mlp"
kwargs = {{ width = {width}, depth = {depth} }}
seed = 7

[models.mlp.methods.forward]
inputs = [{{ name = "x", shape = [1, {width}] }}]

[programs.mlp_portable]
model = "mlp"
backend = "portable"
data_name = "mlp_weights"
check = {{ enabled = {check} }}
'''

PLAIN = '''
import sys, torch
sys.path.insert(0, sys.argv[1])
from bigmodels.mlp import make_mlp
from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge

width, depth, out, run = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "run"
torch.manual_seed(7)
model = make_mlp(width, depth)
x = (torch.rand(1, width) * 2 - 1,)
exported = torch.export.export(model, x, strict=False)
edge = to_edge({"forward": exported}, compile_config=EdgeCompileConfig(_check_ir_validity=False))
program = edge.to_executorch(ExecutorchBackendConfig(external_constants=lambda _node: "mlp_weights"))
with open(f"{out}/mlp.pte", "wb") as f:
    program.write_to_file(f)
program.write_tensor_data_to_file(out)
del program, edge, exported
if run:
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(f"{out}/mlp.pte", data_path=f"{out}/mlp_weights.ptd").load_method("forward")
    got = method.execute(list(x))[0]
    with torch.no_grad():
        want = model(*x)
    print("max abs error", float((got - want).abs().max()))
'''


def peak(pid: int) -> int:
    """``VmHWM`` of ``pid`` in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                todo.append(child)
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def run_sampled(command: list[str], env: dict[str, str], cwd: Path, servers: Path | None = None
                ) -> tuple[float, int, dict[int, tuple[str, int]]]:
    """Run ``command``; (seconds, its own peak, {descendant pid: (command line, peak)}), the
    descendants of the warm servers whose pid files are in ``servers`` counted too."""
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    own = 0
    others: dict[int, tuple[str, int]] = {}
    done = threading.Event()
    output: list[str] = []
    reader = threading.Thread(target=lambda: (output.append(process.stdout.read() if process.stdout else ""), done.set()))
    reader.start()
    while process.poll() is None:
        own = max(own, peak(process.pid))
        roots = [process.pid]
        for pid_file in servers.glob("*.pid") if servers is not None else ():
            try:
                roots.append(int(pid_file.read_text()))
            except (OSError, ValueError):
                pass
        for child in [c for root in roots for c in descendants(root)] + roots[1:]:
            line = others.get(child, (command_line(child), 0))[0] or command_line(child)
            others[child] = (line, max(others.get(child, ("", 0))[1], peak(child)))
        time.sleep(0.02)
    reader.join()
    seconds = time.monotonic() - started
    if process.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {process.returncode}:\n{''.join(output)[-4000:]}")
    return seconds, own, others


def plain_peak(project: Path, width: int, depth: int, out: Path, run: bool) -> tuple[float, int, str]:
    """The plain script's wall time, peak memory (``ru_maxrss`` of the one process) and output."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    process = subprocess.Popen([str(PYTHON), "-c", PLAIN, str(project), str(width), str(depth), str(out), "run" if run else "no"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    text = process.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        sys.exit(f"the plain script failed:\n{text[-4000:]}")
    said = [line for line in text.splitlines() if line.startswith("max abs error")]
    return time.monotonic() - started, usage.ru_maxrss * 1024, said[-1] if said else ""


def gib(n: int) -> str:
    return f"{n / (1 << 30):6.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="the weights' size (default 2 GiB)")
    parser.add_argument("--check", choices=("on", "off", "both"), default="both")
    parser.add_argument("--executor", choices=("local", "daemon"), default="local")
    args = parser.parse_args()
    width = 16384
    depth = max(1, round(args.gib * (1 << 30) / (4 * width * width)))
    weights = depth * width * width * 4
    checks = ["off", "on"] if args.check == "both" else [args.check]
    rows: list[tuple[str, str, str]] = []
    verdicts: list[bool] = []

    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-memory-") as tmp:
        tmp = Path(tmp)
        project = tmp / "project"
        (project / "bigmodels").mkdir(parents=True)
        (project / "bigmodels" / "__init__.py").write_text("")
        (project / "bigmodels" / "mlp.py").write_text(textwrap.dedent(MODEL))
        print(f"{depth} x Linear({width}, {width}): {gib(weights).strip()} of float32 weights; "
              f"executor {args.executor}; python {PYTHON}", flush=True)

        plain: dict[str, tuple[float, int]] = {}
        for check in checks:
            seconds, rss, said = plain_peak(project, width, depth, tmp / f"plain-{check}", run=check == "on")
            plain[check] = (seconds, rss)
            what = "plain export + run" if check == "on" else "plain export"
            rows.append((what, gib(rss), f"{seconds:.0f} s {said}"))
            print(f"{what}: {gib(rss)} in {seconds:.0f} s", flush=True)
            shutil.rmtree(tmp / f"plain-{check}", ignore_errors=True)

        for check in checks:
            manifest = project / f"mlp_check_{check}.toml"
            manifest.write_text(MANIFEST.format(width=width, depth=depth, check="true" if check == "on" else "false"))
            cache = tmp / f"cache-{check}"
            env = {**os.environ, "PTEBUILD_DAEMON_IDLE": "30"}
            command = [str(PYTHON), "-m", "ptebuild", "build", str(manifest), "--cache", str(cache), "--out",
                       str(tmp / f"out-{check}"), "-j1", "--executor", args.executor]
            env["PTEBUILD_WORKERS_DIR"] = str(tmp / "workers")  # a warm server of its own, stopped at the end
            seconds, builder, others = run_sampled(command, env, ROOT, tmp / "workers")
            servers = {int(f.read_text()) for f in (tmp / "workers").glob("*.pid")} if args.executor == "daemon" else set()
            worker = max((p for pid, (_line, p) in others.items() if pid not in servers), default=0)
            subprocess.run([str(PYTHON), "-m", "ptebuild", "workers", "stop"], env=env, capture_output=True)
            ptd = tmp / f"out-{check}" / "mlp_weights.ptd"
            base_seconds, base = plain[check]
            rows.append((f"ptebuild builder (check {check})", gib(builder), f"target <= {gib(BUILDER_LIMIT).strip()}"))
            rows.append((f"ptebuild worker (check {check})", gib(worker),
                         f"{gib(worker - base).strip()} over the plain script; target <= {gib(WORKER_MARGIN).strip()}; "
                         f"build {seconds:.0f} s (plain {base_seconds:.0f} s); .ptd {gib(ptd.stat().st_size).strip()}"))
            verdicts += [builder <= BUILDER_LIMIT, worker <= base + WORKER_MARGIN]
            print(f"ptebuild, check {check}: builder {gib(builder)}, worker {gib(worker)} in {seconds:.0f} s", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(tmp / f"out-{check}", ignore_errors=True)

    width_label = max(len(r[0]) for r in rows)
    print()
    for label, figure, note in rows:
        print(f"{label.ljust(width_label)}  {figure}  {note}")
    ok = all(verdicts)
    print("all targets met" if ok else "MISSED a target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
