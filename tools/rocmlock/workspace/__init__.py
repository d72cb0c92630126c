"""The pixi workspace model: ``pixi.toml`` (or ``pyproject.toml``'s ``[tool.pixi]``) read once and validated
(``manifest``: ``load_workspace``), its tables (``tables``, ``pixi_keys``, ``pyproject``, ``platforms``,
``dependencies``, ``pypi``), pixi's own rules for channels and virtual packages (``pixi_compat``), and an
environment resolved from its features (``model``: ``Workspace``, ``Environment``).

May import: rocmlock.errors, rocmlock.util, rocmlock.gpu.
"""
