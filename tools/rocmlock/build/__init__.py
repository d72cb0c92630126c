"""Building: the plan of recipe variants (``plan``, ``recipes``, ``rebuild``), their sources fetched and cached
offline (``sources``, ``sourcefetch``, ``aotriton``) and the ordered, resumable build (``builder``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.channel, rocmlock.host.
"""
