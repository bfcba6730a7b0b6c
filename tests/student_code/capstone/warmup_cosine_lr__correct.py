def warmup_cosine_lr(step: int, max_lr: float, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """The learning rate at `step` (from 0): linear warm-up to max_lr, cosine decay to min_lr, then min_lr."""
    for value in (step, warmup_steps, total_steps):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"step counts must be ints, got {value!r}")
    if step < 0 or warmup_steps < 0 or total_steps < warmup_steps:
        raise ValueError("need step >= 0 and 0 <= warmup_steps <= total_steps")
    if not (math.isfinite(min_lr) and math.isfinite(max_lr) and 0 <= min_lr <= max_lr):
        raise ValueError("need 0 <= min_lr <= max_lr, both finite")
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return float(min_lr)
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))
