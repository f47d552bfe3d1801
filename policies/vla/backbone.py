"""The vision-language backbone: a Hugging Face model that composes a SigLIP vision tower with a
Llama / Qwen2 / Gemma text model (LLaVA, PaliGemma), its tokenizer and its image processor.

``load_backbone`` takes ``tiny:<family>`` (a random model of the real classes, see
:mod:`policies.vla.tiny`) or a local folder in Hugging Face layout, loaded with ``from_pretrained``
and never downloaded. :class:`VisionLanguageBackbone` exposes what the action heads use: image
and token embeddings, the text model over a sequence of embeddings (with a KV cache), and the
language-model head's rows for chosen tokens.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from policies.vla.tiny import tiny_backbone
from protos.user_error import UserError

MODEL_TYPES = ("llava", "paligemma")


class BackboneError(UserError, ValueError):
    """A backbone that cannot be used, said in one line naming ``policy.vla.backbone``."""


def _model_class(model_type: str):
    from transformers import LlavaForConditionalGeneration, PaliGemmaForConditionalGeneration

    return {"llava": LlavaForConditionalGeneration, "paligemma": PaliGemmaForConditionalGeneration}[
        model_type
    ]


def load_backbone(source: str, action_bins: int, weights: bool = True) -> tuple[Any, Any, Any]:
    """(model, tokenizer, image processor) from ``tiny:<family>`` or a local model folder.

    ``weights=False`` builds the model from the folder's config only (its weights come from a
    saved policy next)."""
    if source.startswith("tiny:"):
        try:
            return tiny_backbone(source.removeprefix("tiny:"), action_bins)
        except ValueError as exc:
            raise BackboneError(str(exc)) from None
    from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

    folder = Path(source)
    where = f"policy.vla.backbone={source!r}"
    if not (folder / "config.json").is_file():
        raise BackboneError(f"{where}: not a model directory (expected config.json in Hugging Face layout)")
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    if config.model_type not in MODEL_TYPES:
        raise BackboneError(f"{where}: model type {config.model_type!r} is not one of {list(MODEL_TYPES)}")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise BackboneError(f"{where}: no tokenizer in the folder (tokenizer.json / tokenizer_config.json)")
    if not (folder / "preprocessor_config.json").is_file():
        raise BackboneError(f"{where}: no image processor in the folder (preprocessor_config.json)")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # The PIL flavour: only its config is read (the policy resizes and normalises tensors itself).
    processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True, backend="pil")
    cls = _model_class(config.model_type)
    if weights:
        model = cls.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    else:
        model = cls(config)
    return model, tokenizer, processor


@dataclass(frozen=True)
class ImagePreprocessing:
    """What the image processor does, done on batched tensors on the policy's device."""

    height: int
    width: int
    resize: bool
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale: float

    @classmethod
    def of(cls, processor: Any) -> ImagePreprocessing:
        size = processor.size
        height, width = (size["height"], size["width"]) if "height" in size else (size["shortest_edge"],) * 2
        return cls(
            int(height),
            int(width),
            bool(processor.do_resize),
            tuple(processor.image_mean),
            tuple(processor.image_std),
            float(processor.rescale_factor),
        )

    def __call__(self, images: torch.Tensor, camera: str) -> torch.Tensor:
        """uint8 [B, H, W, 3] -> normalised float [B, 3, height, width]."""
        x = images.permute(0, 3, 1, 2).float() * self.rescale
        if tuple(x.shape[-2:]) != (self.height, self.width):
            if not self.resize:
                raise ValueError(
                    f"camera {camera!r} gives {list(images.shape[1:3])} images; the backbone's image "
                    f"processor takes [{self.height}, {self.width}] and does not resize"
                )
            x = nn.functional.interpolate(x, size=(self.height, self.width), mode="bilinear", antialias=True)
        mean = torch.tensor(self.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std


class VisionLanguageBackbone(nn.Module):
    """A LLaVA / PaliGemma model seen as: image embeddings, token embeddings, the text model over
    embeddings, and language-model logits for chosen token ids."""

    def __init__(self, model: Any, tokenizer: Any, processor: Any) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.image_processor = processor
        self.preprocess = ImagePreprocessing.of(processor)
        self.hidden_size = int(model.config.text_config.hidden_size)
        self.vocab_size = min(len(tokenizer), int(model.config.text_config.vocab_size))

    @property
    def text_model(self) -> nn.Module:
        return self.model.model.language_model

    def embed_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[N, 3, H, W] -> [N, patches, hidden] in the text model's embedding space."""
        features = self.model.model.get_image_features(pixel_values=pixel_values)
        pooled = getattr(features, "pooler_output", features)
        return torch.stack(list(pooled)) if isinstance(pooled, (list, tuple)) else pooled

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings()(ids)

    def run(
        self,
        embeddings: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, Any]:
        """The text model over ``embeddings`` [B, L, hidden] (after ``cache``, if given): the last
        hidden states [B, L, hidden] (float32) and the grown cache (with ``use_cache``)."""
        out = self.text_model(
            inputs_embeds=embeddings.to(self.dtype),
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            **{self._cache_keyword: cache},
        )
        return out.last_hidden_state.float(), out.get(self._cache_keyword)

    @functools.cached_property
    def _cache_keyword(self) -> str:
        """transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name goes in 5.40)."""
        base = getattr(self.text_model, "get_base_model", lambda: self.text_model)()  # under peft
        return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"

    def token_logits(self, hidden: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        """Logits of ``token_ids`` only: [..., hidden] -> [..., len(token_ids)] (float32)."""
        head = self.model.get_output_embeddings()
        weight = head.weight[token_ids].float()
        logits = hidden.float() @ weight.T
        if getattr(head, "bias", None) is not None:
            logits = logits + head.bias[token_ids].float()
        return logits

    @property
    def dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    def tokenize(
        self, texts: list[str], max_tokens: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Instruction prompts -> left-padded ids and attention mask, [B, L] each."""
        batch = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=max_tokens,
            return_tensors="pt",
            padding_side="left",
        )
        return batch["input_ids"].to(device), batch["attention_mask"].to(device)
