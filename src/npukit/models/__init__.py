"""Model references and loading: float goldens, quantized references, checkpoints, shape presets."""
