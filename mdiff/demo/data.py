"""The task: scikit-learn's bundled 8×8 digits (no download) written as text, and its tokenizer.

Each image becomes a sentence of eight words, one per pixel row, a pixel being ``#`` where its ink
is at least half the maximum and ``.`` elsewhere — the digit 0 reads
``...##... ..####.. ..#..##. …``. So a row is one of 256 words, and the vocabulary is those words
and BERT's five special tokens: the model reads the digits through an ordinary transformers
tokenizer, which is saved beside its weights and versioned with them.

The fine-tuning domain is the same digits one pixel lower (the top row blank, the bottom row cut
off): every sentence starts with ``........`` and each row's word sits one position later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdiff.demo.config import DemoConfig

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROW_WORDS = tuple("".join("#" if bits >> (7 - i) & 1 else "." for i in range(8)) for bits in range(256))
VOCABULARY = SPECIAL_TOKENS + ROW_WORDS
SEQUENCE_LENGTH = 10  # [CLS], eight rows, [SEP]


@dataclass(frozen=True)
class Digits:
    """The held-out and training digits as sentences, upright and shifted (the same images, the same labels)."""

    train_text: list[str]
    train_shifted_text: list[str]
    train_labels: np.ndarray
    test_text: list[str]
    test_shifted_text: list[str]
    test_labels: np.ndarray


def image_text(image: np.ndarray) -> str:
    """An 8×8 image (pixel values 0..16) as its eight row words."""
    return " ".join("".join("#" if value >= 8 else "." for value in row) for row in image)


def shift_down(images: np.ndarray) -> np.ndarray:
    """(N, 8, 8) images moved one pixel down: the top row blank, the bottom row dropped."""
    shifted = np.zeros_like(images)
    shifted[:, 1:] = images[:, :-1]
    return shifted


def load(config: DemoConfig) -> Digits:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images, labels = bunch.images, bunch.target.astype(np.int64)
    order = np.random.default_rng(config.seed).permutation(len(labels))
    test, train = order[: config.test_size], order[config.test_size:]
    shifted = shift_down(images)
    return Digits(
        train_text=[image_text(images[i]) for i in train], train_shifted_text=[image_text(shifted[i]) for i in train],
        train_labels=labels[train],
        test_text=[image_text(images[i]) for i in test], test_shifted_text=[image_text(shifted[i]) for i in test],
        test_labels=labels[test],
    )


def build_tokenizer():
    """A word-level BERT-style tokenizer over :data:`VOCABULARY`: ``[CLS] row₁ … row₈ [SEP]``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    ids = {token: i for i, token in enumerate(VOCABULARY)}
    tokenizer = Tokenizer(models.WordLevel(ids, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=SEQUENCE_LENGTH)


def encode(tokenizer, texts: list[str]):
    """The token ids of ``texts``, a (len(texts), SEQUENCE_LENGTH) int64 tensor."""
    return tokenizer(texts, return_tensors="pt")["input_ids"]
