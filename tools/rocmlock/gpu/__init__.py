"""What a GPU target is: the GPU table (``targets``: ``data/gpu_targets.toml``, ISA, backends, skip reasons)
and reading the code built for one (``elf``: the ELF files a HIP library or MAGMA is made of).

May import: rocmlock.errors, rocmlock.util.
"""
