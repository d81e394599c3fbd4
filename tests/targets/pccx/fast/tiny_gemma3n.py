"""The tiny Gemma 3n config the fast-executor tests share: three layers (one sliding, two full, the last
sharing KV), a window of 4 so a few tokens wrap it, unequal FFN widths."""

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=64, vocab_size_per_layer_input=64, hidden_size=32,
    hidden_size_per_layer_input=8, intermediate_size=[48, 64, 48], num_hidden_layers=3,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, laurel_rank=8, num_kv_shared_layers=1,
    sliding_window=4, layer_types=[SL, FU, FU], activation_sparsity_pattern=[0.95, 0, 0],
    max_position_embeddings=512, altup_num_inputs=2, final_logit_softcapping=30.0,
)


def assert_fast_follows_reference(ref, fast, prompt, steps: int) -> None:
    """Prefill ``prompt`` then greedy-decode ``steps`` tokens on both drivers: logits bit for bit and the
    executor's Work records equal at every token."""
    import numpy as np

    a, b = ref.prefill(prompt), fast.prefill(prompt)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    tok = int(np.argmax(a))
    for _ in range(steps):
        a, b = ref.step(tok), fast.step(tok)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        assert fast.last_works == ref.last_works
        tok = int(np.argmax(a))
