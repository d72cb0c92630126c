"""Getting an environment onto nodes: install a locked environment (``install``), pack it into a bundle and
unpack it offline (``pack``, ``fetch``, ``wheels``, ``unpack``, ``admit``, ``pkgcheck``, ``signing``, ``bundle``,
``installer``), verify it with the probe (``verify``) and write training presets for it (``preset``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.lock, rocmlock.host.
"""
