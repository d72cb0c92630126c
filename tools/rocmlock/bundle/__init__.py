"""Air-gapped bundles: ``rocmlock pack`` writes one (``pack``, ``wheels``, ``signing``, the node ``installer``) in
the format ``layout`` defines, ``rocmlock unpack`` admits and installs it offline (``unpack``, ``admit``), and
``rocmlock audit`` reads the device code in a bundle, a package or a prefix (``audit``; unpack runs it).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu, rocmlock.workspace, rocmlock.lock, rocmlock.host, rocmlock.prefix.
"""
