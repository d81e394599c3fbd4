"""GGUF decoder LLMs (Gemma 3, Llama) in pccx W4A8 arithmetic: `w4a8` (weight policy and the grouped
GEMV), `model` (the quantized forward pass, the ``quant`` target)."""
