"""scikit-learn's bundled 8×8 digits (no download), a fixed split, and the same digits rotated."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdiff.demo.config import DemoConfig


@dataclass(frozen=True)
class Digits:
    """Images flattened to 64 float32 features in [0, 1]; the rotated sets hold the same digits turned."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    rotated_train_x: np.ndarray
    rotated_test_x: np.ndarray
    rotation_degrees: int

    @property
    def train_rows(self) -> int:
        return len(self.train_y)


def rotate(images: np.ndarray, quarter_turns: int) -> np.ndarray:
    """(N, 8, 8) images turned counter-clockwise by 90° × ``quarter_turns`` (exact: a permutation)."""
    return np.ascontiguousarray(np.rot90(images, quarter_turns, axes=(1, 2)))


def load(config: DemoConfig) -> Digits:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)  # pixel values 0..16
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(config.seed).permutation(len(labels))
    test, train = order[: config.test_size], order[config.test_size:]
    if config.train_limit is not None:
        train = train[: config.train_limit]
    rotated = rotate(images, config.rotation)

    def flat(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.reshape(len(a), -1))

    return Digits(
        train_x=flat(images[train]), train_y=labels[train], test_x=flat(images[test]), test_y=labels[test],
        rotated_train_x=flat(rotated[train]), rotated_test_x=flat(rotated[test]),
        rotation_degrees=90 * (config.rotation % 4),
    )
