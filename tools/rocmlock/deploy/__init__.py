"""Getting an environment onto nodes: install a locked environment (``install``), pack it into a bundle and
unpack it offline (``pack``, ``fetch``, ``wheels``, ``unpack``, ``admit``, ``pkgcheck``, ``signing``, ``bundle``,
``installer``), verify it with the probe (``verify``, on every node of a Slurm allocation: ``slurm_verify``), merge
many nodes' probe reports (``report``, ``report_read``), write training presets for it (``preset``) and build
container images of it (``image``; a base image read through ``oci``, ``ocischema``, ``ocilayer``, ``ociref``, or
made by debootstrap: ``debianbase``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.lock, rocmlock.host.
"""
