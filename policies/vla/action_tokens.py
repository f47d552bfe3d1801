"""OpenVLA's action tokenisation: each action dimension in [-1, 1] cut into ``bins`` equal bins, and
bin ``k`` written as the vocabulary token ``first_id + k`` (the last ``bins`` ids of the vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ActionTokenizer:
    """Bins <-> unit actions <-> token ids."""

    bins: int
    first_id: int  # the token id of bin 0

    @classmethod
    def at_end_of(cls, vocab_size: int, bins: int) -> ActionTokenizer:
        """The OpenVLA convention: the action bins take the last ``bins`` ids of the vocabulary."""
        if vocab_size <= bins:
            raise ValueError(f"a vocabulary of {vocab_size} tokens cannot hold {bins} action bins")
        return cls(bins, vocab_size - bins)

    def bins_of(self, unit_actions: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> bin index (long), values outside clipped into the end bins."""
        scaled = (unit_actions.clamp(-1.0, 1.0) + 1.0) * 0.5 * self.bins
        return scaled.long().clamp(0, self.bins - 1)

    def centers(self, bins: torch.Tensor) -> torch.Tensor:
        """Bin index -> the bin's centre in [-1, 1]."""
        return (bins.float() + 0.5) * (2.0 / self.bins) - 1.0

    def token_ids(self, bins: torch.Tensor) -> torch.Tensor:
        return bins.long() + self.first_id

    def bins_of_tokens(self, token_ids: torch.Tensor) -> torch.Tensor:
        bins = token_ids.long() - self.first_id
        if bool(((bins < 0) | (bins >= self.bins)).any()):
            raise ValueError("token ids outside the action bins")
        return bins

    @property
    def ids(self) -> torch.Tensor:
        """Every action token id, in bin order."""
        return torch.arange(self.first_id, self.first_id + self.bins)
