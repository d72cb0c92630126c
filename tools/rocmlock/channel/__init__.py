"""Conda channels: publishing packages to a directory, prefix.dev, quetz, Artifactory, anaconda.org or S3
(``publish``, ``channel_dir``; ``devicecheck``: a package's GPU code against its build string), reading a
channel's repodata (``repodata``) and serving a directory over HTTP with basic auth (``serve``,
``python -m rocmlock.channel.serve``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu.
"""
