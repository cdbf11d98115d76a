"""The weights a ``.pte`` keeps inside itself, read without torch, and named in a build's report
and record when its program has a data name (issue 26 item 6: never silently left in the ``.pte``)."""

from __future__ import annotations

import json

from helpers import ptebuild

from ptebuild.runtime.weights_in_pte import weights_in_pte


def test_named_data_inside_the_pte_is_listed_by_key_and_size(programs):
    inline = weights_in_pte(programs.xinline.pte)  # XNNPACK without a data name: its weights in the .pte
    assert len(inline) == 4  # two linears' weights and biases
    for weight in inline:
        assert len(weight.name) == 64 and weight.size > 0  # XNNPACK keys by the SHA-256 of the bytes
    assert weights_in_pte(programs.xinline.pte, is_code=lambda key: True) == []
    assert weights_in_pte(programs.xa.pte) == [] and weights_in_pte(programs.a.pte) == []


MODEL = '''
import torch


class Lifted(torch.nn.Module):
    """A tensor made inside forward: torch.export lifts it as a tensor constant, which ExecuTorch
    1.5.1 leaves inside the .pte whatever the data name ("closer to code than data")."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) + torch.tensor([1.0, 2.0, 3.0, 4.0])


def make():
    return Lifted()
'''


def test_a_weight_the_backend_cannot_place_is_named_in_the_report_and_the_record(tmp_path):
    (tmp_path / "lifted.py").write_text(MODEL)
    manifest = tmp_path / "lifted.toml"
    manifest.write_text(
        '[models.m]\nfactory = "lifted:make"\nmethods.forward.inputs = [{ name = "x", shape = [2, 4] }]\n\n'
        '[programs.lifted]\nmodel = "m"\nbackend = "portable"\ndata_name = "lifted_weights"\n'
    )
    done = ptebuild("build", manifest, "--cache", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: lifted: 1 weight (16 bytes) stays inside the .pte, not in 'lifted_weights.ptd' (the portable lowering cannot "
        "place it there): forward value 2 float32[4]"
    ]
    record = json.loads((tmp_path / "out" / "ptebuild.json").read_text())
    (kept,) = record["targets"]["lifted"]["weights_in_pte"]
    assert kept == {"name": "forward value 2 float32[4]", "bytes": 16}
    assert (tmp_path / "out" / "lifted_weights.ptd").stat().st_size > 4 * 4 * 4  # the linear's weights went there
