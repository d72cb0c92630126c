"""rocmlock: per-GPU-target conda/pixi environments for LLM fine-tuning on AMD GPUs."""

__version__ = "0.1.0"
