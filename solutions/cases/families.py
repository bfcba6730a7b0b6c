"""Case families shared by every chapter's generators: the kinds of input a statement's clauses talk about.

A clause such as "any floating tensor", "a mask broadcastable to the scores", "any value at masked
entries" or "works on non-contiguous inputs" is the same sentence in many chapters; its cases are built
here once, so each chapter's generator only says which family its statement allows:

- the **dtype matrix** (:data:`DTYPES`, :data:`TOLERANCES`, :func:`randn`, :func:`tag`): the four floating
  types, with the tolerance a result computed in that dtype keeps against the reference computed in the same
  dtype. A hidden check per dtype passes ``dtype="float16"`` etc. to the generator and that dtype's
  tolerances to ``check_close``.
- **layouts** (:func:`non_contiguous`, :func:`expanded`): the same values in a strided view and in a view
  with stride 0, so an implementation that calls ``.view`` on its input, or writes into it, fails.
- **mask broadcasts** (:func:`mask_broadcasts`): every broadcast class of a boolean mask against scores of
  shape ``(*lead, T_q, T_k)``: 1-D key masks, 2-D, per-batch key masks ``(B, 1, 1, T_k)``, per-head
  ``(H, T_q, T_k)``, full rank; each row keeps at least one True so a softmax is defined.
- **values at masked entries** (:func:`fill_masked`): +inf, -inf, NaN or huge numbers where the statement
  says a masked score may hold any value.
- **extreme rows** (:func:`extreme_scores`): scores the statement allows but a careless formula mishandles
  (every score of a row far below zero, scores around +-1e4, a single dominant entry, near-uniform rows).
- **long sequences** (:data:`LONG_LENGTHS`): lengths past the sizes of fixed lookup tables.
- **integer edges** (:data:`INT64_MAX`): counts just past what int64 or float64 represent exactly.

Every function draws from the ``torch.Generator`` it is given, so a family is reproducible from the check's
seed like any other case.
"""

from __future__ import annotations

import torch

#: The floating dtypes a statement saying "any floating tensor" allows.
DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}

#: ``(atol, rtol)`` between a result computed in a dtype and the reference computed in the same dtype, for
#: O(1) values after a few dozen operations (a softmax, an attention row). Half precisions round every
#: intermediate; bfloat16 keeps 8 bits of mantissa.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-2), "bfloat16": (6e-2, 3e-2), "float32": (1e-5, 1e-4), "float64": (1e-10, 1e-10),
}

#: Sequence lengths beyond the few dozen of the visible tests: past 256 and 512 (sizes of fixed buffers)
#: and 5000 (the length of a precomputed sinusoidal table in many tutorials).
LONG_LENGTHS: tuple[int, ...] = (300, 600, 5003)

#: The largest int64; a count above it wraps in int64 arithmetic and loses exactness in float64.
INT64_MAX = 2**63 - 1


def randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype | str = torch.float32,
          shift: float = 0.0) -> torch.Tensor:
    """Normal entries ``shift + scale * N(0, 1)`` drawn in float64, then rounded to ``dtype``, so the same
    seed gives the same values (up to rounding) in every dtype of the matrix."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + shift).to(dt)


def tag(label: str, dtype: torch.dtype | str) -> str:
    """``label`` with the dtype appended, except for float32 (the default the labels are written for)."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    return label if name == "float32" else f"{label} ({name})"


def non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """The values of ``x`` in a view with stride 2 along the last axis (non-contiguous whenever x has more
    than one element)."""
    return torch.stack([x, torch.zeros_like(x)], dim=-1)[..., 0]


def expanded(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x`` repeated ``n`` times along a new leading axis with stride 0 (writing into it is an error)."""
    return x.unsqueeze(0).expand(n, *x.shape)


def _keep_one(mask: torch.Tensor) -> torch.Tensor:
    """Make sure every row (last axis) of ``mask`` has a True: rows left all False get key 0."""
    empty = ~mask.any(dim=-1, keepdim=True)
    first = torch.zeros_like(mask)
    first[..., 0] = True
    return mask | (empty & first)


def mask_broadcasts(g: torch.Generator, lead: tuple[int, ...], T_q: int, T_k: int,
                    p_keep: float = 0.6) -> list[tuple[str, torch.Tensor]]:
    """One random boolean mask of each broadcast class against scores ``(*lead, T_q, T_k)`` (True = may
    attend), each row with at least one True. ``lead`` is ``(B, H)``, ``(H,)`` or ``()``; classes that need
    a leading axis the scores lack are left out. Returns ``(label, mask)`` pairs."""
    def draw(*shape: int) -> torch.Tensor:
        return _keep_one(torch.rand(*shape, generator=g) < p_keep)

    out = [("a 1-D key mask (T_k,)", draw(T_k)),
           ("a 2-D mask (T_q, T_k) shared by the batch", draw(T_q, T_k)),
           ("a key mask (1, T_k) broadcast over the queries", draw(1, T_k)),
           ("a query-column mask (T_q, 1) with every row kept", torch.ones(T_q, 1, dtype=torch.bool))]
    if len(lead) >= 1:
        out.append((f"a per-head mask {(*lead[-1:], T_q, T_k)}", draw(lead[-1], T_q, T_k)))
        out.append(("a mask of full rank " + str((*lead, T_q, T_k)), draw(*lead, T_q, T_k)))
    if len(lead) >= 2:
        out.append((f"a padding mask (B, 1, 1, T_k) = {(lead[0], 1, 1, T_k)}", draw(lead[0], 1, 1, T_k)))
        out.append((f"a per-head mask (1, H, T_q, T_k) = {(1, lead[1], T_q, T_k)}", draw(1, lead[1], T_q, T_k)))
        out.append((f"a per-batch mask (B, 1, T_q, T_k) = {(lead[0], 1, T_q, T_k)}", draw(lead[0], 1, T_q, T_k)))
    return out


def fill_masked(scores: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    """A copy of ``scores`` holding ``value`` (e.g. ``inf``, ``nan``, ``1e30``) wherever ``mask`` is False:
    the inputs of a statement that says masked scores may hold any value."""
    return scores.masked_fill(~mask.expand(scores.shape), value)


def extreme_scores(g: torch.Generator, *shape: int, kind: str,
                   dtype: torch.dtype | str = torch.float32) -> torch.Tensor:
    """Scores a statement allows that break careless formulas. ``kind``:

    - ``"very_negative"``: every entry of every row below -100 (a running maximum started at 0 underflows);
    - ``"huge"``: entries of size ~1e4 (exp overflows without subtracting the maximum; float16 holds them);
    - ``"dominant"``: one entry per row 60 above the others (the others' weights underflow to 0);
    - ``"near_uniform"``: entries within 1e-3 of each other (weights all about 1/n; entropy about log n).
    """
    base = randn(g, *shape, dtype=torch.float64)
    if kind == "very_negative":
        x = base - 300.0
    elif kind == "huge":
        x = base.clamp(-3.0, 3.0) * 1e4  # at most 3e4: float16 (max 65504) still holds it
    elif kind == "dominant":
        x = base.clone()
        idx = torch.randint(0, shape[-1], (*shape[:-1], 1), generator=g)
        x.scatter_(-1, idx, x.amax(dim=-1, keepdim=True) + 60.0)
    elif kind == "near_uniform":
        x = base * 1e-3
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return x.to(DTYPES[dtype] if isinstance(dtype, str) else dtype)


def far_below_qk(g: torch.Generator, q_lead: tuple[int, ...], k_lead: tuple[int, ...], T_q: int,
                 T_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q ``(*q_lead, T_q, 16)`` and k ``(*k_lead, T_k, 16)`` whose scores ``q_i . k_j / 4`` are the integers
    ``-29929 + c_i e_j`` with c, e in -2..2: every product and sum is exact in float32, so the weights do not depend
    on the order of the arithmetic, and every allowed score lies far below -1e4: a finite fill of -1e4 (GPT-2's
    ``masked_bias``) for the masked ones outweighs them all. ``k_lead`` may differ from ``q_lead`` (grouped
    heads); the scores only need c per query and e per key."""
    c = torch.randint(-2, 3, (*q_lead, T_q), generator=g).float()
    e = torch.randint(-2, 3, (*k_lead, T_k), generator=g).float()
    q, k = torch.zeros(*q_lead, T_q, 16), torch.zeros(*k_lead, T_k, 16)
    q[..., 0], q[..., 1] = 2 * 173.0, 2 * c
    k[..., 0], k[..., 1] = -2 * 173.0, 2 * e
    return q, k
