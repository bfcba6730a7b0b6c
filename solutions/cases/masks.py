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
from solutions.cases.families import (
    DTYPES,
    LONG_LENGTHS,
    expanded,
    extreme_scores,
    far_below_qk,
    fill_masked,
    mask_broadcasts,
    non_contiguous,
    randn,
    tag,
)

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
        # lengths past fixed lookup tables; (T, T) stays under the results wire's 2,000,000 elements
        *[Case(args=(T,), label=f"long T={T}") for T in (*LONG_LENGTHS[:2], 1024)],
        Case(args=(9,), kwargs={"device": torch.device("cpu")}, label="T=9, device=torch.device('cpu')"),
        Case(args=(0,), label="T=0: an empty (0, 0) mask"),
        # the meta device: a mask built on the default device and not on the one given is caught without a GPU
        Case(args=(7,), kwargs={"device": "meta"}, label="T=7, device='meta': made on the device it is given"),
        Case(args=(300, torch.device("meta")), label="T=300, device=torch.device('meta') passed positionally"),
        # a new tensor every call: the caller's writes into the first mask must not reach the second
        Case(args=(6,), again=(), label="called twice with T=6, the first mask overwritten in between: "
                                        "a new tensor each call (no cache)"),
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
        Case(args=(torch.tensor([3, 5, 0]), 5), kwargs={"side": "left"}, label="left padding: lengths [3, 5, 0], T=5"),
        Case(args=(torch.tensor([2, 4]), 7, "left"), label="left padding given positionally, no sequence fills T=7"),
        Case(args=(torch.tensor([1, 3], dtype=torch.int32), 4), kwargs={"side": "left"},
             label="left padding, int32 lengths [1, 3], T=4"),
        Case(args=(torch.tensor([2, 1]), 3), kwargs={"side": "right"}, label="side='right' given explicitly"),
        Case(args=(torch.tensor([LONG_LENGTHS[2], 17, 4000, 0]), LONG_LENGTHS[2]),
             label=f"long T={LONG_LENGTHS[2]}, four sequences"),
        Case(args=(torch.tensor([300, 5]), LONG_LENGTHS[1]), kwargs={"side": "left"},
             label=f"long T={LONG_LENGTHS[1]}, left padding"),
        Case(args=(torch.tensor([1, 2]), 3), kwargs={"side": "center"}, raises="ValueError",
             label="side='center': neither 'right' nor 'left'"),
        Case(args=(torch.tensor([100, 250, 0], dtype=torch.uint8), 300), kwargs={"side": "left"},
             label="left padding, uint8 lengths, T=300: T - lengths must not wrap around in uint8"),
        Case(args=(torch.tensor([100, 5], dtype=torch.int8), 200, "left"),
             label="left padding, int8 lengths, T=200 (beyond int8's 127)"),
        Case(args=(torch.tensor([100, 250], dtype=torch.uint8), 300), label="uint8 lengths, T=300, right padding"),
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
        Case(args=(torch.tensor([0, 3]), 3, True),
             label="an empty sequence (length 0), T=3, causal: its rows attend to themselves"),
        Case(args=(torch.tensor([0, 2]), 4), label="an empty sequence (length 0), T=4, not causal: rows attend to themselves"),
        Case(args=(torch.randint(1, 9, (4,), generator=g), 8, True), label="four random lengths, T=8, causal"),
        Case(args=(torch.tensor([3, 5, 1]), 5), kwargs={"causal": True, "side": "left"},
             label="left padding, causal, lengths [3, 5, 1], T=5: leading padded queries attend to themselves"),
        Case(args=(torch.tensor([2, 4]), 6, True, "left"),
             label="left padding, causal, given positionally, no sequence fills T=6"),
        Case(args=(torch.tensor([3, 1]), 4), kwargs={"side": "left"},
             label="left padding, not causal: every query sees the real keys"),
        Case(args=(torch.tensor([0, 4]), 4), kwargs={"causal": True, "side": "left"},
             label="left padding, causal, an empty sequence"),
        Case(args=(torch.tensor([2, 3], dtype=torch.int32), 4), kwargs={"causal": True, "side": "left"},
             label="left padding, causal, int32 lengths"),
        Case(args=(torch.randint(0, 601, (2,), generator=g), LONG_LENGTHS[1]), kwargs={"causal": True, "side": "left"},
             label=f"long T={LONG_LENGTHS[1]}, left padding, causal"),
        Case(args=(torch.tensor([250, 300]), LONG_LENGTHS[0], True), label=f"long T={LONG_LENGTHS[0]}, right padding, causal"),
        Case(args=(torch.tensor([1, 2]), 3), kwargs={"side": "top"}, raises="ValueError",
             label="side='top': neither 'right' nor 'left'"),
        Case(args=(torch.tensor([100, 10], dtype=torch.uint8), 300, True, "left"),
             label="left padding, causal, uint8 lengths, T=300: T - lengths must not wrap around in uint8"),
        Case(args=(torch.tensor([120, 3], dtype=torch.int8), 200), kwargs={"side": "left"},
             label="left padding, int8 lengths, T=200 (beyond int8's 127), not causal"),
    ]


# ---------------------------------------------------------------------------------------------------
# document_mask


def _runs(*sizes: int, first: int = 0) -> list[int]:
    """Document ids of contiguous runs of the given sizes, numbered from ``first``."""
    return [first + d for d, n in enumerate(sizes) for _ in range(n)]


def document_mask_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    random_runs = torch.stack([torch.sort(torch.randint(0, 4, (12,), generator=g)).values for _ in range(3)])
    return [
        Case(args=(torch.tensor([_runs(3, 2, 3)]),), label="one row, documents of 3, 2 and 3 tokens, causal default"),
        Case(args=(torch.tensor([_runs(3, 2, 3)]), False), label="one row, documents of 3, 2 and 3, causal=False"),
        Case(args=(torch.tensor([_runs(2, 4), _runs(5, 1)]),), kwargs={"causal": True},
             label="two rows packed differently, causal=True as keyword"),
        Case(args=(torch.tensor([_runs(6)]),), label="one document fills the row: the causal mask"),
        Case(args=(torch.tensor([list(range(5))]),), label="every token its own document: the diagonal"),
        Case(args=(torch.tensor([_runs(1, 3, 1, 2)]),), label="documents of one token at the boundaries"),
        Case(args=(torch.tensor([[0, 1, 0, 1, 1, 0]]),), label="ids not in contiguous runs: [0, 1, 0, 1, 1, 0]"),
        Case(args=(torch.tensor([[0, 1, 0, 1, 1, 0]]),), kwargs={"causal": False},
             label="ids not in contiguous runs, causal=False"),
        Case(args=(torch.tensor([_runs(2, 3, first=7) + [-1, -1]]),),
             label="ids 7 and 8 (not from 0) and -1 for padding"),
        Case(args=(torch.tensor([[3, 3, 1, 1, 1, 2]]),), label="ids not sorted: [3, 3, 1, 1, 1, 2]"),
        Case(args=(torch.tensor([_runs(2, 2, 3), _runs(4, 3)], dtype=torch.int32),), label="int32 ids"),
        Case(args=(random_runs,), label="three rows of random runs, T=12"),
        Case(args=(torch.tensor([[5]]),), label="T=1"),
        Case(args=(torch.tensor([_runs(300, 500, 224)]),), label="long T=1024, documents of 300, 500 and 224"),
        Case(args=(torch.tensor(_runs(2, 3)),), raises="ValueError", label="1-D doc_ids (no batch axis)"),
        Case(args=(torch.tensor([[0.0, 0.0, 1.0]]),), raises="ValueError", label="float doc_ids"),
        Case(args=(torch.tensor([_runs(3, 2, 3), _runs(1, 6, 1)]),), kwargs={"positions": True},
             label="positions=True: documents of 3, 2, 3 and of 1, 6, 1 count from 0 each"),
        Case(args=(torch.tensor([[0, 1, 0, 1, 1, 0, 2]]),), kwargs={"positions": True},
             label="positions=True, ids not in contiguous runs: [0, 1, 0, 1, 1, 0, 2] -> [0, 0, 1, 1, 2, 2, 0]"),
        Case(args=(torch.tensor([_runs(2, 3, 1)]), False, True),
             label="positions=True with causal=False (positional): the positions do not depend on causal"),
        Case(args=(torch.tensor([_runs(3, 2, first=7) + [-1, -1, -1]], dtype=torch.int16),),
             kwargs={"positions": True, "causal": True},
             label="positions=True, int16 ids 7, 8 and -1 padding: the padding counts 0, 1, 2 as its own document"),
        Case(args=(random_runs,), kwargs={"positions": True}, label="positions=True, three rows of random runs"),
        Case(args=(torch.tensor([[5]]),), kwargs={"positions": True}, label="positions=True, T=1: position 0"),
        Case(args=(torch.tensor([_runs(300, 500, 224)]),), kwargs={"positions": True},
             label="positions=True, long T=1024, documents of 300, 500 and 224"),
        Case(args=(torch.tensor([_runs(2, 2)]),), kwargs={"positions": False},
             label="positions=False given: the mask alone"),
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


def masked_softmax_cases(seed: int, grad: bool = False, dtype: str = "float32") -> list[Case]:
    """Forward cases, or (``grad=True``) the same kinds of inputs with a ``grad_output``, in one dtype; in
    float32 also every broadcast class of masks, any value at masked entries, extreme scores and layouts."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    causal = torch.ones(5, 5, dtype=torch.bool).tril()

    def x(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return randn(g, *shape, scale=scale, shift=shift, dtype=dt)

    def case(scores: torch.Tensor, mask: torch.Tensor, label: str, grad_output: torch.Tensor | None = None,
             **kwargs) -> Case:
        label = tag(label, dtype)
        if not grad:
            return Case(args=(scores, mask), kwargs=kwargs, label=label)
        if grad_output is None:
            grad_output = x(*scores.shape)
        return Case(args=(scores, mask), kwargs=kwargs, grad_output=grad_output,
                    label=f"{label}; backward: output[1][0] is the gradient with respect to scores")

    garbage_mask = _lengths_mask([4, 6, 2], 6)
    garbage = x(3, 6).masked_fill(~garbage_mask, 1e4)  # huge scores in the padding: they must not matter
    cases = [
        case(x(4, 6), _with_empty_rows(g, 4, 6), "(4, 6) random mask; row 1 fully masked"),
        case(x(2, 3, 5, 5), causal, "(B=2, H=3, 5, 5) scores, (5, 5) causal mask broadcast"),
        case(x(3, 2, 4, 6), _lengths_mask([4, 0, 6], 6)[:, None, None, :],
             "(B=3, H=2, 4, 6) with a (B, 1, 1, T) key-padding mask; sequence 1 is empty (every row masked)"),
        case(x(5, 4), _with_empty_rows(g, 4, 5).T.clone(), "distributions along dim=0", dim=0),
        case(x(2, 6, 3), _random_mask(g, 2, 6, 3), "(2, 6, 3) along dim=-2", dim=-2),
        case(x(3, 7), torch.ones(3, 7, dtype=torch.bool), "nothing masked: plain softmax"),
        case(x(2, 4), torch.zeros(2, 4, dtype=torch.bool), "everything masked: all zeros"),
        case(garbage, garbage_mask, "padding holds huge scores (1e4) that must be ignored"),
        case(extreme_scores(g, 4, 5, kind="huge", dtype=dt), _with_empty_rows(g, 4, 5),
             "scores of size ~1e4 with masked entries, one row fully masked"),
    ]
    if dtype != "float32":
        return cases
    lead, T_q, T_k = (2, 3), 4, 5
    for name, mask in mask_broadcasts(g, lead, T_q, T_k):
        cases.append(case(x(*lead, T_q, T_k), mask, f"scores (2, 3, 4, 5), {name}"))
    empty = _with_empty_rows(g, 4, 6)
    for value, name in ((float("inf"), "+inf"), (float("-inf"), "-inf"), (float("nan"), "NaN"), (1e30, "1e30")):
        cases.append(case(fill_masked(x(4, 6), empty, value), empty, f"{name} at every masked entry"))
    low = x(3, 6, shift=-3e4)  # every allowed score far below -1e4: a fill of -1e4 would outweigh them
    cases += [
        case(low, _with_empty_rows(g, 3, 6), "allowed scores around -3e4, far below -1e4; one row fully masked"),
        case(fill_masked(x(3, 6, shift=-3e4), _lengths_mask([6, 3, 1], 6), -1e5), _lengths_mask([6, 3, 1], 6),
             "masked scores at -1e5, allowed ones around -3e4"),
        case(extreme_scores(g, 3, 6, kind="very_negative"), _with_empty_rows(g, 3, 6),
             "every score of a row below -100"),
        case(x(2, 3, 4, 5), _random_mask(g, 4, 5), "a lower-rank (4, 5) mask with a positive dim=2", dim=2),
        case(x(2, 6, 3), _random_mask(g, 6, 3), "a (6, 3) mask with dim=1 of (2, 6, 3) scores", dim=1),
        case(x(2, 3, 5), _random_mask(g, 5), "a 1-D (5,) mask with a positive dim=2", dim=2),
        case(x(6, 4, 3), _random_mask(g, 4, 1), "a (4, 1) mask along dim=0: slices cross the mask's rows", dim=0),
    ]
    if not grad:
        base = x(5, 6)
        cases += [
            case(base.T, _with_empty_rows(g, 6, 5), "non-contiguous scores (a transposed view)"),
            case(x(1, 4, 6).expand(3, 4, 6), _with_empty_rows(g, 4, 6), "expanded scores (stride 0 along the batch)"),
            case(x(4, 6), _with_empty_rows(g, 6, 4).T, "a non-contiguous mask (a transposed view)"),
        ]
    else:
        cases += [
            case(x(4, 6), _with_empty_rows(g, 4, 6), "an expanded grad_output (stride 0 along the rows)",
                 grad_output=x(6).expand(4, 6)),
            case(x(3, 4, 6), _with_empty_rows(g, 4, 6), "a non-contiguous grad_output",
                 grad_output=non_contiguous(x(3, 4, 6))),
            case(x(2, 4, 5), _random_mask(g, 4, 5), "a grad_output expanded from (4, 5) to the batch",
                 grad_output=expanded(x(4, 5), 2)),
        ]
    return cases


# ---------------------------------------------------------------------------------------------------
# causal_attention


def causal_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Shapes in one dtype; in float32 also large scores and non-contiguous or expanded inputs."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def t(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return randn(g, *shape, scale=scale, dtype=dt)

    def case(batch: tuple[int, ...], T: int, d_k: int, d_v: int, label: str, scale: float = 1.0) -> Case:
        q, k = t(*batch, T, d_k, scale=scale), t(*batch, T, d_k, scale=scale)
        return Case(args=(q, k, t(*batch, T, d_v)), label=tag(label, dtype))

    cases = [
        case((), 5, 4, 4, "one sequence, T=5, d_k=d_v=4"),
        case((2,), 6, 8, 3, "batch of 2, T=6, d_k=8, d_v=3"),
        case((2, 3), 7, 4, 5, "(B=2, H=3) heads, T=7, d_k=4, d_v=5"),
        case((3,), 1, 4, 2, "T=1: a single token attends to itself"),
    ]
    if dtype != "float32":
        return cases
    wide = t(2, 6, 3, 4)  # (B, T, H, d): the heads axis transposed into place gives a non-contiguous view
    cases += [
        case((2,), 4, 16, 4, "large scores (entries ~4)", scale=4.0),
        Case(args=(wide.transpose(1, 2), t(2, 6, 3, 4).transpose(1, 2), t(2, 6, 3, 5).transpose(1, 2)),
             label="non-contiguous q, k, v: (B, T, H, d) transposed to (B, H, T, d)"),
        Case(args=(t(1, 5, 4).expand(3, 5, 4), t(1, 5, 4).expand(3, 5, 4), t(5, 2).expand(3, 5, 2)),
             label="expanded q, k, v (stride 0 along the batch)"),
        Case(args=(*far_below_qk(g, (2,), (2,), 6, 6), randn(g, 2, 6, 3)),
             label="every score around -3e4, far below -1e4 (q and k opposed): the future removed (-inf), not given a "
                   "finite fill"),
    ]
    return cases


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


# ---------------------------------------------------------------------------------------------------
# the contract table: every clause of each statement -> the hidden cases that exercise it

_BWD = "; backward: output[1][0] is the gradient with respect to scores"


def _dtypes(label: str, grad: bool = False) -> list[str]:
    return [tag(label, d) + (_BWD if grad else "") for d in ("float16", "bfloat16", "float64")]


CONTRACT = {
    "causal_mask": {
        "returns a bool (T, T) tensor, True where key j <= query i (diagonal included)":
            ["T=1", "T=2", "odd T=5"],
        "works for any T >= 0, thousands included (no fixed-size table)":
            ["T=0: an empty (0, 0) mask", "long T=300", "long T=600", "long T=1024"],
        "device may be a string, a torch.device or None (positional or keyword)":
            ["T=8, device='cpu'", "T=9, device=torch.device('cpu')", "T=6, device=None passed positionally"],
        "is made on `device` (another device than the CPU)":
            ["T=7, device='meta': made on the device it is given",
             "T=300, device=torch.device('meta') passed positionally"],
        "returns a new tensor (course rule: functions return new tensors)":
            ["called twice with T=6, the first mask overwritten in between: a new tensor each call (no cache)"],
    },
    "padding_mask": {
        "side='right' (the default): (B, T) bool, m[b, j] = j < lengths[b]":
            ["lengths [3, 5, 1], T=5", "six random lengths in 0..9, T=9", "side='right' given explicitly"],
        "side='left': m[b, j] = j >= T - lengths[b]":
            ["left padding: lengths [3, 5, 0], T=5", "left padding given positionally, no sequence fills T=7"],
        "uses the given T, even when no sequence is that long (both sides)":
            ["lengths [2, 4], T=6: no sequence fills T", "left padding given positionally, no sequence fills T=7"],
        "lengths in 0..T: empty sequences and full ones":
            ["lengths [0, 2, 4], T=4: an empty sequence", "no padding: lengths [7, 7], T=7",
             "one sequence of length 1, T=1"],
        "lengths of any integer dtype (int32)":
            ["int32 lengths [2, 3], T=4", "left padding, int32 lengths [1, 3], T=4"],
        "uint8 and int8 lengths with T beyond their range: T - lengths computed without wrapping around":
            ["left padding, uint8 lengths, T=300: T - lengths must not wrap around in uint8",
             "left padding, int8 lengths, T=200 (beyond int8's 127)", "uint8 lengths, T=300, right padding"],
        "any T, thousands included (no fixed-size table)":
            ["long T=5003, four sequences", "long T=600, left padding"],
        "raises ValueError for a side other than 'right' or 'left'": ["side='center': neither 'right' nor 'left'"],
        "on lengths.device":
            "not gradable: the grader has only a CPU, where a mask that ignores the device is right too; the meta "
            "device (which catches this in causal_mask) holds no values, and the function must read the lengths' "
            "values to validate them",
    },
    "attention_mask": {
        "(B, 1, T, T) bool, keys masked by padding_mask(lengths, T, side), queries not":
            ["lengths [3, 5], T=5, causal default (False)", "lengths [2, 4], T=7 (no sequence fills T), causal=False",
             "left padding, not causal: every query sees the real keys"],
        "causal=True (positional or keyword) adds j <= i":
            ["lengths [3, 5], T=5, causal=True", "lengths [2, 6, 4], T=6, causal=True as keyword",
             "four random lengths, T=8, causal", "one sequence, T=1, causal"],
        "side='left' (positional or keyword) masks the leading padding":
            ["left padding, causal, lengths [3, 5, 1], T=5: leading padded queries attend to themselves",
             "left padding, causal, given positionally, no sequence fills T=6"],
        "a row without any key is True on its diagonal only (left padding + causal; length 0, causal or not)":
            ["left padding, causal, lengths [3, 5, 1], T=5: leading padded queries attend to themselves",
             "left padding, causal, an empty sequence",
             "an empty sequence (length 0), T=3, causal: its rows attend to themselves",
             "an empty sequence (length 0), T=4, not causal: rows attend to themselves"],
        "no other row gets its diagonal (a padded query keeps the real keys only)":
            ["lengths [3, 5], T=5, causal default (False)", "left padding, not causal: every query sees the real keys",
             "lengths [2, 6, 4], T=6, causal=True as keyword"],
        "lengths of any integer dtype (int32)": ["left padding, causal, int32 lengths"],
        "uint8 and int8 lengths with T beyond their range: T - lengths computed without wrapping around":
            ["left padding, causal, uint8 lengths, T=300: T - lengths must not wrap around in uint8",
             "left padding, int8 lengths, T=200 (beyond int8's 127), not causal"],
        "long sequences (no fixed-size table)":
            ["long T=600, left padding, causal", "long T=300, right padding, causal"],
        "raises ValueError for an unknown side": ["side='top': neither 'right' nor 'left'"],
        "attention with the mask is finite forward and backward":
            "visible only: implied by the exact comparison (no row is empty); the visible test runs SDPA backward",
        "on lengths.device": "not gradable: the grader has only a CPU; the meta device (which catches this in "
                             "causal_mask) holds no lengths' values to read",
    },
    "document_mask": {
        "(B, 1, T, T) bool, m[b, 0, i, j] = same document and j <= i (causal=True, the default)":
            ["one row, documents of 3, 2 and 3 tokens, causal default", "three rows of random runs, T=12",
             "documents of one token at the boundaries"],
        "causal=False (positional): block-diagonal only":
            ["one row, documents of 3, 2 and 3, causal=False", "ids not in contiguous runs, causal=False"],
        "causal given as keyword": ["two rows packed differently, causal=True as keyword"],
        "each row of the batch has its own documents": ["two rows packed differently, causal=True as keyword",
                                                       "three rows of random runs, T=12", "int32 ids"],
        "one document is the causal mask; one token per document is the diagonal":
            ["one document fills the row: the causal mask", "every token its own document: the diagonal", "T=1"],
        "documents are told apart by id only: not contiguous runs, not sorted, any start, negative ids":
            ["ids not in contiguous runs: [0, 1, 0, 1, 1, 0]", "ids not in contiguous runs, causal=False",
             "ids not sorted: [3, 3, 1, 1, 1, 2]", "ids 7 and 8 (not from 0) and -1 for padding"],
        "doc_ids of any integer dtype (int32)": ["int32 ids"],
        "long rows (no fixed-size table)": ["long T=1024, documents of 300, 500 and 224"],
        "raises ValueError unless doc_ids is a 2-D integer tensor":
            ["1-D doc_ids (no batch axis)", "float doc_ids"],
        "on doc_ids.device": "not gradable: the grader has only a CPU",
        "positions=True returns (mask, pos), pos (B, T) int64: earlier tokens of the same document, 0 first":
            ["positions=True: documents of 3, 2, 3 and of 1, 6, 1 count from 0 each",
             "positions=True, three rows of random runs", "positions=True, T=1: position 0",
             "positions=True, long T=1024, documents of 300, 500 and 224"],
        "positions by id, not by runs: ids that come back continue their document's count":
            ["positions=True, ids not in contiguous runs: [0, 1, 0, 1, 1, 0, 2] -> [0, 0, 1, 1, 2, 2, 0]",
             "positions=True, int16 ids 7, 8 and -1 padding: the padding counts 0, 1, 2 as its own document"],
        "the positions do not depend on causal; positions is the third parameter":
            ["positions=True with causal=False (positional): the positions do not depend on causal"],
        "positions=False (the default) returns the mask alone":
            ["positions=False given: the mask alone", "one row, documents of 3, 2 and 3 tokens, causal default"],
    },
    "masked_softmax": {
        "softmax along dim over the True entries, exactly 0 at the False ones":
            ["(4, 6) random mask; row 1 fully masked", "nothing masked: plain softmax",
             "(B=2, H=3, 5, 5) scores, (5, 5) causal mask broadcast"],
        "a slice with no True entry is all zeros, never NaN":
            ["everything masked: all zeros",
             "(B=3, H=2, 4, 6) with a (B, 1, 1, T) key-padding mask; sequence 1 is empty (every row masked)"],
        "the gradient with respect to scores is finite (0 at masked entries and on empty slices)":
            ["everything masked: all zeros" + _BWD, "(4, 6) random mask; row 1 fully masked" + _BWD,
             "(B=3, H=2, 4, 6) with a (B, 1, 1, T) key-padding mask; sequence 1 is empty (every row masked)" + _BWD],
        "any dim, negative or positive": ["distributions along dim=0", "(2, 6, 3) along dim=-2",
                                          "a (6, 3) mask with dim=1 of (2, 6, 3) scores"],
        "masks of every broadcast class (1-D, (T_q, T_k), (1, T_k), (T_q, 1), per-head, (B, 1, 1, T_k), full)":
            [f"scores (2, 3, 4, 5), {name}" for name, _ in
             mask_broadcasts(torch.Generator().manual_seed(0), (2, 3), 4, 5)],
        "lower-rank masks with a positive dim (the mask's own axis dim is another one)":
            ["a lower-rank (4, 5) mask with a positive dim=2", "a 1-D (5,) mask with a positive dim=2",
             "a (4, 1) mask along dim=0: slices cross the mask's rows",
             "a lower-rank (4, 5) mask with a positive dim=2" + _BWD],
        "masked entries may hold any value: huge, +inf, -inf, NaN":
            ["padding holds huge scores (1e4) that must be ignored", "+inf at every masked entry",
             "-inf at every masked entry", "NaN at every masked entry", "1e30 at every masked entry",
             "+inf at every masked entry" + _BWD, "NaN at every masked entry" + _BWD],
        "allowed scores may be any finite value: ~1e4, far below -1e4, every one below -100":
            ["scores of size ~1e4 with masked entries, one row fully masked",
             "allowed scores around -3e4, far below -1e4; one row fully masked",
             "masked scores at -1e5, allowed ones around -3e4", "every score of a row below -100"],
        "keeps the dtype of scores, in float16, bfloat16 and float64 (a -1e9 fill does not fit float16)":
            _dtypes("(4, 6) random mask; row 1 fully masked") + _dtypes("padding holds huge scores (1e4) that must be ignored")
            + _dtypes("scores of size ~1e4 with masked entries, one row fully masked"),
        "the gradient in every dtype": _dtypes("(4, 6) random mask; row 1 fully masked", grad=True)
            + _dtypes("everything masked: all zeros", grad=True),
        "non-contiguous or expanded scores, a non-contiguous mask":
            ["non-contiguous scores (a transposed view)", "expanded scores (stride 0 along the batch)",
             "a non-contiguous mask (a transposed view)"],
        "the backward accepts expanded and non-contiguous grad_output":
            ["an expanded grad_output (stride 0 along the rows)" + _BWD, "a non-contiguous grad_output" + _BWD,
             "a grad_output expanded from (4, 5) to the batch" + _BWD],
        "returns a new tensor and modifies neither argument": ["(4, 6) random mask; row 1 fully masked"],
    },
    "causal_attention": {
        "equals softmax(q k^T / sqrt(d_k) + causal) v, (..., T, d_v), any leading dims":
            ["one sequence, T=5, d_k=d_v=4", "batch of 2, T=6, d_k=8, d_v=3", "(B=2, H=3) heads, T=7, d_k=4, d_v=5",
             "large scores (entries ~4)"],
        "position i uses positions 0..i only, itself included":
            ["T=1: a single token attends to itself", "batch (), T=6, d_k=4, d_v=3: tokens 1..5 replaced",
             "batch (2,), T=8, d_k=8, d_v=4: tokens 4..7 replaced", "batch (2,), T=7, d_k=6, d_v=5: tokens 6..6 replaced"],
        "keeps q's dtype, in float16, bfloat16 and float64":
            _dtypes("one sequence, T=5, d_k=d_v=4") + _dtypes("(B=2, H=3) heads, T=7, d_k=4, d_v=5"),
        "the future removed (-inf), whatever the scores: every score far below -1e4 too": [
            "every score around -3e4, far below -1e4 (q and k opposed): the future removed (-inf), not given a "
            "finite fill"],
        "non-contiguous and expanded inputs": ["non-contiguous q, k, v: (B, T, H, d) transposed to (B, H, T, d)",
                                               "expanded q, k, v (stride 0 along the batch)"],
        "returns new tensors and leaves q, k, v unchanged": ["batch of 2, T=6, d_k=8, d_v=3"],
    },
}
