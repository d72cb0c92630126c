"""Building: the plan of recipe variants (``plan``, ``recipes``, ``rebuild``), their sources fetched and cached
offline (``sources``, ``sourcefetch``, ``aotriton``), the ordered, resumable build (``builder``) and the same as
Slurm batch jobs chained by ``afterok`` (``slurm``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.channel, rocmlock.host.
"""
