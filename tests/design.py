"""What the design fixes for every chapter: its exercises (DESIGN.md's chapter table, plus the bug hunts
that the README's "Writing a chapter" names), in notebook order."""

EXERCISES = {
    "ch01_rnn_bottleneck": ["rnn_forward", "additive_scores", "attention_pool", "bahdanau_decoder_step"],
    "ch02_qkv": ["project_qkv", "softmax", "scaled_dot_product_attention", "SelfAttention", "sinusoidal_positions"],
    "ch03_scaling": ["dot_product_variance", "variance_z_test", "softmax_entropy", "softmax_jacobian", "softmax_vjp"],
    "ch04_masks": ["causal_mask", "padding_mask", "attention_mask", "document_mask", "masked_softmax",
                   "causal_attention"],
    "ch05_multihead": ["split_heads", "merge_heads", "heads_attention", "MultiHeadAttention", "attention_param_count"],
    "ch06_residual_norm": ["layer_norm", "layer_norm_backward", "rms_norm", "FeedForward", "SwiGLU", "PostNormBlock",
                           "PreNormBlock"],
    "ch07_backprop": ["attention_backward", "attention_backward_from_lse", "AttentionFunction",
                      "CrossAttentionFunction"],
    "ch08_complexity": ["attention_cost", "roofline_time", "loglog_slope", "chunked_attention"],
    "ch09_flash": ["online_softmax", "flash_attention_forward", "flash_attention_backward", "triton_attention_forward"],
    "ch10_decoding": ["bottom_right_causal_mask", "decode_step", "GroupedQueryAttention", "kv_cache_bytes",
                      "split_kv_attention", "cached_attention"],
    "ch11_long_context": ["apply_rope", "alibi_bias", "sliding_window_mask", "linear_attention",
                          "rope_cached_attention"],
    "ch12_capstone": ["lm_loss", "warmup_cosine_lr", "CapstoneLM", "sampling_probs", "generate",
                      "attention_entropy", "head_redundancy", "causal_gqa_attention"],
}
