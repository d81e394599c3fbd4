"""BitNet b1.58: float (golden) and integer (quant, ternfpga datapath) references, checkpoint loading."""

from npukit.models.bitnet.config import BitNetConfig
from npukit.models.bitnet.load import load_bitnet, load_gguf, load_hf_dir, synthetic_weights
from npukit.models.bitnet.model import (
    BitNet,
    BitNetWeights,
    KVCache,
    LayerWeights,
    TernaryLinear,
    absmean_ternarize,
    act_quant,
)

__all__ = [
    "BitNet", "BitNetConfig", "BitNetWeights", "KVCache", "LayerWeights", "TernaryLinear",
    "absmean_ternarize", "act_quant", "load_bitnet", "load_gguf", "load_hf_dir",
    "synthetic_weights",
]
