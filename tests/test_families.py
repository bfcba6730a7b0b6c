"""The shared case families (solutions/cases/families.py) build what their docstrings promise."""

import torch

from solutions.cases import families as F


def test_dtype_matrix_has_the_four_floating_types_and_their_tolerances():
    assert set(F.DTYPES) == set(F.TOLERANCES) == {"float16", "bfloat16", "float32", "float64"}
    g = torch.Generator().manual_seed(0)
    assert F.randn(g, 3, 4, dtype="bfloat16").dtype == torch.bfloat16
    assert F.tag("x", "float32") == "x" and F.tag("x", torch.float16) == "x (float16)"


def test_layouts_keep_values_and_break_contiguity():
    x = torch.arange(12.0).reshape(3, 4)
    nc = F.non_contiguous(x)
    assert torch.equal(nc, x) and not nc.is_contiguous()
    e = F.expanded(x, 5)
    assert e.shape == (5, 3, 4) and e.stride(0) == 0


def test_every_mask_broadcasts_and_keeps_a_key_per_row():
    g = torch.Generator().manual_seed(1)
    masks = F.mask_broadcasts(g, (2, 3), 4, 6)
    assert len(masks) == 9 and len({label for label, _ in masks}) == 9
    for label, m in masks:
        assert m.dtype == torch.bool, label
        full = m.expand(2, 3, 4, 6)
        assert full.any(dim=-1).all(), label
    assert len(F.mask_broadcasts(g, (), 4, 6)) == 4


def test_extreme_scores_are_what_they_say():
    g = torch.Generator().manual_seed(2)
    assert (F.extreme_scores(g, 5, 7, kind="very_negative") < -100).all()
    huge = F.extreme_scores(g, 5, 7, kind="huge", dtype="float16")
    assert huge.isfinite().all() and huge.abs().max() > 1e3
    dom = F.extreme_scores(g, 5, 7, kind="dominant")
    top2 = dom.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1] >= 59).all()
    assert F.extreme_scores(g, 5, 7, kind="near_uniform").abs().max() < 1e-2
    m = torch.tensor([True, False])
    filled = F.fill_masked(torch.zeros(3, 2), m, float("inf"))
    assert torch.isinf(filled[:, 1]).all() and (filled[:, 0] == 0).all()
