"""A module's forward replaced for a block, and its class's back after it, also when the block
raises (ptebuild.models.executorch_llm.forwards)."""

from __future__ import annotations

import pytest
import torch

from ptebuild.models.executorch_llm.forwards import forwards_replaced


def test_the_replacement_runs_in_the_block_and_the_class_forward_after_it():
    layer = torch.nn.Linear(3, 2)
    inputs = torch.ones(1, 3)
    expected = layer(inputs)
    with forwards_replaced([(layer, lambda x: torch.zeros(1, 2))]):
        assert torch.equal(layer(inputs), torch.zeros(1, 2))  # through Module.__call__ and its hooks
    assert "forward" not in vars(layer)
    assert torch.equal(layer(inputs), expected)


def test_the_class_forward_is_back_when_the_block_raises():
    layer = torch.nn.ReLU()
    with pytest.raises(RuntimeError, match="in the block"), forwards_replaced([(layer, lambda x: x)]):
        raise RuntimeError("in the block")
    assert "forward" not in vars(layer)
