"""I2_S end to end: a GGUF written here byte by byte (GGUF v3 as in ggml docs/gguf.md; I2_S tensors
packed by hand from the layout in refs/ternary.md §3.1) loads to the same model as the safetensors
checkpoint of the same weights.

I2_S is ggml type 36 in bitnet.cpp's ggml fork: Eddie-Wang1120/llama.cpp (microsoft/BitNet's
3rdparty/llama.cpp) gguf-py/gguf/constants.py @13e129947db4: ``I2_S = 36`` in GGMLQuantizationType.
"""

import struct

import bitnet_tiny as tiny
import numpy as np
import pytest

from npukit.models.bitnet import load_bitnet

I2_S, F32_T = 36, 0
GMAP = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
        "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
NMAP = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
        "self_attn.attn_sub_norm": "attn_sub_norm", "mlp.ffn_sub_norm": "ffn_sub_norm"}


def i2s_bytes(t: np.ndarray, scale: float) -> bytes:
    """x86 I2_S: per 128 weights (row-major), 32 bytes; weight j → byte j % 32, bits 7-6 for
    j < 32, 5-4, 3-2, 1-0 (MSB first); code = w + 1; then one fp32 scale; padded to n/4 + 32."""
    flat = [int(v) for v in t.reshape(-1)]
    out = bytearray()
    for b0 in range(0, len(flat), 128):
        block = [0] * 32
        for j in range(128):
            block[j % 32] |= (flat[b0 + j] + 1) << (6 - 2 * (j // 32))
        out += bytes(block)
    out += struct.pack("<f", scale)
    return bytes(out) + bytes(len(flat) // 4 + 32 - len(out))


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, c, sd, tern):
    kv = [("general.architecture", 8, "bitnet"), ("bitnet.block_count", 4, c["num_hidden_layers"]),
          ("bitnet.embedding_length", 4, c["hidden_size"]),
          ("bitnet.feed_forward_length", 4, c["intermediate_size"]),
          ("bitnet.attention.head_count", 4, c["num_attention_heads"]),
          ("bitnet.attention.head_count_kv", 4, c["num_key_value_heads"]),
          ("bitnet.attention.key_length", 4, c["head_dim"]), ("bitnet.rope.freq_base", 6, c["rope_theta"]),
          ("bitnet.attention.layer_norm_rms_epsilon", 6, c["rms_norm_eps"]),
          ("bitnet.context_length", 4, c["max_position_embeddings"])]
    tensors = [("token_embd.weight", F32_T, sd["model.embed_tokens.weight"].shape,
                sd["model.embed_tokens.weight"].astype("<f4").tobytes()),
               ("output_norm.weight", F32_T, sd["model.norm.weight"].shape,
                sd["model.norm.weight"].astype("<f4").tobytes())]
    for i in range(c["num_hidden_layers"]):
        for n, g in GMAP.items():
            t, s = tern[f"model.layers.{i}.{tiny.LINEARS[n]}.{n}.weight"]
            tensors.append((f"blk.{i}.{g}.weight", I2_S, t.shape, i2s_bytes(t, s)))
        for n, g in NMAP.items():
            w = sd[f"model.layers.{i}.{n}.weight"]
            tensors.append((f"blk.{i}.{g}.weight", F32_T, w.shape, w.astype("<f4").tobytes()))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, vt, v in kv:
        head += _str(key) + struct.pack("<I", vt)
        head += _str(v) if vt == 8 else struct.pack({4: "<I", 6: "<f"}[vt], v)
    data, offsets = b"", []
    for *_, blob in tensors:
        data += bytes(-len(data) % 32)
        offsets.append(len(data))
        data += blob
    for (name, tid, shape, _), off in zip(tensors, offsets, strict=True):
        dims = list(reversed(shape))  # GGUF lists the row length (ne0) first
        head += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", tid, off)
    path.write_bytes(head + bytes(-len(head) % 32) + data)
    return path


def test_i2s_block_layout_by_hand():
    t = np.zeros(128, np.int8)
    t[0], t[32], t[64], t[95], t[127] = 1, -1, 1, -1, 1  # byte 0: +1,-1,+1,0 → codes 2,0,2,1
    b = i2s_bytes(t, 0.5)
    assert b[0] == 0b10_00_10_01 and b[31] == 0b01_01_00_10 and b[1] == 0b01_01_01_01
    assert struct.unpack("<f", b[32:36])[0] == 0.5 and len(b) == 128 // 4 + 32


@pytest.mark.parametrize("mode", ["golden", "quant"])
def test_i2s_gguf_equals_safetensors(tmp_path, mode):
    c = tiny.config("offline")
    sd, tern = tiny.ternary_weights(c, seed=5)
    st = load_bitnet(tiny.write_offline(tmp_path / "hf", c, sd, tern), mode=mode)
    gg = load_bitnet(write_gguf(tmp_path / "m.gguf", c, sd, tern), mode=mode)
    for i in range(c["num_hidden_layers"]):
        for n in GMAP:
            a, b = st.w.layers[i].linears[n], gg.w.layers[i].linears[n]
            assert np.array_equal(a.t, b.t) and a.scale == b.scale and not b.online
    la = st.forward([5, 17, 42, 99], st.new_cache())
    lb = gg.forward([5, 17, 42, 99], gg.new_cache())
    assert np.array_equal(la, lb)


def test_i2s_tensor_decodes_to_trits_times_scale(tmp_path):
    from npukit.models.gguf import GGUFFile

    c = tiny.config("offline")
    sd, tern = tiny.ternary_weights(c, seed=6)
    g = GGUFFile(write_gguf(tmp_path / "m.gguf", c, sd, tern))
    t, s = tern[f"model.layers.0.{tiny.LINEARS['down_proj']}.down_proj.weight"]
    w = g.float32("blk.0.ffn_down.weight")
    assert g.type_name("blk.0.ffn_down.weight") == "I2_S" and w.dtype == np.float32
    assert np.array_equal(w, t.astype(np.float32) * np.float32(s)) and np.count_nonzero(w) > 0
