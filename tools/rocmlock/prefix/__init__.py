"""From a lock to files in a prefix: a lock's packages downloaded and their hashes checked (``fetch``), admitted before
anything is linked (``pkgcheck``: no path leaves the prefix) and installed by rattler exactly as locked
(``install``). ``rocmlock install``, the bundles and the images all stand on it.

May import: rocmlock.errors, rocmlock.util, rocmlock.workspace, rocmlock.lock, rocmlock.host.
"""
