"""A failed program: one line that names its cause and its log; the whole text in that log."""

from __future__ import annotations

import pytest

from ptebuild.builder import failure_logs


def _program(document: dict, name: str) -> dict:
    return next(p for p in document["targets"] if p["name"] == name)


def test_every_failure_is_one_line_naming_its_cause_and_log(people_build):
    project, code, document, stderr = people_build
    assert code == 1
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, stderr
    raises = _program(document, "raises_portable")
    log = project / "out" / ".ptebuild" / "logs" / "raises_portable.log"
    assert raises["status"] == "failed"
    assert raises["message"] == (
        f"{project / 'people.toml'}: programs.raises_portable: torch.export of method 'forward' failed: "
        f"ValueError: the policy needs a calibrated camera: front, wrist; change the model where the cause points "
        f"(the log has the whole output), or report it to ExecuTorch or PyTorch if the model is right (full output: {log})"
    )
    histogram = _program(document, "histogram_portable")["message"]
    # A C++ error of ExecuTorch's runtime: the error code named, the reason it logged, no frames.
    assert "ExecuTorch's runtime failed to load method 'forward'" in histogram
    assert "(OperatorMissing); it logged: kernel 'aten::histc.out' not found." in histogram
    assert "Missing operator: [0] aten::histc.out" in histogram
    assert "\n" not in histogram and "dim order" not in histogram
    for line in errors:
        assert "Traceback" not in line and "Exception raised from" not in line


def test_the_log_holds_the_whole_text(people_build):
    project, _, _, _ = people_build
    logs = project / "out" / ".ptebuild" / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["histogram_portable.log", "raises_portable.log"]
    raises = (logs / "raises_portable.log").read_text()
    assert "Traceback (most recent call last)" in raises and 'raise ValueError("the policy needs' in raises
    histogram = (logs / "histogram_portable.log").read_text()
    assert "ExecuTorch's runtime logged:" in histogram and "dtype: 6 | dim order" in histogram


def test_a_log_is_replaced_by_the_next_failure_and_removed_on_success(tmp_path):
    tail = failure_logs.keep(tmp_path, "p", "first failure", "Traceback: one")
    path = failure_logs.log_path(tmp_path, "p")
    assert tail == f" (full output: {path})" and path.read_text() == "first failure\n\nTraceback: one\n"
    failure_logs.keep(tmp_path, "p", "second failure", "")
    assert path.read_text() == "second failure\n"
    failure_logs.forget(tmp_path, "p")
    assert not path.exists() and not (tmp_path / ".ptebuild").exists()
    failure_logs.forget(tmp_path, "p")  # nothing to remove: no error


@pytest.mark.slow
def test_a_missing_kernel_names_the_kernel():
    """ExecuTorch's own AOTInductor missing-kernel check, run for real on the CPU: its CUDA
    backend compiles with AOTInductor through the same ``AotiBackend.preprocess``; here a subclass
    targets the CPU (no GPU on this machine), so the kernel Inductor falls back to is a CPU one."""
    import torch
    import torch.nn.functional as F
    from executorch.backends.aoti.aoti_backend import AotiBackend
    from executorch.exir import to_edge
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    from ptebuild.models.factory.lower import summary_of

    class CpuAoti(AotiBackend):
        @classmethod
        def get_device_name(cls):
            return "cpu"

        @classmethod
        def get_supported_fallback_kernels(cls):
            return {"aoti_torch_cuda_sort_stable": None}

        @classmethod
        def get_decomposition_table(cls):
            return {}

        @classmethod
        def get_aoti_compile_options(cls, compile_specs):
            return {"aot_inductor.package": False}

        @classmethod
        def get_custom_passes(cls, compile_specs):
            return []

    class Resize(torch.nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True)

    edge = to_edge({"forward": torch.export.export(Resize(), (torch.randn(1, 2, 8, 8),), strict=False)})
    with pytest.raises(RuntimeError) as caught:
        CpuAoti.preprocess(edge.exported_program("forward"), [CompileSpec("method_name", b"forward")])
    assert str(caught.value).count("\n") >= 2
    assert summary_of(caught.value) == (
        "RuntimeError: Method forward missing fallback kernels (1 total): aten::_upsample_bilinear2d_aa"
    )


def test_a_refused_manifest_leaves_no_folder_and_says_its_cause_once(tmp_path):
    """Seen by a user: weights every program loads, refused (exit 2), printed once per program, and
    an out folder made only for the logs of a mistake whose line says everything."""
    import torch
    from helpers import ptebuild
    from project_copy import copy_project

    manifest = copy_project(tmp_path / "project")
    torch.save({"model": {"w": torch.zeros(1)}, "epoch": 1}, manifest.parent / "ckpt.pt")
    text = manifest.read_text().replace("seed = 1", 'seed = 1\nweights = "ckpt.pt"')
    manifest.write_text(text)
    out = tmp_path / "out-refused"
    done = ptebuild("build", manifest, "--out", out, "--cache", tmp_path / "cache")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].endswith("set weights_key = 'model' (programs tiny_portable and tiny_xnnpack)"), errors
    assert not out.exists()
