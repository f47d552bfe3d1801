"""OpenVLA's action head: an action chunk written as ``chunk * action_dim`` action tokens after the
prompt, each a choice among the bins' tokens.

Autoregressive (OpenVLA): token ``i`` is predicted from the prefix and tokens ``< i``, decoded one
at a time with the text model's KV cache. Parallel (OpenVLA-OFT, ``parallel_decoding``): learned
query embeddings stand in for the action tokens, and one pass predicts every token at once. Either
way the chunk's log-prob is the sum of its tokens' log-probs over the bins, and the entropy the sum
of the per-token categorical entropies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributions import Categorical

from policies.vla.action_tokens import ActionTokenizer
from policies.vla.backbone import VisionLanguageBackbone


@dataclass
class Prefix:
    """The prompt as the text model sees it: embeddings [B, L, hidden] and their mask [B, L]."""

    embeddings: torch.Tensor
    mask: torch.Tensor

    @property
    def positions(self) -> torch.Tensor:
        """Position ids that skip padding: [B, L]."""
        return positions_of(self.mask)

    def extended(self, follow: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(embeddings, mask, positions) of the prefix followed by ``follow`` [B, K, hidden]."""
        ones = torch.ones(follow.shape[:2], dtype=self.mask.dtype, device=self.mask.device)
        mask = torch.cat([self.mask, ones], dim=1)
        return torch.cat([self.embeddings, follow], dim=1), mask, positions_of(mask)


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


@dataclass
class TokenDecoding:
    bins: torch.Tensor  # long [B, slots]
    log_prob: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B]
    prefix_hidden: torch.Tensor  # [B, hidden]: the last prefix position's state (for the value head)


class TokenActionHead(nn.Module):
    """Decodes ``slots`` action tokens after a prefix; scores given ones by teacher forcing."""

    def __init__(
        self, backbone: VisionLanguageBackbone, tokens: ActionTokenizer, slots: int, parallel: bool
    ) -> None:
        super().__init__()
        self.tokens, self.slots, self.parallel = tokens, slots, parallel
        self.register_buffer("token_ids", tokens.ids, persistent=False)
        if parallel:
            self.queries = nn.Parameter(torch.randn(slots, backbone.hidden_size) * 0.02)

    def _inputs_after_prefix(self, backbone: VisionLanguageBackbone, bins: torch.Tensor) -> torch.Tensor:
        """What follows the prefix in one teacher-forced pass: the queries (parallel), or the chosen
        tokens but the last (autoregressive: token i is read where token i+1 is predicted)."""
        if self.parallel:
            return self.queries.unsqueeze(0).expand(bins.shape[0], -1, -1)
        return backbone.embed_tokens(self.tokens.token_ids(bins[:, :-1]))

    def _teacher_forced(
        self, backbone: VisionLanguageBackbone, prefix: Prefix, bins: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass over prefix + action inputs: the bins' logits [B, slots, bins] and the last prefix
        position's hidden state [B, hidden]."""
        follow = self._inputs_after_prefix(backbone, bins).to(prefix.embeddings.dtype)
        hidden, _ = backbone.run(*prefix.extended(follow))
        length = prefix.embeddings.shape[1]
        start = length if self.parallel else length - 1
        logits = backbone.token_logits(hidden[:, start : start + self.slots], self.token_ids)
        return logits, hidden[:, length - 1]

    def score(self, backbone: VisionLanguageBackbone, prefix: Prefix, bins: torch.Tensor) -> TokenDecoding:
        """Log-prob and entropy of given bins [B, slots]."""
        logits, prefix_hidden = self._teacher_forced(backbone, prefix, bins)
        dist = Categorical(logits=logits)
        return TokenDecoding(bins, dist.log_prob(bins).sum(-1), dist.entropy().sum(-1), prefix_hidden)

    @torch.no_grad()
    def decode(self, backbone: VisionLanguageBackbone, prefix: Prefix, greedy: bool) -> TokenDecoding:
        """Sample (or take the most likely) bins for every slot."""
        if self.parallel:
            return self._decode_parallel(backbone, prefix, greedy)
        hidden, cache = backbone.run(prefix.embeddings, prefix.mask, prefix.positions, use_cache=True)
        prefix_hidden, last = hidden[:, -1], hidden[:, -1]
        mask, position = prefix.mask, prefix.positions[:, -1:]
        chosen, log_probs, entropies = [], [], []
        for slot in range(self.slots):
            dist = Categorical(logits=backbone.token_logits(last, self.token_ids))
            bins = dist.probs.argmax(-1) if greedy else dist.sample()
            chosen.append(bins)
            log_probs.append(dist.log_prob(bins))
            entropies.append(dist.entropy())
            if slot == self.slots - 1:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            position = position + 1
            step = backbone.embed_tokens(self.tokens.token_ids(bins)).unsqueeze(1)
            hidden, cache = backbone.run(step, mask, position, cache=cache, use_cache=True)
            last = hidden[:, -1]
        return TokenDecoding(
            torch.stack(chosen, 1),
            torch.stack(log_probs, 1).sum(-1),
            torch.stack(entropies, 1).sum(-1),
            prefix_hidden,
        )

    def _decode_parallel(
        self, backbone: VisionLanguageBackbone, prefix: Prefix, greedy: bool
    ) -> TokenDecoding:
        placeholder = torch.zeros(
            prefix.embeddings.shape[0], self.slots, dtype=torch.long, device=prefix.mask.device
        )
        logits, prefix_hidden = self._teacher_forced(backbone, prefix, placeholder)  # bins unused: queries
        dist = Categorical(logits=logits)
        bins = dist.probs.argmax(-1) if greedy else dist.sample()
        return TokenDecoding(bins, dist.log_prob(bins).sum(-1), dist.entropy().sum(-1), prefix_hidden)

    def imitation_loss(
        self,
        backbone: VisionLanguageBackbone,
        prefix: Prefix,
        unit_targets: torch.Tensor,
        valid: torch.Tensor,
    ) -> torch.Tensor:
        """Cross-entropy of the targets' bins ([B, chunk, A] in [-1, 1]) over the valid chunk steps."""
        bins = self.tokens.bins_of(unit_targets).flatten(1)
        logits, _ = self._teacher_forced(backbone, prefix, bins)
        per_token = nn.functional.cross_entropy(logits.flatten(0, 1), bins.flatten(), reduction="none")
        weights = valid.float().repeat_interleave(unit_targets.shape[-1], dim=1).flatten()
        return (per_token * weights).sum() / weights.sum().clamp(min=1.0)
