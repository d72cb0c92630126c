"""Container images: ``rocmlock image`` (``builder``) installs one locked environment as an OCI layer with its
activation (``activation``, ``files``, ``hints``) on a base read through ``oci`` (layout and registry), ``ocischema``,
``ocilayer`` and ``ociref``.

May import: rocmlock.errors, rocmlock.util, rocmlock.workspace, rocmlock.prefix, rocmlock.fleet.
"""
