"""The developers' own tools: chapter and grading benchmarks, the attention benchmark and its GPU
recording, the red team, sample submissions."""
