"""Chapter 1, the RNN bottleneck: the reference implementations.

Read top to bottom, in the chapter's order: a vanilla tanh RNN run over a batch of sequences (the
encoder whose last state an encoder-decoder squeezes a whole sentence into), then the two halves of
Bahdanau's additive attention, which lets the decoder look at *every* encoder state instead: scoring
the encoder states against a query, and pooling them with the softmax of the scores; and the two put
together in one step of Bahdanau's decoder, which attends with its *previous* state and feeds the context
into its recurrent update.

Every function keeps its inputs' floating dtype (float16, bfloat16, float32, float64) and accepts
non-contiguous views.

Conventions: vectors are rows, sequences are ``(B, T, d)`` (batch first, like ``batch_first=True`` in
``nn.RNN``), and a boolean mask is True where a position *may be attended to*. Every function returns
new tensors and leaves its arguments unchanged; all of them are differentiable with autograd.
"""

from __future__ import annotations

import torch

from solutions._common import check_mask


def rnn_forward(
    x: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b_h: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a tanh RNN over a batch of sequences: ``h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h)``.

    Args:
        x: inputs ``(B, T, d_in)``, batch first; any number of leading batch dims works.
        W_xh: input-to-hidden matrix ``(d_in, H)``.
        W_hh: hidden-to-hidden matrix ``(H, H)``, applied on the right of the row vector ``h_{t-1}``.
        b_h: bias ``(H,)``.
        h0: initial state ``(B, H)``; zeros (of ``x``'s dtype and device) when None.

    Returns:
        ``(outputs, h_T)``: ``outputs`` ``(B, T, H)`` holds ``h_1 .. h_T`` (``outputs[:, t]`` is the state
        *after* reading ``x[:, t]``), and ``h_T`` ``(B, H)`` is the last state, ``outputs[:, -1]``
        (a copy of ``h0`` when ``T = 0``).

    Raises:
        ValueError: when a weight, the bias or ``h0`` does not fit ``x``.
    """
    if x.dim() < 2:
        raise ValueError(f"x must have shape (B, T, d_in), got {tuple(x.shape)}")
    *batch, T, d_in = x.shape
    if W_xh.dim() != 2 or W_xh.shape[0] != d_in:
        raise ValueError(f"W_xh must have shape (d_in={d_in}, H), got {tuple(W_xh.shape)}")
    H = W_xh.shape[1]
    if tuple(W_hh.shape) != (H, H):
        raise ValueError(f"W_hh must have shape (H, H) = ({H}, {H}), got {tuple(W_hh.shape)}")
    if tuple(b_h.shape) != (H,):
        raise ValueError(f"b_h must have shape (H,) = ({H},), got {tuple(b_h.shape)}")
    if h0 is None:
        h = x.new_zeros(*batch, H)  # (B, H)
    elif tuple(h0.shape) != (*batch, H):
        raise ValueError(f"h0 must have shape (B, H) = {(*batch, H)}, got {tuple(h0.shape)}")
    else:
        h = h0
    # the input projections do not depend on the state: one matrix product for all time steps
    x_proj = x @ W_xh + b_h  # (B, T, H)
    states = []
    for t in range(T):  # the recurrence itself is serial: h_t needs h_{t-1}
        h = torch.tanh(x_proj[..., t, :] + h @ W_hh)  # (B, H)
        states.append(h)
    outputs = torch.stack(states, dim=-2) if states else x.new_zeros(*batch, 0, H)  # (B, T, H)
    return outputs, h.clone() if T == 0 else h  # never hand back the caller's h0 itself


def additive_scores(
    query: torch.Tensor,
    keys: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    """Bahdanau's additive scores ``e_t = v . tanh(q W_q + k_t W_k)``, one per key.

    In column-vector notation this is ``v^T tanh(W_q^T q + W_k^T k_t)``: a one-hidden-layer network of
    width ``a`` that looks at the query and one key at a time.

    Args:
        query: one query per sequence ``(B, d_q)`` (in Bahdanau's decoder: the previous decoder state).
        keys: ``(B, T, d_k)`` (the encoder states).
        W_q: ``(d_q, a)``; W_k: ``(d_k, a)``; v: ``(a,)``.

    Returns:
        ``(B, T)`` scores, unnormalised: any real numbers, one per (sequence, key).

    Raises:
        ValueError: when the shapes do not fit together.
    """
    if W_q.dim() != 2 or W_q.shape[0] != query.shape[-1]:
        raise ValueError(f"W_q must have shape (d_q={query.shape[-1]}, a), got {tuple(W_q.shape)}")
    if W_k.dim() != 2 or W_k.shape[0] != keys.shape[-1]:
        raise ValueError(f"W_k must have shape (d_k={keys.shape[-1]}, a), got {tuple(W_k.shape)}")
    a = W_q.shape[1]
    if W_k.shape[1] != a or tuple(v.shape) != (a,):
        raise ValueError(f"W_q, W_k and v must share the attention width a: W_q {tuple(W_q.shape)}, "
                         f"W_k {tuple(W_k.shape)}, v {tuple(v.shape)}")
    if keys.dim() != query.dim() + 1 or keys.shape[:-2] != query.shape[:-1]:
        raise ValueError(f"keys must have shape (B, T, d_k) for query (B, d_q), got keys "
                         f"{tuple(keys.shape)} and query {tuple(query.shape)}")
    q_proj = query @ W_q  # (B, a)
    k_proj = keys @ W_k  # (B, T, a)
    hidden = torch.tanh(q_proj.unsqueeze(-2) + k_proj)  # (B, T, a): the query meets every key
    return hidden @ v  # (B, T)


def attention_pool(
    scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn scores into weights with a softmax over the positions and average the values with them.

    Args:
        scores: ``(B, T)``, one score per position, any size (``torch.softmax`` is fine here).
        values: ``(B, T, d_v)``.
        mask: None, or a bool tensor ``(B, T)`` (broadcastable to ``scores``); True = the position may
            be attended to. The scores of masked positions may be anything, they get weight exactly 0.
            Every row keeps at least one True: a fully masked row has no distribution and gives NaN.

    Returns:
        ``(context, weights)``: ``weights`` ``(B, T)``, each row non-negative and summing to 1;
        ``context`` ``(B, d_v)`` = ``sum_t weights[:, t] * values[:, t]``.

    Raises:
        TypeError: when ``mask`` is not a bool tensor.
        ValueError: when ``scores`` and ``values`` disagree on ``(B, T)`` or the mask does not fit.
    """
    if values.shape[:-1] != scores.shape:
        raise ValueError(f"values must have shape (B, T, d_v) for scores (B, T) = {tuple(scores.shape)}, "
                         f"got {tuple(values.shape)}")
    if mask is not None:
        check_mask(mask, scores.shape)
        # -inf before the softmax: exp(-inf) = 0, whatever garbage the masked scores held
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (B, T): a distribution over the positions
    context = (weights.unsqueeze(-1) * values).sum(dim=-2)  # (B, T, 1) * (B, T, d_v) summed over T -> (B, d_v)
    return context, weights


def bahdanau_decoder_step(
    s_prev: torch.Tensor,
    y_prev: torch.Tensor,
    encoder_states: torch.Tensor,
    W_a: torch.Tensor,
    U_a: torch.Tensor,
    v_a: torch.Tensor,
    W_y: torch.Tensor,
    W_s: torch.Tensor,
    W_c: torch.Tensor,
    b: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder step of Bahdanau, Cho & Bengio (2015): attend with s_{i-1}, then update the state with c_i.

    ``e_ij = v_a . tanh(s_{i-1} W_a + h_j U_a)``, ``alpha_i = softmax_j(e_i)`` (masked positions get 0),
    ``c_i = sum_j alpha_ij h_j`` and ``s_i = tanh(y_{i-1} W_y + s_{i-1} W_s + c_i W_c + b)``: the paper's
    ``s_i = f(s_{i-1}, y_{i-1}, c_i)`` with this chapter's tanh cell as ``f`` (the paper uses a gated unit).

    Args:
        s_prev: the previous decoder state ``(B, H)``, the query.
        y_prev: the previous output (its embedding) ``(B, d_y)``.
        encoder_states: ``h_1 .. h_T`` ``(B, T, d_h)``, keys and values at once.
        W_a: ``(H, a)``; U_a: ``(d_h, a)``; v_a: ``(a,)`` -- the alignment model.
        W_y: ``(d_y, H)``; W_s: ``(H, H)``; W_c: ``(d_h, H)``; b: ``(H,)`` -- the recurrent cell.
        mask: None or a bool ``(B, T)`` (or broadcastable), True = the source position may be attended to.

    Returns:
        ``(s_i, c_i, alpha_i)`` of shapes ``(B, H)``, ``(B, d_h)``, ``(B, T)``, in the inputs' dtype.
    """
    scores = additive_scores(s_prev, encoder_states, W_a, U_a, v_a)  # (B, T): the query is s_{i-1}
    c, alpha = attention_pool(scores, encoder_states, mask)  # (B, d_h), (B, T)
    s = torch.tanh(y_prev @ W_y + s_prev @ W_s + c @ W_c + b)  # (B, H): the context enters the cell
    return s, c, alpha
