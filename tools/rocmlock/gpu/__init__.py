"""What a GPU target is: the GPU table (``targets``: ``data/gpu_targets.toml``, ISA, backends, skip reasons)
and reading the code built for one (``elf``: the ELF files a HIP library or MAGMA is made of; ``offload``: the
clang offload bundles and AMDGPU code objects in them, and which GPUs their code runs on; ``kpack``: TheRock's
kpack-split libraries and their ``.kpack`` archives; ``devicecode``: every file with device code in a directory
tree or a conda package; ``stream``: the same read in one pass from a stream that cannot seek, a package's member).

May import: rocmlock.errors, rocmlock.util.
"""
