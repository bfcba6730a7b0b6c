"""Hidden-test cases, property judges and the contract table for chapter 12 (the whole model).

The model is checked with the reference's weights loaded by name (``check_module``), with weights much larger
than its initialisation so that every part of it moves the logits (a wrong RoPE layout, eps or head grouping is
then far outside the tolerance); and, built with its own initialisation, by the statistics of its parameters
(``named_parameters``: tied embeddings listed once, N(0, 0.02), the residual projections scaled by
1/sqrt(2 n_layers), norms at 1; :func:`initialised_as_stated`). Generation is checked through the notebook's
``GenerationProbe``, which runs the student's ``generate`` on a toy model that counts the positions it is fed;
the reference probe below runs the reference's. Sampling distributions are compared exactly on small
vocabularies whose top-p boundaries are far from rounding.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from grader.checks import Case
from solutions.capstone import CapstoneLM, generate
from solutions.cases.families import far_below_qk

_FAR_BELOW = "every allowed score around -3e4, far below -1e4: the future removed (-inf), not given a finite fill"

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ---------------------------------------------------------------------------------------------------
# lm_loss


def lm_loss_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def toks(B: int, T: int, V: int, dtype=torch.long) -> torch.Tensor:
        return torch.randint(0, V, (B, T), generator=g).to(dtype)

    padded = toks(3, 7, 9)
    padded[0, 4:] = 0
    padded[2, 2:] = 0
    ignore = toks(2, 6, 9)
    ignore[1, 3:] = -100
    first_pad = toks(2, 5, 9)
    first_pad[:, 0] = 0
    wide = _randn(g, 6, 2, 9).transpose(0, 1)  # (2, 6, 9), non-contiguous
    return [
        Case(args=(_randn(g, 2, 6, 9), toks(2, 6, 9)), label="float32 (B=2, T=6, V=9), no padding"),
        Case(args=(_randn(g, 3, 7, 9), padded, 0), label="pad_id=0 given positionally: rows padded at the end"),
        Case(args=(_randn(g, 2, 6, 9), ignore), kwargs={"pad_id": -100},
             label="pad_id=-100 as keyword, outside the vocabulary"),
        Case(args=(_randn(g, 2, 5, 9), first_pad, 0),
             label="pad_id=0 also as the first token of every row (an input, never a target)"),
        Case(args=(_randn(g, 1, 2, 5), toks(1, 2, 5)), label="T=2: one target"),
        Case(args=(_randn(g, 2, 6, 9, dtype=torch.float64), toks(2, 6, 9)), label="float64 logits"),
        Case(args=(_randn(g, 2, 6, 9, dtype=torch.float16), toks(2, 6, 9)),
             label="float16 logits: the loss in float32"),
        Case(args=(_randn(g, 2, 6, 9, dtype=torch.bfloat16), toks(2, 6, 9)),
             label="bfloat16 logits: the loss in float32"),
        Case(args=(_randn(g, 2, 6, 9, scale=200.0), toks(2, 6, 9)),
             label="logits of size ~200: log-softmax must not overflow"),
        Case(args=(wide, toks(2, 6, 9)), label="non-contiguous logits (a transposed view)"),
        Case(args=(_randn(g, 2, 6, 9), toks(2, 6, 9, torch.int32)), label="int32 tokens"),
        Case(args=(_randn(g, 2, 1, 9), toks(2, 1, 9)), raises="ValueError", label="T=1: nothing to predict"),
        Case(args=(_randn(g, 2, 6, 9), toks(2, 5, 9)), raises="ValueError", label="tokens shorter than the logits"),
        Case(args=(_randn(g, 2, 6), toks(2, 6, 9)), raises="ValueError", label="2-D logits"),
        Case(args=(_randn(g, 2, 4, 9), torch.zeros(2, 4, dtype=torch.long), 0), raises="ValueError",
             label="every target is padding"),
        Case(args=(_randn(g, 1, 4, 9), torch.tensor([[1, 2, 9, 3]])), raises="ValueError",
             label="a target equal to V (outside the vocabulary)"),
        Case(args=(_randn(g, 1, 4, 9), torch.tensor([[1.0, 2.0, 3.0, 4.0]])), raises="ValueError",
             label="float tokens"),
    ]


def lm_loss_grad_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    padded = torch.randint(0, 7, (2, 6), generator=g)
    padded[1, 3:] = 6
    return [
        Case(args=(_randn(g, 2, 6, 7), padded, 6), grad_output=torch.tensor(1.0),
             label="gradient: pad_id=6, padded positions get none"),
        Case(args=(_randn(g, 3, 4, 5, dtype=torch.float64), torch.randint(0, 5, (3, 4), generator=g)),
             grad_output=torch.tensor(2.0, dtype=torch.float64), label="gradient: float64, no padding"),
    ]


# ---------------------------------------------------------------------------------------------------
# warmup_cosine_lr


def warmup_cosine_lr_cases(seed: int) -> list[Case]:
    del seed
    cases = [Case(args=(s, 3e-3, 10, 100, 3e-4), label=f"step {s} of warm-up 10, total 100, min 3e-4")
             for s in (0, 4, 9, 10, 11, 37, 55, 99, 100, 101, 5000)]
    return cases + [
        Case(args=(0, 1.0, 0, 10), label="no warm-up: step 0 is max_lr"),
        Case(args=(5, 1.0, 0, 10), label="no warm-up, min_lr defaults to 0: step 5 of 10"),
        Case(args=(4, 2.0, 4, 4, 0.5), label="total == warmup: the decay is over at once (min_lr at step 4)"),
        Case(args=(3, 2.0, 4, 4, 0.5), label="total == warmup: still warming up at step 3"),
        Case(args=(7,), kwargs={"max_lr": 1.0, "warmup_steps": 2, "total_steps": 12, "min_lr": 0.1},
             label="keyword arguments"),
        Case(args=(3, 1.0, 8, 8, 1.0), label="min_lr == max_lr: constant after warm-up"),
        Case(args=(3.0, 1.0, 2, 10), raises="TypeError", label="a float step: TypeError"),
        Case(args=(True, 1.0, 2, 10), raises="TypeError", label="a bool step: TypeError"),
        Case(args=(3, 1.0, 2.0, 10), raises="TypeError", label="a float warmup_steps: TypeError"),
        Case(args=(-1, 1.0, 2, 10), raises="ValueError", label="step -1"),
        Case(args=(1, 1.0, -2, 10), raises="ValueError", label="warmup_steps -2"),
        Case(args=(1, 1.0, 5, 4), raises="ValueError", label="total_steps < warmup_steps"),
        Case(args=(1, 1.0, 2, 10, 2.0), raises="ValueError", label="min_lr > max_lr"),
        Case(args=(1, 1.0, 2, 10, -0.1), raises="ValueError", label="negative min_lr"),
        Case(args=(1, math.inf, 2, 10), raises="ValueError", label="infinite max_lr"),
    ]


# ---------------------------------------------------------------------------------------------------
# CapstoneLM


def _config_names(n_layers: int) -> list[str]:
    names = ["tok_emb.weight"]
    for i in range(n_layers):
        names += [f"blocks.{i}.{p}.weight" for p in ("attn_norm", "attn.wq", "attn.wk", "attn.wv", "attn.wo",
                                                     "ffn_norm", "ffn.w1", "ffn.w3", "ffn.w2")]
    return names + ["norm.weight"]


def _large_state(init: tuple, g: torch.Generator, **init_kwargs) -> dict:
    """The reference's state_dict with weights of scale 1/sqrt(fan_in) (embeddings N(0, 1), norms around 1): every
    part of the model then moves the logits by far more than the tolerance."""
    torch.manual_seed(0)
    state = CapstoneLM(*init, **init_kwargs).state_dict()
    out = {}
    for name, p in state.items():
        if name == "lm_head.weight":
            continue
        if p.dim() == 1:
            out[name] = 1.0 + _randn(g, *p.shape, scale=0.2)
        elif name == "tok_emb.weight":
            out[name] = _randn(g, *p.shape)
        else:
            out[name] = _randn(g, *p.shape, scale=1.5 / math.sqrt(p.shape[1]))
    out["lm_head.weight"] = out["tok_emb.weight"]
    return out


def capstone_lm_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(init: tuple, B: int, T: int, T_past: int | None, label: str, dtype=torch.long, **init_kwargs) -> Case:
        V, d, L, H, H_kv = init[:5]
        tokens = torch.randint(0, V, (B, T), generator=g).to(dtype)
        state = _large_state(init, g, **init_kwargs)
        if T_past is None:
            return Case(init=init, init_kwargs=init_kwargs, state=state, args=(tokens,), label=label)
        d_h = d // H
        past = [(_randn(g, B, H_kv, T_past, d_h), _randn(g, B, H_kv, T_past, d_h)) for _ in range(L)]
        return Case(init=init, init_kwargs=init_kwargs, state=state, args=(tokens, past), label=label)

    small = (13, 16, 2, 4, 2, 24)
    return [
        case(small, 2, 7, None, "GQA (4 heads, 2 kv heads), 2 blocks, T=7, no cache"),
        case((11, 24, 1, 6, 6, 32), 2, 5, None, "MHA: n_kv_heads = n_heads = 6"),
        case((11, 24, 2, 6, 1, 32), 2, 5, None, "MQA: one kv head for 6 query heads"),
        case((17, 32, 3, 4, 2, 40), 1, 9, None, "3 blocks, d_head=8, T=9"),
        case(small, 2, 1, 6, "one new token over a cache of 6"),
        case(small, 2, 3, 4, "a chunk of 3 tokens over a cache of 4 (bottom-right causal, positions 4..6)"),
        case(small, 1, 4, 0, "past of length 0: positions from 0"),
        case(small, 2, 6, None, "rope_base=500000 given as keyword", rope_base=500000.0),
        case(small, 2, 6, None, "rope_base=100 (positions matter more)", rope_base=100.0),
        case(small, 2, 6, None, "eps=0.5 given as keyword", eps=0.5),
        case(small, 3, 1, None, "T=1, no cache"),
        case(small, 2, 5, None, "int32 tokens", dtype=torch.int32),
        case((9, 16, 2, 8, 4, 24), 2, 6, None, "d_head=2: one rotated pair per head"),
        Case(init=(13, 30, 2, 4, 2, 24), state={}, args=(), raises="ValueError",
             label="n_heads=4 does not divide d_model=30"),
        Case(init=(13, 24, 2, 4, 3, 24), state={}, args=(), raises="ValueError",
             label="n_kv_heads=3 does not divide n_heads=4"),
        Case(init=(13, 12, 2, 4, 2, 24), state={}, args=(), raises="ValueError", label="odd d_head=3"),
        Case(init=(13, 16, 0, 4, 2, 24), state={}, args=(), raises="ValueError", label="n_layers=0"),
        Case(init=small, args=(torch.rand(2, 5),), raises="ValueError", label="float tokens"),
        Case(init=small, args=(torch.randint(0, 13, (5,), generator=g),), raises="ValueError",
             label="1-D tokens"),
        Case(init=small, args=(torch.randint(0, 13, (1, 2), generator=g),
                               [(_randn(g, 1, 2, 3, 4), _randn(g, 1, 2, 3, 4))]),
             raises="ValueError", label="a past of 1 layer for 2 blocks"),
    ]


def capstone_init_cases(seed: int) -> list[Case]:
    del seed  # the student's own initialisation is judged, whatever the seed
    return [
        Case(init=(101, 64, 4, 4, 2, 128), method="named_parameters",
             label="initialisation: V=101, d=64, 4 blocks, GQA 4/2, d_ff=128"),
        Case(init=(64, 96, 1, 6, 3, 160), method="named_parameters",
             label="initialisation: 1 block (residual std 0.02 / sqrt 2)"),
    ]


def initialised_as_stated(cases: list[Case], outputs: list) -> None:
    """Tied embeddings listed once, the stated names and shapes, N(0, 0.02) matrices, residual projections with
    std 0.02 / sqrt(2 n_layers), norm weights 1."""
    for case, out in zip(cases, outputs):
        V, d, L, H, H_kv, d_ff = case.init
        where = f"case '{case.label}'"
        assert isinstance(out, (list, tuple)), f"{where}: named_parameters() should yield (name, parameter) pairs"
        params = {}
        for item in out:
            assert isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str), \
                f"{where}: named_parameters() should yield (name, parameter) pairs"
            params[item[0]] = torch.as_tensor(item[1]).double()
        names = _config_names(L)
        if "lm_head.weight" in params:
            if "tok_emb.weight" in params:
                raise AssertionError(f"{where}: named_parameters() lists lm_head.weight and tok_emb.weight: tie "
                                     "them (the same Parameter), so the model has one (V, d) matrix, listed once")
            params["tok_emb.weight"] = params.pop("lm_head.weight")  # tied, registered under the head's name first
        missing, extra = sorted(set(names) - set(params)), sorted(set(params) - set(names))
        assert not missing and not extra, \
            f"{where}: parameters should be named as in the table; missing {missing[:4]}, unexpected {extra[:4]}"
        d_h = d // H
        shapes = {"attn.wq": (H * d_h, d), "attn.wk": (H_kv * d_h, d), "attn.wv": (H_kv * d_h, d),
                  "attn.wo": (d, H * d_h), "ffn.w1": (d_ff, d), "ffn.w3": (d_ff, d), "ffn.w2": (d, d_ff),
                  "attn_norm": (d,), "ffn_norm": (d,)}
        for name in names:
            p = params[name]
            part = name.split(".", 2)[-1].removesuffix(".weight") if name.startswith("blocks.") else None
            want = (V, d) if name == "tok_emb.weight" else (d,) if name == "norm.weight" else shapes[part]
            assert tuple(p.shape) == want, f"{where}: {name} has shape {tuple(p.shape)}, expected {want}"
            if p.dim() == 1:
                assert torch.all(p == 1), f"{where}: {name} (a norm's weight) should start at 1"
                continue
            std = 0.02 / math.sqrt(2 * L) if part in ("attn.wo", "ffn.w2") else 0.02
            got = float(p.std())
            assert abs(got - std) < 0.1 * std, \
                f"{where}: {name} should start with std {std:.4g} ({'0.02 / sqrt(2 n_layers)' if std != 0.02 else '0.02'}), " \
                f"got {got:.4g}"
            assert abs(float(p.mean())) < 5 * std / math.sqrt(p.numel()), f"{where}: {name} should have mean 0"


# ---------------------------------------------------------------------------------------------------
# sampling_probs


def _logits(*probs: float, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float64).log().to(dtype)


def sampling_probs_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    base = _logits(0.42, 0.25, 0.15, 0.1, 0.05, 0.03)
    masked = torch.tensor([1.0, -math.inf, 0.5, -math.inf, 0.0], dtype=torch.float64)
    return [
        Case(args=(base,), label="temperature 1, no filter: the softmax"),
        Case(args=(base, 0.5), label="temperature 0.5 (positional)"),
        Case(args=(base,), kwargs={"temperature": 2.0}, label="temperature 2.0 (keyword)"),
        Case(args=(torch.tensor([0.3, 2.0, 2.0, -1.0], dtype=torch.float64), 0.0),
             label="temperature 0: one-hot at the first of two equal maxima"),
        Case(args=(base, 0.0), kwargs={"top_k": 3, "top_p": 0.5}, label="temperature 0 ignores top_k and top_p"),
        Case(args=(base,), kwargs={"top_k": 1}, label="top_k=1: one-hot at the maximum"),
        Case(args=(base,), kwargs={"top_k": 3}, label="top_k=3"),
        Case(args=(torch.tensor([2.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64),), kwargs={"top_k": 2},
             label="top_k=2 with three logits tied at the 2nd largest: all three kept"),
        Case(args=(base,), kwargs={"top_k": 6}, label="top_k = V keeps everything"),
        Case(args=(base,), kwargs={"top_k": 50}, label="top_k > V keeps everything"),
        Case(args=(base,), kwargs={"top_p": 0.6}, label="top_p=0.6: 0.42 and 0.25 (the token that crosses p is kept)"),
        Case(args=(base,), kwargs={"top_p": 0.9}, label="top_p=0.9: four tokens"),
        Case(args=(base,), kwargs={"top_p": 0.3}, label="top_p=0.3 below the largest probability: one token"),
        Case(args=(base,), kwargs={"top_p": 1.0}, label="top_p=1 keeps everything"),
        Case(args=(_logits(0.4, 0.2, 0.2, 0.2),), kwargs={"top_p": 0.5},
             label="top_p=0.5 with three tied probabilities at the boundary: kept together"),
        Case(args=(base,), kwargs={"top_k": 4, "top_p": 0.7},
             label="top_k=4 then top_p=0.7 on the renormalised four"),
        Case(args=(base, 2.0), kwargs={"top_p": 0.6}, label="temperature 2 before top_p=0.6 (flatter: more kept)"),
        Case(args=(_randn(g, 2, 3, 11, scale=2.0, dtype=torch.float64),), kwargs={"top_k": 5, "top_p": 0.8},
             label="batch dims (2, 3, V=11), top_k=5, top_p=0.8"),
        Case(args=(masked,), label="-inf logits (masked tokens) get probability 0"),
        Case(args=(torch.tensor([1e4, 0.0, -1e4], dtype=torch.float64),), label="logits of size 1e4: stable softmax"),
        Case(args=(_randn(g, 4, 9),), kwargs={"temperature": 0.7}, label="float32 logits, temperature 0.7"),
        Case(args=(_randn(g, 3, 9, dtype=torch.float16),), label="float16 logits: float32 probabilities"),
        Case(args=(_randn(g, 3, 9, dtype=torch.bfloat16),), kwargs={"top_k": 4},
             label="bfloat16 logits: float32 probabilities"),
        Case(args=(base, -1.0), raises="ValueError", label="negative temperature"),
        Case(args=(base, math.nan), raises="ValueError", label="NaN temperature"),
        Case(args=(base, math.inf), raises="ValueError", label="infinite temperature"),
        Case(args=(base,), kwargs={"top_k": 0}, raises="ValueError", label="top_k=0"),
        Case(args=(base,), kwargs={"top_k": 2.0}, raises="ValueError", label="top_k=2.0 (a float)"),
        Case(args=(base,), kwargs={"top_k": True}, raises="ValueError", label="top_k=True (a bool)"),
        Case(args=(base,), kwargs={"top_p": 0.0}, raises="ValueError", label="top_p=0"),
        Case(args=(base,), kwargs={"top_p": 1.5}, raises="ValueError", label="top_p=1.5"),
    ]


# ---------------------------------------------------------------------------------------------------
# generate (through the notebook's GenerationProbe)


class CountingLM(nn.Module):
    """The notebook's toy model (test_generate): logits from the running sum of the tokens and the position; the
    cache is that running sum; it counts the positions it is fed."""

    def __init__(self, vocab: int = 7):
        super().__init__()
        self.vocab, self.fed = vocab, 0

    def forward(self, tokens, past=None):
        self.fed += tokens.shape[1]
        before = torch.zeros(tokens.shape[0], 1, dtype=torch.long) if past is None else past[0]
        T_past = 0 if past is None else past[1]
        sums = before + tokens.cumsum(1)
        pos = torch.arange(T_past, T_past + tokens.shape[1])
        logits = torch.cos(torch.arange(self.vocab) * (sums[..., None] * 0.7 + pos[:, None] * 1.3)).float()
        return logits, (sums[:, -1:], T_past + tokens.shape[1])


class GenerationProbe(nn.Module):
    """The reference side of the notebook's probe: the reference ``generate`` on a CountingLM."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab

    def forward(self, prompt, max_new_tokens, temperature, top_k, top_p, seed):
        toy = CountingLM(self.vocab)
        out = generate(toy, prompt, max_new_tokens, temperature, top_k, top_p, torch.Generator().manual_seed(seed))
        return out, toy.fed


def generate_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def prompt(B: int, T: int, V: int, dtype=torch.long) -> torch.Tensor:
        return torch.randint(0, V, (B, T), generator=g).to(dtype)

    return [
        Case(init=(7,), args=(prompt(2, 3, 7), 6, 0.0, None, None, 0), label="greedy, B=2, prompt of 3, 6 new"),
        Case(init=(11,), args=(prompt(3, 1, 11), 9, 0.0, None, None, 0), label="greedy from a prompt of 1 token"),
        Case(init=(7,), args=(prompt(1, 4, 7), 1, 0.0, None, None, 0),
             label="one new token: the prompt is read once and nothing more"),
        Case(init=(7,), args=(prompt(2, 3, 7), 0, 0.0, None, None, 0),
             label="max_new_tokens=0: the prompt back, unchanged"),
        Case(init=(9,), args=(prompt(2, 2, 9), 12, 1.0, None, None, 3),
             label="sampling at temperature 1 with torch.multinomial and the given generator"),
        Case(init=(9,), args=(prompt(2, 2, 9), 10, 0.7, 3, None, 5), label="sampling, temperature 0.7, top_k=3"),
        Case(init=(9,), args=(prompt(1, 3, 9), 10, 1.3, None, 0.8, 7), label="sampling, temperature 1.3, top_p=0.8"),
        Case(init=(7,), args=(prompt(2, 3, 7, torch.int32), 5, 0.0, None, None, 0), label="an int32 prompt stays int32"),
        Case(init=(7,), args=(prompt(1, 3, 7), -1, 0.0, None, None, 0), raises="ValueError",
             label="max_new_tokens=-1"),
        Case(init=(7,), args=(prompt(1, 3, 7), 2.0, 0.0, None, None, 0), raises="ValueError",
             label="max_new_tokens=2.0 (a float)"),
        Case(init=(7,), args=(torch.tensor([1, 2, 3]), 2, 0.0, None, None, 0), raises="ValueError",
             label="a 1-D prompt"),
        Case(init=(7,), args=(torch.zeros(1, 0, dtype=torch.long), 2, 0.0, None, None, 0), raises="ValueError",
             label="an empty prompt (T=0)"),
    ]


# ---------------------------------------------------------------------------------------------------
# attention_entropy and head_redundancy


def _weights(g: torch.Generator, *shape: int, mask: torch.Tensor | None = None, scale: float = 1.5,
             dtype=torch.float32) -> torch.Tensor:
    s = _randn(g, *shape, scale=scale, dtype=torch.float64)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return torch.softmax(s, dim=-1).nan_to_num(0.0).to(dtype)


def attention_entropy_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    lengths = torch.tensor([5, 3])
    padding = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]  # (2, 1, 1, 7)
    per_head = torch.rand(1, 3, 5, 5, generator=g) > 0.3
    per_head[..., 0] = True
    dirty = _weights(g, 2, 3, 6, 6, mask=causal)
    dirty = dirty + 0.05 * (~causal)  # weight left at masked positions: to be ignored
    sparse = _weights(g, 1, 2, 4, 8)
    sparse[..., 3] = 0.0  # exact zeros at allowed keys: 0 log 0 = 0
    sparse = sparse / sparse.sum(-1, keepdim=True)
    empty_rows = torch.ones(4, 4, dtype=torch.bool).tril()
    empty_rows[2] = False  # a query row that may see nothing
    short = torch.tensor([6, 3])  # sequences of 6 and 3 tokens in windows of 6: 5 rows with >= 2 keys, and 2
    ragged = (torch.ones(6, 6, dtype=torch.bool).tril()
              & (torch.arange(6)[None, :, None] < short[:, None, None])
              & (torch.arange(6)[None, None, :] < short[:, None, None]))[:, None]  # (2, 1, 6, 6)
    return [
        Case(args=(_weights(g, 2, 3, 6, 6, mask=causal), causal), label="causal (6, 6) mask, (B=2, h=3)"),
        Case(args=(_weights(g, 2, 3, 6, 6, mask=causal), causal), requires_grad=True, label="weights straight from a model's forward pass (requiring grad), causal mask"),
        Case(args=(_weights(g, 2, 4, 5, 7),), label="no mask: every key counts, T_q=5 < T_k=7"),
        Case(args=(_weights(g, 2, 2, 4, 7, mask=padding), padding),
             label="a padding mask (B, 1, 1, T_k) broadcast over heads and queries"),
        Case(args=(_weights(g, 1, 3, 5, 5, mask=per_head), per_head), label="a mask per head (1, H, T, T)"),
        Case(args=(dirty, causal), label="weights left at masked positions are ignored"),
        Case(args=(sparse,), label="exact zeros among the allowed keys (0 log 0 = 0)"),
        Case(args=(_weights(g, 1, 2, 4, 4, mask=empty_rows), empty_rows),
             label="a query row with no allowed key and one with a single key are left out"),
        Case(args=(_weights(g, 2, 2, 5, 5, scale=8.0),), label="peaked weights (scores of size ~8)"),
        Case(args=(_weights(g, 2, 3, 6, 6, mask=causal, dtype=torch.float64), causal), label="float64 weights"),
        Case(args=(_weights(g, 2, 3, 6, 6, mask=causal, dtype=torch.float16), causal),
             label="float16 weights: a float32 result"),
        Case(args=(_weights(g, 2, 3, 6, 6, mask=ragged), ragged),
             label="one mean over all rows: 5 rows in one sequence, 2 in the other (causal and padding mask)"),
        Case(args=(_weights(g, 3, 6, 6),), raises="ValueError", label="3-D weights"),
        Case(args=(_weights(g, 1, 2, 4, 4), causal.float()[:4, :4]), raises="ValueError", label="a float mask"),
        Case(args=(_weights(g, 1, 2, 4, 4), torch.ones(3, 4, dtype=torch.bool)), raises="ValueError",
             label="a mask that does not broadcast"),
        Case(args=(torch.ones(1, 2, 3, 1),), raises="ValueError", label="T_k=1: no row with two keys"),
    ]


def head_redundancy_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    w = _weights(g, 2, 4, 5, 5)
    copies = _weights(g, 2, 1, 4, 4).repeat(1, 3, 1, 1)
    zero_head = _weights(g, 1, 3, 4, 4)
    zero_head[:, 1] = 0.0
    return [
        Case(args=(w,), label="(B=2, h=4, T=5, T=5)"),
        Case(args=(_weights(g, 2, 3, 5, 6),), requires_grad=True, label="weights straight from a model's forward pass (requiring grad)"),
        Case(args=(_weights(g, 3, 3, 4, 9),), label="T_q=4 < T_k=9, B=3"),
        Case(args=(copies,), label="three identical heads: all ones"),
        Case(args=(_weights(g, 1, 1, 6, 6),), label="one head: [[1]]"),
        Case(args=(_weights(g, 5, 2, 4, 4).transpose(0, 1),), label="non-contiguous weights (a transposed view)"),
        Case(args=(_weights(g, 2, 3, 5, 5, dtype=torch.float64),), label="float64 weights"),
        Case(args=(_weights(g, 2, 3, 5, 5, dtype=torch.bfloat16),), label="bfloat16 weights: a float32 result"),
        Case(args=(_weights(g, 4, 5, 5),), raises="ValueError", label="3-D weights"),
        Case(args=(zero_head,), raises="ValueError", label="a head whose weights are all zero"),
    ]


# ---------------------------------------------------------------------------------------------------
# causal_gqa_attention (the bug hunt)


def causal_gqa_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def x(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return _randn(g, *shape, scale=scale, dtype=dt)

    name = f"{dtype}: "
    cases = [
        Case(args=(x(2, 4, 6, 8), x(2, 2, 6, 8), x(2, 2, 6, 8)), label=name + "GQA 4 heads over 2, T=6"),
        Case(args=(x(1, 6, 5, 4), x(1, 6, 5, 4), x(1, 6, 5, 4)), label=name + "MHA: 6 heads over 6"),
        Case(args=(x(2, 8, 7, 16), x(2, 1, 7, 16), x(2, 1, 7, 16)), label=name + "MQA: 8 heads over 1"),
        Case(args=(x(2, 6, 9, 8), x(2, 2, 9, 8), x(2, 2, 9, 8)), label=name + "groups of 3 (6 heads over 2)"),
    ]
    if dtype != "float32":
        return cases
    return cases + [
        Case(args=(x(3, 4, 1, 8), x(3, 2, 1, 8), x(3, 2, 1, 8)), label="T=1: each query sees itself"),
        Case(args=(x(2, 4, 6, 8, scale=6.0), x(2, 2, 6, 8, scale=6.0), x(2, 2, 6, 8)),
             label="large scores (entries of size ~6)"),
        Case(args=(x(2, 4, 6, 8), x(2, 6, 2, 8).transpose(1, 2), x(2, 2, 6, 8)),
             label="non-contiguous k (a transposed view)"),
        Case(args=(*far_below_qk(g, (2, 4), (2, 2), 6, 6), x(2, 2, 6, 16)),
             label="GQA 4 heads over 2, " + _FAR_BELOW),
        Case(args=(x(2, 4, 6, 8), x(2, 3, 6, 8), x(2, 3, 6, 8)), raises="ValueError",
             label="3 kv heads do not divide 4 query heads"),
        Case(args=(x(2, 4, 6, 8), x(2, 2, 5, 8), x(2, 2, 5, 8)), raises="ValueError", label="k shorter than q"),
        Case(args=(x(2, 4, 6, 8), x(1, 2, 6, 8), x(1, 2, 6, 8)), raises="ValueError", label="a different batch"),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract


CONTRACT = {
    "lm_loss": {
        "mean cross-entropy of tokens[:, t + 1] given logits[:, t] (targets shifted by one)":
            ["float32 (B=2, T=6, V=9), no padding", "T=2: one target"],
        "targets equal to pad_id are left out of the sum and of the count":
            ["pad_id=0 given positionally: rows padded at the end", "gradient: pad_id=6, padded positions get none"],
        "pad_id may lie outside [0, V), given as keyword": ["pad_id=-100 as keyword, outside the vocabulary"],
        "only targets are ignored, not inputs equal to pad_id":
            ["pad_id=0 also as the first token of every row (an input, never a target)"],
        "a 0-dim tensor, float32 for half-precision logits, else the logits' dtype":
            ["float64 logits", "float16 logits: the loss in float32", "bfloat16 logits: the loss in float32"],
        "gradients flow to the logits": ["gradient: float64, no padding",
                                         "gradient: pad_id=6, padded positions get none"],
        "stable for large logits": ["logits of size ~200: log-softmax must not overflow"],
        "accepts non-contiguous logits and int32 tokens": ["non-contiguous logits (a transposed view)",
                                                           "int32 tokens"],
        "raises ValueError for shapes that do not fit, T < 2, all padding, a target outside [0, V)":
            ["T=1: nothing to predict", "tokens shorter than the logits", "2-D logits", "every target is padding",
             "a target equal to V (outside the vocabulary)", "float tokens"],
    },
    "warmup_cosine_lr": {
        "linear warm-up max_lr * (step + 1) / warmup_steps":
            ["step 0 of warm-up 10, total 100, min 3e-4", "step 4 of warm-up 10, total 100, min 3e-4",
             "step 9 of warm-up 10, total 100, min 3e-4", "total == warmup: still warming up at step 3"],
        "cosine decay from max_lr at warmup_steps to min_lr at total_steps":
            ["step 10 of warm-up 10, total 100, min 3e-4", "step 37 of warm-up 10, total 100, min 3e-4",
             "step 55 of warm-up 10, total 100, min 3e-4", "step 99 of warm-up 10, total 100, min 3e-4",
             "step 100 of warm-up 10, total 100, min 3e-4", "no warm-up: step 0 is max_lr"],
        "min_lr after total_steps": ["step 101 of warm-up 10, total 100, min 3e-4",
                                     "step 5000 of warm-up 10, total 100, min 3e-4"],
        "total_steps == warmup_steps: the decay is over at once":
            ["total == warmup: the decay is over at once (min_lr at step 4)"],
        "min_lr defaults to 0; keyword arguments": ["no warm-up, min_lr defaults to 0: step 5 of 10",
                                                    "keyword arguments", "min_lr == max_lr: constant after warm-up"],
        "returns a Python float": ["step 37 of warm-up 10, total 100, min 3e-4"],
        "raises TypeError for a step count that is not an int (bool included)":
            ["a float step: TypeError", "a bool step: TypeError", "a float warmup_steps: TypeError"],
        "raises ValueError for negative steps, total < warmup, or not 0 <= min_lr <= max_lr finite":
            ["step -1", "warmup_steps -2", "total_steps < warmup_steps", "min_lr > max_lr", "negative min_lr",
             "infinite max_lr"],
    },
    "CapstoneLM": {
        "the weights of the table, by name and shape, and the logits of the reference with them":
            ["GQA (4 heads, 2 kv heads), 2 blocks, T=7, no cache", "3 blocks, d_head=8, T=9",
             "initialisation: V=101, d=64, 4 blocks, GQA 4/2, d_ff=128"],
        "query head h reads kv head floor(h H_kv / H); MHA and MQA as the two ends":
            ["MHA: n_kv_heads = n_heads = 6", "MQA: one kv head for 6 query heads"],
        "RoPE in the rotate-half layout with rope_base": ["rope_base=500000 given as keyword",
                                                          "rope_base=100 (positions matter more)",
                                                          "d_head=2: one rotated pair per head"],
        "RMSNorm with eps": ["eps=0.5 given as keyword"],
        "the cache: positions T_past.., bottom-right causal, present = past extended (keys after RoPE)":
            ["one new token over a cache of 6",
             "a chunk of 3 tokens over a cache of 4 (bottom-right causal, positions 4..6)",
             "past of length 0: positions from 0"],
        "any (B, T) integer tokens": ["T=1, no cache", "int32 tokens"],
        "tied embeddings: lm_head.weight is tok_emb.weight, listed once":
            ["initialisation: V=101, d=64, 4 blocks, GQA 4/2, d_ff=128"],
        "GPT-2's initialisation: N(0, 0.02), wo and w2 with 0.02 / sqrt(2 n_layers), norms at 1":
            ["initialisation: V=101, d=64, 4 blocks, GQA 4/2, d_ff=128",
             "initialisation: 1 block (residual std 0.02 / sqrt 2)"],
        "raises ValueError for sizes that do not fit, tokens not (B, T) integer, a past of the wrong length":
            ["n_heads=4 does not divide d_model=30", "n_kv_heads=3 does not divide n_heads=4", "odd d_head=3",
             "n_layers=0", "float tokens", "1-D tokens", "a past of 1 layer for 2 blocks"],
        "attention goes through F.scaled_dot_product_attention(enable_gqa=True)":
            "not gradable: only the outputs are graded; the debugging clinic relies on it",
        "the cell stands on its own": "visible only: the cell is graded with the reference's other exercises absent",
    },
    "sampling_probs": {
        "temperature 1 without filters is the softmax": ["temperature 1, no filter: the softmax"],
        "the logits are divided by the temperature (positional or keyword)":
            ["temperature 0.5 (positional)", "temperature 2.0 (keyword)", "float32 logits, temperature 0.7"],
        "temperature 0: one-hot at the first maximum; top_k, top_p do nothing":
            ["temperature 0: one-hot at the first of two equal maxima", "temperature 0 ignores top_k and top_p"],
        "top_k keeps the logits >= the k-th largest, ties kept; k >= V keeps all":
            ["top_k=1: one-hot at the maximum", "top_k=3",
             "top_k=2 with three logits tied at the 2nd largest: all three kept", "top_k = V keeps everything",
             "top_k > V keeps everything"],
        "top_p keeps j while the mass above p_j is < p, then renormalises":
            ["top_p=0.6: 0.42 and 0.25 (the token that crosses p is kept)", "top_p=0.9: four tokens",
             "top_p=0.3 below the largest probability: one token", "top_p=1 keeps everything",
             "top_p=0.5 with three tied probabilities at the boundary: kept together"],
        "in order: temperature, top_k, softmax, top_p":
            ["top_k=4 then top_p=0.7 on the renormalised four", "temperature 2 before top_p=0.6 (flatter: more kept)"],
        "any leading dims": ["batch dims (2, 3, V=11), top_k=5, top_p=0.8"],
        "-inf logits and large logits": ["-inf logits (masked tokens) get probability 0",
                                         "logits of size 1e4: stable softmax"],
        "float32 for float16, bfloat16, float32; float64 stays":
            ["float16 logits: float32 probabilities", "bfloat16 logits: float32 probabilities",
             "temperature 1, no filter: the softmax"],
        "raises ValueError for a negative or non-finite temperature, bad top_k or top_p":
            ["negative temperature", "NaN temperature", "infinite temperature", "top_k=0", "top_k=2.0 (a float)",
             "top_k=True (a bool)", "top_p=0", "top_p=1.5"],
    },
    "generate": {
        "greedy through the cache equals greedy without it": ["greedy, B=2, prompt of 3, 6 new",
                                                              "greedy from a prompt of 1 token"],
        "the prompt once, then each new token once (the last needs no call)":
            ["greedy, B=2, prompt of 3, 6 new", "one new token: the prompt is read once and nothing more"],
        "each token drawn with torch.multinomial(sampling_probs(...), 1, generator=generator)":
            ["sampling at temperature 1 with torch.multinomial and the given generator",
             "sampling, temperature 0.7, top_k=3", "sampling, temperature 1.3, top_p=0.8"],
        "(B, T + max_new_tokens), the prompt first, in its dtype; 0 new tokens: a copy":
            ["max_new_tokens=0: the prompt back, unchanged", "an int32 prompt stays int32"],
        "raises ValueError for max_new_tokens not an int >= 0, a prompt not (B, T >= 1)":
            ["max_new_tokens=-1", "max_new_tokens=2.0 (a float)", "a 1-D prompt", "an empty prompt (T=0)"],
        "no gradients are needed": "not gradable: a choice of efficiency, not of the result",
    },
    "attention_entropy": {
        "(H,): mean over batch and rows of -sum p log p / log n, n allowed keys":
            ["causal (6, 6) mask, (B=2, h=3)", "peaked weights (scores of size ~8)",
             "one mean over all rows: 5 rows in one sequence, 2 in the other (causal and padding mask)"],
        "mask None: every key counts": ["no mask: every key counts, T_q=5 < T_k=7"],
        "weights as a model returns them (requiring grad)":
            ["weights straight from a model's forward pass (requiring grad), causal mask"],
        "the mask broadcasts (padding, per head)": ["a padding mask (B, 1, 1, T_k) broadcast over heads and queries",
                                                     "a mask per head (1, H, T, T)"],
        "weights at masked positions are ignored; 0 log 0 = 0":
            ["weights left at masked positions are ignored", "exact zeros among the allowed keys (0 log 0 = 0)"],
        "rows with fewer than 2 allowed keys are left out":
            ["a query row with no allowed key and one with a single key are left out"],
        "float32 (float64 for float64)": ["float64 weights", "float16 weights: a float32 result"],
        "raises ValueError for weights not 4-D, a bad mask, a head without a row of >= 2 keys":
            ["3-D weights", "a float mask", "a mask that does not broadcast", "T_k=1: no row with two keys"],
    },
    "head_redundancy": {
        "(H, H) cosine similarity of the heads' weights flattened over (B, T_q, T_k)":
            ["(B=2, h=4, T=5, T=5)", "T_q=4 < T_k=9, B=3", "one head: [[1]]"],
        "identical heads give 1": ["three identical heads: all ones"],
        "accepts non-contiguous weights": ["non-contiguous weights (a transposed view)"],
        "weights as a model returns them (requiring grad)": ["weights straight from a model's forward pass (requiring grad)"],
        "float32 (float64 for float64)": ["float64 weights", "bfloat16 weights: a float32 result"],
        "raises ValueError for weights not 4-D or a head of zeros": ["3-D weights", "a head whose weights are all zero"],
    },
    "causal_gqa_attention": {
        "query head h reads kv head floor(h H_kv / H)":
            ["float32: GQA 4 heads over 2, T=6", "float32: groups of 3 (6 heads over 2)",
             "float32: MQA: 8 heads over 1", "float32: MHA: 6 heads over 6"],
        "query i reads keys j <= i, scale 1/sqrt(d)": ["float32: GQA 4 heads over 2, T=6",
                                                       "T=1: each query sees itself"],
        "the future removed (-inf), whatever the scores: every allowed score far below -1e4 too":
            ["GQA 4 heads over 2, " + _FAR_BELOW],
        "stable for large scores; non-contiguous inputs": ["large scores (entries of size ~6)",
                                                           "non-contiguous k (a transposed view)"],
        "the inputs' dtype": ["float16: GQA 4 heads over 2, T=6", "float16: MQA: 8 heads over 1"],
        "raises ValueError for shapes that do not fit":
            ["3 kv heads do not divide 4 query heads", "k shorter than q", "a different batch"],
    },
}
