"""Training presets: a LLaMA-Factory config for one GPU target and method (``preset``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace.
"""
