"""Helpers shared by several chapters' property judges."""

from __future__ import annotations

import torch

ATOL, RTOL = 1e-5, 1e-4


def assert_weight_rows(where: str, weights: torch.Tensor, mask: torch.Tensor | None, rows: str) -> None:
    """Each row of ``weights`` (the last axis) is a probability distribution that puts exactly 0 where
    ``mask`` is False. ``rows`` says in the failure message what a row is, e.g. "each query's weights must
    sum to 1 over the keys (last axis)"."""
    assert not weights.isnan().any(), f"{where}: weights contain NaN"
    assert (weights >= 0).all(), f"{where}: some weights are negative"
    sums = weights.double().sum(dim=-1)
    worst = float((sums - 1).abs().max())
    assert worst <= ATOL * weights.shape[-1] + RTOL, (
        f"{where}: {rows}, but a row sums to {float(sums.flatten()[(sums - 1).abs().argmax()]):.6g}: "
        "normalise with a softmax over the last axis, and apply the mask before the softmax")
    if mask is not None:
        leak = weights.masked_select(~mask.expand(weights.shape))
        assert (leak == 0).all(), (
            f"{where}: a masked position (mask False) got weight {float(leak.abs().max()):.3g}; it must be "
            "exactly 0: set masked scores to -inf before the softmax (True = may attend)")
