"""Reading an LLM program's metadata values and mutable buffers without torch (:mod:`ptebuild.runtime.llm_facts`)."""

from __future__ import annotations

import subprocess
import sys

from ptebuild.runtime.llm_facts import metadata_values, mutable_buffers
from ptebuild.runtime.pte_file import open_pte


def test_metadata_values_are_read_from_the_plan(chat_build):
    _, out, *_ = chat_build
    values = metadata_values(out / "chat_xnnpack_8da4w.pte")
    assert values["get_max_seq_len"] == 63 and values["get_vocab_size"] == 256
    assert values["use_kv_cache"] is True and values["get_bos_id"] == 0


def test_mutable_buffers_are_the_planned_placeholders_without_data(chat_build):
    _, out, *_ = chat_build
    with open_pte(out / "chat_xnnpack.pte") as pte:
        plans = {plan.name(): plan for plan in pte.execution_plans()}
        buffers = mutable_buffers(plans["forward"])
        assert [b.name for b in buffers] == [f"layers.{i}.attention.kv_cache.{c}" for i in (0, 1) for c in ("k_cache", "v_cache")]
        assert {(b.scalar_type, b.sizes) for b in buffers} == {(6, (1, 64, 2, 16))}  # float32
        assert mutable_buffers(plans["get_max_seq_len"]) == ()


def test_reading_them_imports_neither_torch_nor_executorch(chat_build):
    _, out, *_ = chat_build
    code = (
        "import sys\n"
        "from ptebuild.runtime.llm_facts import metadata_values\n"
        f"assert metadata_values({str(out / 'chat_xnnpack.pte')!r})['get_n_layers'] == 2\n"
        "assert 'torch' not in sys.modules and 'executorch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_several_eos_ids_are_read_as_a_list(tmp_path):
    """A metadata method returning a list of several ints (Llama 3's three EOS ids, Qwen's two) has
    one output per int. Failed before: it was not read at all (only one output was taken as a
    value), so `inspect` did not list get_eos_ids and the runner check stopped at the tokenizer's EOS only."""
    import torch
    from executorch.exir import to_edge

    class AddOne(torch.nn.Module):
        def forward(self, x):
            return x + 1

    constants = {"get_eos_ids": [128001, 128008, 128009], "get_bos_id": 128000, "use_kv_cache": True}
    edge = to_edge(torch.export.export(AddOne(), (torch.ones(2),)), constant_methods=constants)
    path = tmp_path / "several.pte"
    path.write_bytes(edge.to_executorch().buffer)
    assert metadata_values(path) == constants
