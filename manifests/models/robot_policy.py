"""A small robot manipulation policy in the spirit of LeRobot's ACT and SmolVLA.

A camera image and the robot's proprioceptive state go in; a chunk of future actions comes out.
The policy is split into the two methods a robot runtime calls at different rates:

- ``encode_observation(image, state)``: a convolutional image encoder and a state projection,
  mixed by a small transformer into observation tokens ``[batch, tokens, width]``;
- ``predict_actions(observation)``: learned action queries cross-attend to the observation
  tokens and decode an action chunk ``[batch, chunk, action_dim]``.

About 3.6 million parameters with the defaults. Plain operators only (convolutions, linear
layers, layer norms, softmax attention written out), so that both ExecuTorch's portable kernels
and XNNPACK can run it.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)

    def forward(self, queries: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        batch, n_queries, width = queries.shape
        head_width = width // self.heads
        q = self.q(queries).reshape(batch, n_queries, self.heads, head_width).transpose(1, 2)
        k, v = self.kv(context).reshape(batch, -1, 2, self.heads, head_width).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_width), dim=-1)
        mixed = (weights @ v).transpose(1, 2).reshape(batch, n_queries, width)
        return self.out(mixed)


class Block(nn.Module):
    """Pre-norm transformer block; cross-attends when given a context."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm_q = nn.LayerNorm(width)
        self.norm_kv = nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        q = self.norm_q(x)
        kv = q if context is None else self.norm_kv(context)
        x = x + self.attention(q, kv)
        return x + self.mlp(self.norm_mlp(x))


class RobotPolicy(nn.Module):
    def __init__(
        self,
        image_size: int = 96,
        state_dim: int = 14,
        action_dim: int = 7,
        chunk: int = 16,
        width: int = 256,
        heads: int = 8,
        depth: int = 2,
    ):
        super().__init__()
        self.vision = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 128, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(128, width, kernel_size=3, stride=2, padding=1),
        )
        n_patches = math.ceil(image_size / 16) ** 2
        self.patch_position = nn.Parameter(torch.randn(1, n_patches, width) * 0.02)
        self.state_projection = nn.Linear(state_dim, width)
        self.encoder = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.action_queries = nn.Parameter(torch.randn(1, chunk, width) * 0.02)
        self.decoder = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.action_head = nn.Linear(width, action_dim)

    def encode_observation(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        patches = self.vision(image).flatten(2).transpose(1, 2) + self.patch_position
        tokens = torch.cat([patches, self.state_projection(state).unsqueeze(1)], dim=1)
        for block in self.encoder:
            tokens = block(tokens)
        return tokens

    def predict_actions(self, observation: torch.Tensor) -> torch.Tensor:
        queries = self.action_queries.expand(observation.shape[0], -1, -1)
        for block in self.decoder:
            queries = block(queries, observation)
        return torch.tanh(self.action_head(queries))

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.predict_actions(self.encode_observation(image, state))


def make_policy(**kwargs) -> RobotPolicy:
    return RobotPolicy(**kwargs)
