"""Helpers shared by several chapters' reference modules (not an exercise of any chapter)."""

from __future__ import annotations

import numpy as np
import torch


def check_mask(mask: torch.Tensor, shape: tuple[int, ...] | torch.Size) -> None:
    """Raise ``TypeError`` unless ``mask`` is a bool tensor (True = may attend), ``ValueError`` unless it
    broadcasts to the scores' ``shape``.

    Shapes are compared with numpy's broadcasting rules: ``torch.broadcast_shapes`` imports its
    symbolic-shape machinery on first use (about 70 MB), which a memory-bounded check would count.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {kind}")
    shape = tuple(shape)
    try:
        fits = np.broadcast_shapes(tuple(mask.shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not fit the scores {shape}: it does not "
                         "broadcast to them")
