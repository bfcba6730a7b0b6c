import math

import torch


def flash_attention_forward(q, k, v, block_q=64, block_k=64, causal=False):
    """Tiles, but every tile's scores are kept for a second pass: the whole matrix, in pieces."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    T_q, T_k = q.shape[-2], k.shape[-2]
    outs, lses = [], []
    for i in range(0, T_q, block_q):
        tiles = []
        for j in range(0, T_k, block_k):
            s = q[..., i:i + block_q, :] @ k[..., j:j + block_k, :].transpose(-2, -1) * scale
            if causal:
                rows = torch.arange(i, min(i + block_q, T_q))[:, None]
                cols = torch.arange(j, min(j + block_k, T_k))[None, :]
                s = s.masked_fill(cols > rows, float("-inf"))
            tiles.append(s)
        all_tiles.extend(tiles)
        m = torch.stack([t.amax(-1) for t in tiles]).amax(0)
        l = sum((t - m[..., None]).exp().sum(-1) for t in tiles)
        acc = sum((t - m[..., None]).exp() @ v[..., j * block_k:(j + 1) * block_k, :]
                  for j, t in enumerate(tiles))
        outs.append(acc / l[..., None])
        lses.append(m + l.log())
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)


all_tiles = []  # kept for "later analysis"
