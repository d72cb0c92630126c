"""The machine: a build host's ROCm, toolchain and components (``doctor`` and its ``doctor_*`` checks, ``rocm``,
TheRock's layouts in ``therock``), MAGMA on the host (``magma``) and what a node offers a bundle (``node``: its GPUs and ROCm).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace.
"""
