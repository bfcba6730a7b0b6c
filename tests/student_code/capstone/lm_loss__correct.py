def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of predicting tokens[:, t + 1] from logits[:, t], targets equal to pad_id left out."""
    if logits.dim() != 3 or tokens.dim() != 2 or logits.shape[:2] != tokens.shape:
        raise ValueError(f"need logits (B, T, V) and tokens (B, T), got {tuple(logits.shape)}, {tuple(tokens.shape)}")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError("tokens must be integers")
    B, T, V = logits.shape
    if T < 2:
        raise ValueError("T < 2: nothing to predict")
    predictions = logits[:, :-1].reshape(-1, V)
    if logits.dtype in (torch.float16, torch.bfloat16):
        predictions = predictions.float()
    targets = tokens[:, 1:].reshape(-1).long()
    if pad_id is not None:
        keep = targets != pad_id
        predictions, targets = predictions[keep], targets[keep]
    if targets.numel() == 0:
        raise ValueError("every target is padding")
    if (targets < 0).any() or (targets >= V).any():
        raise ValueError("a target lies outside [0, V)")
    return F.cross_entropy(predictions, targets)
