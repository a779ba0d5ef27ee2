"""Workload generators shared by the examples, the benchmark and the tests."""

from __future__ import annotations

import numpy as np


def zipf_matrix(G: int, mean_pair_bytes: int, exponent: float = 1.1, seed: int = 0) -> np.ndarray:
    """A skewed All-to-Allv byte matrix (e.g. MoE token counts): pair sizes follow a Zipf law over a
    random ranking of the G(G-1) pairs, scaled so the mean pair moves ``mean_pair_bytes``."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, G * (G - 1) + 1) ** exponent
    rng.shuffle(weights)
    sizes = np.round(weights / weights.mean() * mean_pair_bytes).astype(np.int64)
    mat = np.zeros((G, G), dtype=np.int64)
    mat[~np.eye(G, dtype=bool)] = sizes
    return mat
