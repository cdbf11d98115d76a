"""The OpenVINO backend: real lowering through ExecuTorch's OpenvinoPartitioner, the program run in
ExecuTorch's pip runtime (its OpenvinoBackend loads the openvino package's runtime) against eager
PyTorch, reproducible bytes, inspect, and what a machine without the extra or the device does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import build_json, ptebuild, require_module

HERE = Path(__file__).resolve().parent
WHY = "OpenVINO programs are lowered and run with it (pip install 'ptebuild[openvino]')"

MANIFEST = """
[defaults]
out = "out"

[models.mlp]
factory = "edgemodels.mlp:make_mlp"
seed = 7

[models.mlp.methods.forward]
inputs = [{ name = "x", shape = [4, 64] }]

[programs.mlp_openvino]
model = "mlp"
backend = "openvino"
compile_specs = { device = "DEVICE" }
"""

# Imported first by the interpreter (PYTHONPATH): openvino and nncf cannot be found, as on a
# machine without the extra.
HIDE_OPENVINO = '''
import sys

class _HideOpenvino:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("openvino", "nncf"):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _HideOpenvino())
'''


def project(folder: Path, device: str = "CPU") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(HERE / "edgemodels", folder / "edgemodels", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = folder / "edge.toml"
    manifest.write_text(MANIFEST.replace("DEVICE", device))
    return manifest


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> list[tuple[Path, dict]]:
    """The OpenVINO program built cold twice, in two folders with two caches."""
    require_module("openvino", WHY)
    builds = []
    for run in ("first", "second"):
        folder = tmp_path_factory.mktemp(f"openvino-{run}")
        manifest = project(folder)
        code, document = build_json(manifest, "--cache", folder / "cache")
        assert code == 0, document
        builds.append((manifest, document))
    return builds


def test_program_runs_in_executorch_runtime_against_eager(built):
    manifest, document = built[0]
    program = document["targets"][0]
    assert program["status"] == "built"
    # The check names the precision OpenVINO ran at; this AVX2 machine infers in f32.
    assert program["check"].startswith("executorch-runtime-openvino-")
    precision = program["check"].rsplit("-", 1)[1]
    worst = max(f["max_abs_error"] for f in program["figures"])
    assert worst <= (1e-5 if precision == "f32" else 1e-2)
    assert min(f["cosine"] for f in program["figures"]) >= 0.9999

    # And again here, by hand: ExecuTorch's runtime against the eager model.
    import torch
    from executorch.runtime import Runtime

    sys.path.insert(0, str(manifest.parent))
    try:
        from edgemodels.mlp import make_mlp
    finally:
        sys.path.remove(str(manifest.parent))
    torch.manual_seed(7)
    model = make_mlp().eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    method = Runtime.get().load_program(manifest.parent / "out" / "mlp_openvino.pte").load_method("forward")
    got = method.execute([x])[0]
    with torch.no_grad():
        expected = model(x)
    assert got.shape == expected.shape
    assert float((got - expected).abs().max()) <= (1e-5 if precision == "f32" else 1e-2)


def test_two_cold_builds_give_the_same_bytes(built):
    (_, first), (_, second) = built
    digests = [{o["path"].rsplit("/", 1)[-1]: o["sha256"] for o in d["targets"][0]["outputs"]} for d in (first, second)]
    assert list(digests[0]) == ["mlp_openvino.pte"]
    assert digests[0] == digests[1]


def test_inspect_names_the_delegate_and_how_much_of_the_method_it_took(built):
    manifest, _ = built[0]
    pte = manifest.parent / "out" / "mlp_openvino.pte"
    result = ptebuild("inspect", pte, "--json")
    assert result.returncode == 0, result.stderr
    method = json.loads(result.stdout)["methods"][0]
    assert (method["delegate_calls"], method["kernel_calls"]) == (1, 0)
    delegate = method["delegates"][0]
    assert delegate["backend"] == "OpenvinoBackend" and delegate["keys"] == []
    contents = delegate["contents"]
    assert contents["inputs"] == ["arg_0:f32[4,64]"] and contents["outputs"] == 1
    assert contents["layer_types"]["Parameter"] == 1
    # The weights are inside the payload: three linears' weights and biases, float32.
    assert contents["weights_bytes"] >= 4 * (64 * 64 * 2 + 64 * 8)
    text = ptebuild("inspect", pte, "--full").stdout
    assert "  delegated: 1 of 1 calls (OpenvinoBackend); 0 operator calls outside" in text
    assert "OpenVINO IR v11, " in text
    verified = ptebuild("verify", manifest.parent / "out")
    assert verified.returncode == 0 and "cannot be listed" not in verified.stdout + verified.stderr


def test_a_device_this_machine_lacks_is_reported_not_built(tmp_path):
    require_module("openvino", WHY)
    import openvino

    if "GPU" in openvino.Core().available_devices:
        pytest.skip("this machine has an OpenVINO GPU")
    code, document = build_json(project(tmp_path / "gpu", "GPU"), "--cache", tmp_path / "cache")
    assert code == 1
    program = document["targets"][0]
    assert program["status"] == "cannot-lower" and not program["outputs"]
    assert "this machine cannot build it: OpenVINO sees no GPU device here (only CPU" in program["message"]
    assert "--skip-backend openvino" in program["message"]


def test_without_the_extra_a_program_is_restored_from_the_cache_or_reported(built, tmp_path):
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_OPENVINO)
    env = {"PYTHONPATH": str(hidden)}
    probe = subprocess.run([sys.executable, "-c", "import openvino"], capture_output=True, text=True,
                           env={**os.environ, **env})
    assert probe.returncode == 1 and "No module named 'openvino'" in probe.stderr  # really hidden
    manifest, _ = built[0]
    cache = manifest.parent / "cache"
    # Built (or, if ptebuild's code changed since the fixture's build, built again) with openvino.
    code, first = build_json(project(tmp_path / "with-openvino"), "--cache", cache)
    assert code == 0, first
    restored = ptebuild("build", project(tmp_path / "restored"), "--cache", cache, "--json", env=env)
    program = json.loads(restored.stdout)["targets"][0]
    assert restored.returncode == 0 and program["status"] == "cached"
    assert program["outputs"][0]["sha256"] == first["targets"][0]["outputs"][0]["sha256"]

    reported = ptebuild("build", project(tmp_path / "reported"), "--cache", tmp_path / "empty", env=env)
    assert reported.returncode == 1
    assert "not in the cache, and this machine cannot build it: the openvino and nncf packages are not installed " \
           "(pip install 'ptebuild[openvino]')" in reported.stderr + reported.stdout
    assert "Traceback" not in reported.stderr


def test_a_transformer_passes_its_check_at_the_precision_openvino_infers_at(tmp_path):
    """Two transformer layers (the attention's softmax, LayerNorm): on a CPU with AMX or
    AVX512-BF16, OpenVINO computes a float32 program in bf16, whose error on such a model reaches
    a few units of bf16's rounding of the output (seen: 0.0106 on an element of 0.25, cosine
    0.999993); the defaults are then bf16's and the check says so. At f32 they are f32's."""
    from ptebuild.backends.openvino import cpu_precision

    require_module("openvino", WHY)
    folder = tmp_path / "block"
    manifest = project(folder)
    manifest.write_text(MANIFEST.replace("DEVICE", "CPU") + """
[models.block]
factory = "edgemodels.attention:make_block"
kwargs = { layers = 6, tokens = true }
seed = 3

[models.block.methods.forward]
inputs = [{ name = "x", shape = [2, 16, 64] }]

[programs.block_openvino]
model = "block"
backend = "openvino"
""")
    code, document = build_json(manifest, "--cache", folder / "cache", "--only", "block_openvino")
    assert code == 0, document
    [program] = document["targets"]
    precision = cpu_precision()
    assert program["check"] == f"executorch-runtime-openvino-{precision}"
    assert {(f["rtol"], f["min_cosine"]) for f in program["figures"]} == {(1e-3, 0.9999) if precision == "f32" else (0.25, 0.999)}


def test_a_scalar_at_the_delegate_is_a_named_known_limit(tmp_path):
    """ExecuTorch 1.5.1's OpenVINO runtime fails (error 0x1) on a delegate argument of 0 dims: the
    check's failure names the argument and what to do."""
    require_module("openvino", WHY)
    (tmp_path / "scalars.py").write_text(
        "import torch\n\n\nclass Total(torch.nn.Module):\n    def forward(self, x):\n        return x.sum()\n\n\n"
        "def make():\n    return Total()\n"
    )
    manifest = tmp_path / "scalars.toml"
    manifest.write_text('[defaults]\nout = "out"\n\n[models.total]\nfactory = "scalars:make"\n\n[models.total.methods.forward]\n'
                        'inputs = [{ name = "x", shape = [2, 3] }]\n\n[programs.total]\nmodel = "total"\nbackend = "openvino"\n')
    code, document = build_json(manifest, "--cache", tmp_path / "cache")
    assert code == 1
    message = document["targets"][0]["message"]
    assert "its OpenVINO delegate has arguments of 0 dims: method 'forward' delegate 0 argument 1: float32[]" in message
    assert "known limit of ExecuTorch 1.5.1's OpenVINO runtime" in message and "reshape(1)" in message
