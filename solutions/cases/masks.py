"""Hidden-test cases and property judges for chapter 4 (masks).

Masks are compared exactly (bool dtype and values), so a float or an integer mask fails even where its
values are right: PyTorch reads a float ``attn_mask`` as numbers *added* to the scores, not as a mask.
``masked_softmax`` is checked forward and backward (``grad_output`` cases), so a version whose output
looks right but whose gradient is NaN on fully masked rows fails. ``causal_attention`` is checked against
the reference and by a property that holds for every causal model whatever its arithmetic: changing the
tokens after position ``t`` leaves the outputs before ``t`` unchanged (:func:`does_not_see_the_future`).
"""

from __future__ import annotations

import torch

from grader.checks import Case

#: Tolerances of the no-leak judge: outputs before the change must agree to float32 rounding.
ATOL, RTOL = 1e-5, 1e-5


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype) * scale


# ---------------------------------------------------------------------------------------------------
# causal_mask, padding_mask, attention_mask


def causal_mask_cases(seed: int) -> list[Case]:
    del seed  # masks are deterministic; the seed is part of the check's signature only
    return [
        Case(args=(1,), label="T=1"),
        Case(args=(2,), label="T=2"),
        Case(args=(5,), label="odd T=5"),
        Case(args=(8,), kwargs={"device": "cpu"}, label="T=8, device='cpu'"),
        Case(args=(6, None), label="T=6, device=None passed positionally"),
    ]


def padding_mask_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(torch.tensor([3, 5, 1]), 5), label="lengths [3, 5, 1], T=5"),
        Case(args=(torch.tensor([2, 4]), 6), label="lengths [2, 4], T=6: no sequence fills T"),
        Case(args=(torch.tensor([0, 2, 4]), 4), label="lengths [0, 2, 4], T=4: an empty sequence"),
        Case(args=(torch.tensor([1]), 1), label="one sequence of length 1, T=1"),
        Case(args=(torch.tensor([7, 7]), 7), label="no padding: lengths [7, 7], T=7"),
        Case(args=(torch.randint(0, 10, (6,), generator=g), 9),
             label="six random lengths in 0..9, T=9"),
        Case(args=(torch.tensor([2, 3], dtype=torch.int32), 4), label="int32 lengths [2, 3], T=4"),
    ]


def attention_mask_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(args=(torch.tensor([3, 5]), 5), label="lengths [3, 5], T=5, causal default (False)"),
        Case(args=(torch.tensor([3, 5]), 5, True), label="lengths [3, 5], T=5, causal=True"),
        Case(args=(torch.tensor([2, 6, 4]), 6), kwargs={"causal": True},
             label="lengths [2, 6, 4], T=6, causal=True as keyword"),
        Case(args=(torch.tensor([2, 4]), 7), kwargs={"causal": False},
             label="lengths [2, 4], T=7 (no sequence fills T), causal=False"),
        Case(args=(torch.tensor([1]), 1, True), label="one sequence, T=1, causal"),
        Case(args=(torch.tensor([0, 3]), 3, True), label="an empty sequence (length 0), T=3, causal"),
        Case(args=(torch.randint(1, 9, (4,), generator=g), 8, True), label="four random lengths, T=8, causal"),
    ]


# ---------------------------------------------------------------------------------------------------
# masked_softmax


def _random_mask(g: torch.Generator, *shape: int, p_keep: float = 0.5) -> torch.Tensor:
    return torch.rand(*shape, generator=g) < p_keep


def _with_empty_rows(g: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """A random ``(rows, cols)`` mask in which row 1 is fully masked and row 0 is full."""
    mask = _random_mask(g, rows, cols)
    mask[0] = True
    mask[1] = False
    return mask


def _lengths_mask(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)


def masked_softmax_cases(seed: int, grad: bool = False) -> list[Case]:
    """Forward cases, or (``grad=True``) the same kinds of inputs with a ``grad_output``."""
    g = torch.Generator().manual_seed(seed)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()

    def case(scores: torch.Tensor, mask: torch.Tensor, label: str, **kwargs) -> Case:
        if not grad:
            return Case(args=(scores, mask), kwargs=kwargs, label=label)
        return Case(args=(scores, mask), kwargs=kwargs, grad_output=_randn(g, *scores.shape, dtype=scores.dtype),
                    label=f"{label}; backward pass: output[0] is the result, output[1][0] the gradient "
                          "with respect to scores")

    garbage = _randn(g, 3, 6)
    garbage_mask = _lengths_mask([4, 6, 2], 6)
    garbage[~garbage_mask] = 1e4  # huge scores in the padding: they must not matter
    cases = [
        case(_randn(g, 4, 6), _with_empty_rows(g, 4, 6), "(4, 6) random mask; row 1 fully masked"),
        case(_randn(g, 2, 3, 5, 5), causal, "(B=2, H=3, 5, 5) scores, (5, 5) causal mask broadcast"),
        case(_randn(g, 3, 2, 4, 6), _lengths_mask([4, 0, 6], 6)[:, None, None, :],
             "(B=3, H=2, 4, 6) with a (B, 1, 1, T) key-padding mask; sequence 1 is empty (every row masked)"),
        case(_randn(g, 5, 4), _with_empty_rows(g, 4, 5).T.clone(), "distributions along dim=0", dim=0),
        case(_randn(g, 2, 6, 3), _random_mask(g, 2, 6, 3), "(2, 6, 3) along dim=-2", dim=-2),
        case(_randn(g, 3, 7), torch.ones(3, 7, dtype=torch.bool), "nothing masked: plain softmax"),
        case(_randn(g, 2, 4), torch.zeros(2, 4, dtype=torch.bool), "everything masked: all zeros"),
        case(garbage, garbage_mask, "padding holds huge scores (1e4) that must be ignored"),
        case(_randn(g, 4, 5, scale=1e3), _with_empty_rows(g, 4, 5),
             "large scores (~1e3): no overflow, one row fully masked"),
        case(_randn(g, 3, 5, dtype=torch.float64), _with_empty_rows(g, 3, 5), "float64, one row fully masked"),
    ]
    return cases


# ---------------------------------------------------------------------------------------------------
# causal_attention


def causal_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T: int, d_k: int, d_v: int, label: str, scale: float = 1.0,
             dtype: torch.dtype = torch.float32) -> Case:
        q, k = _randn(g, *batch, T, d_k, scale=scale, dtype=dtype), _randn(g, *batch, T, d_k, scale=scale, dtype=dtype)
        return Case(args=(q, k, _randn(g, *batch, T, d_v, dtype=dtype)), label=label)

    return [
        case((), 5, 4, 4, "one sequence, T=5, d_k=d_v=4"),
        case((2,), 6, 8, 3, "batch of 2, T=6, d_k=8, d_v=3"),
        case((2, 3), 7, 4, 5, "(B=2, H=3) heads, T=7, d_k=4, d_v=5"),
        case((3,), 1, 4, 2, "T=1: a single token attends to itself"),
        case((2,), 4, 16, 4, "large scores (entries ~4)", scale=4.0),
        case((2,), 5, 6, 6, "float64", dtype=torch.float64),
    ]


def future_change_pairs_cases(seed: int) -> list[Case]:
    """Pairs (cases 2i, 2i+1): the same q, k, v up to position ``t``, different from ``t`` on."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for batch, T, d_k, d_v, t in [((), 6, 4, 3, 1), ((2,), 8, 8, 4, 4), ((2, 2), 5, 4, 4, 3), ((2,), 7, 6, 5, 6)]:
        q, k, v = _randn(g, *batch, T, d_k), _randn(g, *batch, T, d_k), _randn(g, *batch, T, d_v)
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for x in (q2, k2, v2):
            x[..., t:, :] = _randn(g, *x[..., t:, :].shape, scale=3.0)
        label = f"batch {batch}, T={T}, d_k={d_k}, d_v={d_v}"
        cases.append(Case(args=(q, k, v), label=f"{label}: original tokens"))
        cases.append(Case(args=(q2, k2, v2), label=f"{label}: tokens {t}..{T - 1} replaced"))
    return cases


def _first_change(a: torch.Tensor, b: torch.Tensor) -> int:
    """The first position along T where two ``(..., T, d)`` tensors differ."""
    differs = (a != b).reshape(-1, *a.shape[-2:]).any(dim=0).any(dim=-1)  # (T,)
    return int(differs.int().argmax())


def does_not_see_the_future(cases: list[Case], outputs: list) -> None:
    """Outputs at the positions before the first changed token are the same in both cases of a pair."""
    for i in range(0, len(cases), 2):
        (q, _, v), (q2, _, _) = cases[i].args, cases[i + 1].args
        out, out2 = outputs[i], outputs[i + 1]
        where = f"case '{cases[i + 1].label}'"
        expected = (*q.shape[:-1], v.shape[-1])
        for o in (out, out2):
            assert isinstance(o, torch.Tensor), f"{where}: should return the output tensor"
            assert tuple(o.shape) == expected, \
                f"{where}: the output has shape {tuple(o.shape)}, expected (..., T, d_v) = {expected}"
        t = _first_change(q, q2)
        before, before2 = out[..., :t, :], out2[..., :t, :]
        assert not before.isnan().any() and not before2.isnan().any(), f"{where}: the output contains NaN"
        if not torch.allclose(before, before2, atol=ATOL, rtol=RTOL):
            worst = (before - before2).abs().amax(dim=-1).reshape(-1, t).amax(dim=0)  # (t,)
            pos = int(worst.argmax())
            raise AssertionError(
                f"{where}: changing only the tokens at positions {t} and later changed the output at position "
                f"{pos} by {float(worst[pos]):.3g}: position {pos} sees the future. A causal mask must let "
                f"query i attend to keys j <= i only (True on and below the diagonal); a `triu(..., "
                f"diagonal=1)` mask marks the future, which is what nn.MultiheadAttention wants (True = "
                f"blocked) and the opposite of what F.scaled_dot_product_attention reads (True = attend)")
