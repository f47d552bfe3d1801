"""The tokenizer of the ``tiny:<family>`` models: a small byte-level BPE that spells our tasks' words
whole, so tests and CPU runs never need a download (the families build their tiny models
themselves: :mod:`policies.vla.openvla.policy`, :mod:`policies.vla.pi.policy`,
:mod:`policies.vla.smolvla.policy`)."""

from __future__ import annotations

IMAGE_TOKEN = "<image>"


# The words the tiny tokenizer learns whole (as a real tokenizer has " red" and " cube" as tokens):
# the prompts, our tasks' instructions and state-field names, and the numbers 0-255 that π0.5
# writes its discretised state in (so a 44-dim state is ~60 tokens, not 175). Anything else falls
# back to bytes.
TINY_WORDS = (  # noqa: SIM905 (one readable line of words)
    "in out what action should the robot take to lift pick up place put push move open close turn "
    "press reach it and on of from a red green blue yellow orange purple white black cube block "
    "plate target goal drawer door button gripper joint pos vel tcp quat width rel left right "
    "task state"
).split() + [str(number) for number in range(256)]
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
        vocab_size=1500,
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
