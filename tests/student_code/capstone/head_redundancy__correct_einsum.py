def head_redundancy(weights):
    """Every pair's dot product with einsum, without flattening: sum over b, i, j of w[b, g, i, j] w[b, h, i, j]."""
    if not torch.is_tensor(weights) or weights.ndim != 4 or not torch.is_floating_point(weights):
        raise ValueError("need floating (B, H, T_q, T_k) weights")
    w = weights.double() if weights.dtype == torch.float64 else weights.float()
    gram = torch.einsum("bgij,bhij->gh", w, w)                 # (H, H) dot products
    sq = torch.diagonal(gram)
    if bool((sq <= 0).any()):
        raise ValueError("a head is all zeros")
    return gram / torch.sqrt(sq[:, None] * sq[None, :])
