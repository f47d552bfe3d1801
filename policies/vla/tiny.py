"""``tiny:<family>``: randomly initialised backbones of the real transformers classes at about a
million parameters, with a small byte-level BPE tokenizer and a SigLIP image processor, so tests and CPU runs
never need a download. ``save_tiny`` writes one in Hugging Face layout, for the real loading path."""

from __future__ import annotations

from pathlib import Path

TINY_IMAGE_SIZE = 64
TINY_VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2)
TINY_TEXT = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4)
FAMILIES = ("llava-llama", "llava-qwen2", "paligemma")
IMAGE_TOKEN = "<image>"


# The words the tiny tokenizer learns whole (as a real tokenizer has " red" and " cube" as tokens):
# the prompt, our tasks' instructions and state-field names. Anything else falls back to bytes.
TINY_WORDS = (  # noqa: SIM905 (one readable line of words)
    "in out what action should the robot take to lift pick up place put push move open close turn "
    "press reach it and on of from a red green blue yellow orange purple white black cube block "
    "plate target goal drawer door button gripper joint pos vel tcp quat width rel left right"
).split()
TINY_CORPUS = (
    "In: What action should the robot take to lift the red cube?\nOut:",
    *(f"{word} {word.capitalize()} the {word}" for word in TINY_WORDS),
)


def word_tokenizer(action_bins: int):
    """A byte-level BPE tokenizer whose merges spell :data:`TINY_WORDS` whole (trained on a fixed
    corpus, so it is the same every time): pad/bos/eos, the image token, then ``action_bins``
    action tokens at the end of the vocabulary (where OpenVLA puts them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(TINY_CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, pad_token="<pad>", bos_token="<s>", eos_token="</s>", padding_side="left"
    )
    tokenizer.add_tokens([IMAGE_TOKEN], special_tokens=True)
    tokenizer.add_tokens([f"<action_{i}>" for i in range(action_bins)], special_tokens=True)
    return tokenizer


def tiny_model(family: str, vocab_size: int, image_token_id: int):
    """A randomly initialised model of ``family``'s classes."""
    from transformers import (
        GemmaConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        Qwen2Config,
        SiglipVisionConfig,
    )

    if family not in FAMILIES:
        raise ValueError(f"policy.vla.backbone=tiny:{family}: unknown family; known: {list(FAMILIES)}")
    vision = SiglipVisionConfig(**TINY_VISION, image_size=TINY_IMAGE_SIZE, patch_size=16)
    text = dict(TINY_TEXT, vocab_size=vocab_size, max_position_embeddings=512)
    if family == "paligemma":
        text_config = GemmaConfig(**text, num_key_value_heads=1, head_dim=32)
        config = PaliGemmaConfig(
            vision_config=vision,
            text_config=text_config,
            image_token_index=image_token_id,
            projection_dim=text_config.hidden_size,
        )
        return PaliGemmaForConditionalGeneration(config)
    text_class = LlamaConfig if family == "llava-llama" else Qwen2Config
    config = LlavaConfig(
        vision_config=vision,
        text_config=text_class(**text, num_key_value_heads=2),
        image_token_index=image_token_id,
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
    )
    return LlavaForConditionalGeneration(config)


def tiny_backbone(family: str, action_bins: int):
    """(model, tokenizer, image processor) of a tiny ``family`` backbone."""
    import transformers

    tokenizer = word_tokenizer(action_bins)
    model = tiny_model(family, len(tokenizer), tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))
    # The PIL flavour where transformers has one: the other wants torchvision, which we do not need
    # (the policy applies the processor's resize and normalisation to tensors itself).
    processor_class = (
        getattr(transformers, "SiglipImageProcessorPil", None) or transformers.SiglipImageProcessor
    )
    processor = processor_class(size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE})
    return model, tokenizer, processor


def save_tiny(path: str | Path, family: str = "llava-llama", action_bins: int = 256) -> Path:
    """Write a tiny backbone as a Hugging Face model folder (config, safetensors, tokenizer, processor)."""
    path = Path(path)
    model, tokenizer, processor = tiny_backbone(family, action_bins)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    processor.save_pretrained(path)
    return path
