"""One check for every chapter's case generators (``solutions/cases/<slug>.py``): a generator gives at least
one case, every case has a label of its own, and the same seed gives the same cases, field by field
(arguments, keyword arguments, module state, gradients, bounds...), so a hidden test is reproducible."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch


def same(a, b) -> bool:
    """Equal in value and kind, recursively; NaN equals NaN (some cases feed NaN on purpose)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.is_floating_point() or a.is_complex():
            nan = a.isnan()
            return torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0))
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, torch.Generator):
        return torch.equal(a.get_state(), b.get_state())
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def assert_generator_is_deterministic_and_labelled(generator, seed: int, params: dict | None = None) -> None:
    params = params or {}
    name = f"{generator.__name__}({params})"
    first, second = generator(seed=seed, **params), generator(seed=seed, **params)
    assert first, f"{name} made no cases"
    labels = [c.label for c in first]
    assert all(labels) and len(set(labels)) == len(labels), f"{name}: every case needs a label of its own"
    assert len(first) == len(second), f"{name}: seed {seed} gave {len(first)} cases, then {len(second)}"
    for a, b in zip(first, second):
        assert same(a, b), f"{name}: case {a.label!r} differs between two runs with seed {seed}"
