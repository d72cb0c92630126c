"""Tracking upstream: newer releases (``outdated``, through the one HTTP ``client``, whose answers ``pypijson``
parses and checks), bumping pins across
``recipes/variants.yaml`` and the recipes (``bump``, ``pins``, ``yamledit``) and requirements kept in sync with
an sdist's ``pyproject.toml`` (``reqsync``).

May import: rocmlock.errors, rocmlock.util, rocmlock.build.
"""
