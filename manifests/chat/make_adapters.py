"""Make chat.toml's two LoRA adapters (``lora_story/`` and ``lora_poem/``), random weights in PEFT's layout.

Run from the repository root: ``.venv/bin/python manifests/chat/make_adapters.py``. Each folder
holds what PEFT's ``save_pretrained`` writes for a causal LM's adapter and what ExecuTorch's LLM
export reads (``LlmConfig.base.lora_config``: ``adapter_config`` for ``r``, ``lora_alpha`` and
``target_modules``; ``adapter_checkpoint`` mapped by ``examples/models/llama/convert_weights.py``):

- ``adapter_config.json``: PEFT's LoRA config;
- ``adapter_model.safetensors``: ``base_model.model.model.layers.N.<module>.lora_A.weight``
  (rank x in) and ``lora_B.weight`` (out x rank) for each target module of each of the 2 layers.

The B matrices are random too (a trained adapter's are; PEFT starts them at zero), so that each
adapter changes what the model computes. Sizes follow chat/params.json (dim 64, 4 heads of 16,
2 KV heads, FFN 192).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent
LAYERS = 2
SHAPES = {  # module -> (in, out), and where it sits
    "q_proj": (64, 64, "self_attn"), "k_proj": (64, 32, "self_attn"), "v_proj": (64, 32, "self_attn"),
    "o_proj": (64, 64, "self_attn"), "gate_proj": (64, 192, "mlp"), "up_proj": (64, 192, "mlp"),
    "down_proj": (192, 64, "mlp"),
}
ADAPTERS = {
    "lora_story": {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "seed": 11},
    "lora_poem": {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "o_proj", "down_proj"], "seed": 12},
}


def make(folder: Path, r: int, lora_alpha: int, target_modules: list[str], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(LAYERS):
        for module in target_modules:
            fan_in, fan_out, parent = SHAPES[module]
            prefix = f"base_model.model.model.layers.{layer}.{parent}.{module}"
            weights[f"{prefix}.lora_A.weight"] = torch.randn(r, fan_in, generator=generator) * 0.1
            weights[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, r, generator=generator) * 0.1
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": None, "r": r,
        "lora_alpha": lora_alpha, "lora_dropout": 0.0, "target_modules": target_modules, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    for name, settings in ADAPTERS.items():
        make(out / name, **settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
