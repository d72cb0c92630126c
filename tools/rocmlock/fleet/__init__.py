"""Is the environment right on every node: the probe run on one node (``verify``) or on every node of a Slurm
allocation (``slurm_verify``), and many nodes' probe reports read and merged (``report_read``, ``report``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace.
"""
