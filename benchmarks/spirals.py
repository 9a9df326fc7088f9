"""An embedded image task on which more training keeps paying: ten interleaved spiral arms.

Digits saturates within a few epochs, so it cannot show what reusing training buys. Here each
8x8 "image" is a fixed random linear picture of a point in a disk plus four nuisance latents
and pixel noise; its class is the spiral arm the point lies on (``TURNS`` turns, ten arms).
The network has to undo the picture and then learn a decision boundary that winds around the
centre: its validation accuracy climbs for dozens of epochs, with a widening gap to the
training accuracy, the way a real network's does on a large data set. Everything is drawn
from a fixed seed (numpy's PCG64), so every process builds the same data without a download.

``train`` is the built-in DDP classifier (:mod:`atoll.objectives.classifier`) on this data:
checkpoints, inherited weights, pausing and promotion all work as they do there. The data set
is registered as ``spirals`` with the classifier's data sets
(:func:`atoll.objectives.data.register`) when this module is imported (a benchmark task, not
a data set Atoll ships).
"""

from __future__ import annotations

import numpy as np
import torch

from atoll.objectives import classifier
from atoll.objectives import data as datasets

NAME = "spirals"
SIZES = {"train": 7500, "test": 1500}
TURNS = 1.0
CLASSES = 10
NUISANCE = 4
NOISE = 0.1
SEED = 20261126


def build(split: str) -> datasets.ImageSet:
    """One split, the same in every process (the test split from its own stream)."""
    rng = np.random.default_rng([SEED, list(SIZES).index(split)])
    n = SIZES[split]
    radius, angle = np.sqrt(rng.random(n)), rng.random(n) * 2 * np.pi
    labels = np.floor((angle / (2 * np.pi) + TURNS * radius) * CLASSES).astype(np.int64) % CLASSES
    latents = np.column_stack([radius * np.cos(angle), radius * np.sin(angle),
                               0.5 * rng.standard_normal((n, NUISANCE))])
    picture = np.random.default_rng(SEED).standard_normal((latents.shape[1], 64))
    pixels = latents @ picture + NOISE * rng.standard_normal((n, 64))
    pixels = (pixels - pixels.mean()) / pixels.std()
    images = torch.as_tensor(pixels, dtype=torch.float32).view(n, 1, 8, 8).contiguous()
    return datasets.ImageSet(images, torch.as_tensor(labels), CLASSES)


datasets.register(NAME, build)
train = classifier.train
"""The classifier's objective (its preflight too: it knows the registered ``spirals``)."""
