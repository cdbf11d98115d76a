"""``ptebuild run`` holds a program to what its check held it to, on the check's inputs: its
figures are the build's (a quantized program against its quantized eager model, not the float one)."""

from __future__ import annotations

import json
import textwrap

import pytest

from ptebuild import cli

POLICY = textwrap.dedent('''
    import torch
    from torch import nn


    class Policy(nn.Module):
        def __init__(self, width: int = 64):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 4), nn.Tanh())

        def forward(self, obs):
            return self.net(obs)
''')

MANIFEST = textwrap.dedent('''
    [models.policy]
    factory = "runpolicy:Policy"
    dims = { batch = { min = 1, max = 8 } }

    [models.policy.methods.forward]
    inputs = [{ name = "obs", shape = ["batch", 32] }]

    [programs.policy_8da4w]
    model = "policy"
    backend = "xnnpack"
    options = { quantize = "8da4w" }
''')


@pytest.mark.slow
def test_run_of_a_quantized_program_gives_the_figures_of_its_check(tmp_path, capsys):
    """Seen by a user: `run` of a quantized program said 0.177 at batch 2 where the build's check said
    0.0049 at batch 2: `run` compared it with the float model, the check with its quantized one."""
    (tmp_path / "runpolicy.py").write_text(POLICY)
    manifest = tmp_path / "run.toml"
    manifest.write_text(MANIFEST)
    assert cli.main(["build", str(manifest), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    [target] = built["targets"]
    check_error = max(f["max_abs_error"] for f in target["figures"])
    assert cli.main(["run", str(manifest), "policy_8da4w", "--json", "--iters", "1"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["reference"].startswith("the check's reference") and ran["inputs"] == "the check's example inputs (seed 0; batch=2)"
    [method] = ran["methods"]
    assert method["max_abs_error"] <= check_error, (method["max_abs_error"], check_error)
