"""How the robot state enters a VLA's prompt (``policy.vla.state_tokens``).

``one`` (pi0): the whole normalised state projected into one token.

``fields``: one token per state field of the env's spec. Each token is the field's values through
its own projection plus the embedding of the field's *name* read by the backbone's own tokenizer
and embedding table ("red cube", "tcp pos"). The instruction's words and the state's entries then
live in one embedding space, so "lift the red cube" can attend to the ``red_cube`` token, which a
pretrained backbone's word embeddings make easy. (Measured with the tiny from-scratch backbone on
PickColor: no better than ``one``; binding the word to the cube is not learned at that scale.)
"""

from __future__ import annotations

import torch
from torch import nn

from protos import EnvSpec

STATE_TOKENS = ("one", "fields")


class OneStateToken(nn.Linear):
    """The normalised state as one projected token: [B, state_dim] -> [B, 1, hidden]."""

    def __init__(self, spec: EnvSpec, hidden: int) -> None:
        super().__init__(spec.state_dim, hidden)

    def forward(self, state: torch.Tensor, embed_tokens=None) -> torch.Tensor:
        return super().forward(state).unsqueeze(1)


class FieldStateTokens(nn.Module):
    """One token per state field: its own projection of the values + its name's mean embedding."""

    def __init__(self, spec: EnvSpec, hidden: int, tokenizer) -> None:
        super().__init__()
        if not spec.state_fields:
            raise ValueError("policy.vla.state_tokens='fields': the env's spec has no state fields")
        self.sizes = [f.size for f in spec.state_fields]
        self.proj = nn.ModuleList(nn.Linear(size, hidden) for size in self.sizes)
        # " red cube": spelled as the words appear inside the instruction (after a space).
        names = [" " + f.name.replace("_", " ").replace(".", " ") for f in spec.state_fields]
        batch = tokenizer(names, padding=True, return_tensors="pt", add_special_tokens=False)
        self.register_buffer("name_ids", batch["input_ids"], persistent=False)
        self.register_buffer("name_mask", batch["attention_mask"].float(), persistent=False)

    def name_embeddings(self, embed_tokens) -> torch.Tensor:
        """[fields, hidden]: the mean token embedding of each field's name."""
        embedded = embed_tokens(self.name_ids).float()
        weights = self.name_mask / self.name_mask.sum(-1, keepdim=True).clamp(min=1.0)
        return torch.einsum("fl,flh->fh", weights, embedded)

    def forward(self, state: torch.Tensor, embed_tokens) -> torch.Tensor:
        """[B, state_dim] -> [B, fields, hidden]."""
        parts = torch.split(state, self.sizes, dim=-1)
        values = torch.stack([proj(part) for proj, part in zip(self.proj, parts)], dim=1)
        return values + self.name_embeddings(embed_tokens).unsqueeze(0)


def make_state_tokens(kind: str, spec: EnvSpec, hidden: int, tokenizer) -> nn.Module:
    if kind == "one":
        return OneStateToken(spec, hidden)
    if kind == "fields":
        return FieldStateTokens(spec, hidden, tokenizer)
    raise ValueError(f"policy.vla.state_tokens must be one of {STATE_TOKENS}, got {kind!r}")
