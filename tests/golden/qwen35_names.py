"""The tensors of a Qwen3.5 text checkpoint our loader reads (SPEC-qwen35.md
section 2, text-only prefix `model.`), for make_golden.py and train_tiny.py.
Standard library only: train_tiny.py's --check-names runs without torch."""

LIN = "linear_attention"


def expected_shapes(get):
    """name -> shape; get(key) is a config value by its config.json name
    (getattr on a transformers config, or a config.json dict's item)."""
    H, I, V = get("hidden_size"), get("intermediate_size"), get("vocab_size")
    Hq, Hkv, D = get("num_attention_heads"), get("num_key_value_heads"), get("head_dim")
    Hk, Hv = get("linear_num_key_heads"), get("linear_num_value_heads")
    dk, dv, Kc = get("linear_key_head_dim"), get("linear_value_head_dim"), get("linear_conv_kernel_dim")
    key_dim, value_dim = Hk * dk, Hv * dv
    conv_dim = 2 * key_dim + value_dim
    exp = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    if not get("tie_word_embeddings"):
        exp["lm_head.weight"] = (V, H)
    for i, t in enumerate(get("layer_types")):
        p = "model.layers.%d." % i
        exp[p + "input_layernorm.weight"] = (H,)
        exp[p + "post_attention_layernorm.weight"] = (H,)
        exp[p + "mlp.gate_proj.weight"] = (I, H)
        exp[p + "mlp.up_proj.weight"] = (I, H)
        exp[p + "mlp.down_proj.weight"] = (H, I)
        if t == LIN:
            q = p + "linear_attn."
            exp[q + "in_proj_qkv.weight"] = (conv_dim, H)
            exp[q + "in_proj_z.weight"] = (value_dim, H)
            exp[q + "in_proj_b.weight"] = (Hv, H)
            exp[q + "in_proj_a.weight"] = (Hv, H)
            exp[q + "conv1d.weight"] = (conv_dim, 1, Kc)
            exp[q + "dt_bias"] = (Hv,)
            exp[q + "A_log"] = (Hv,)
            exp[q + "norm.weight"] = (dv,)
            exp[q + "out_proj.weight"] = (H, value_dim)
        else:
            q = p + "self_attn."
            exp[q + "q_proj.weight"] = (Hq * D * 2, H)
            exp[q + "k_proj.weight"] = (Hkv * D, H)
            exp[q + "v_proj.weight"] = (Hkv * D, H)
            exp[q + "o_proj.weight"] = (H, Hq * D)
            exp[q + "q_norm.weight"] = (D,)
            exp[q + "k_norm.weight"] = (D,)
    return exp
