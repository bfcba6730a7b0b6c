def warmup_cosine_lr(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    """One formula for the decay and after it: the progress clamped to [0, 1], pi when total == warmup."""
    if any(type(n) is not int for n in (step, warmup_steps, total_steps)):
        raise TypeError("step, warmup_steps and total_steps must be ints")
    if min(step, warmup_steps) < 0 or total_steps < warmup_steps:
        raise ValueError("bad step counts")
    if not (0 <= min_lr <= max_lr < math.inf):
        raise ValueError("need 0 <= min_lr <= max_lr < inf")
    if step < warmup_steps:
        return float(max_lr) * float(step + 1) / float(warmup_steps)
    span = total_steps - warmup_steps
    progress = 1.0 if span == 0 else min(1.0, (step - warmup_steps) / span)
    cosine = (1.0 + math.cos(math.pi * progress)) / 2.0
    return float(max_lr * cosine + min_lr * (1.0 - cosine))
