"""VTA (TVM's Versatile Tensor Accelerator) as the Alkali CSD runs it: hardware description from the
log2 configuration, the 128-bit ISA, a bit-exact functional simulator with event timing, and the
TFLite delegate (exact and alkali arithmetic). See docs/targets/vta.md."""
