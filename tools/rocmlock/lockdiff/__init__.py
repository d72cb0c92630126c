"""pixi's lock diff, from lock text alone: pixi.lock's YAML read as rattler reads it (``lockyaml``: typed strings,
no anchors), the entries of two locks compared as ``pixi update --json`` compares them, and the changes rendered as
its JSON, pixi-diff-to-markdown's tables for a pull request, or lines for people (``diff``). Nothing here solves,
loads rattler or knows a workspace: ``lock`` builds the entries of a lock it has just written from its records
(``rocmlock.lock.lockentry``) and reads lock files with rattler before they are compared here.

May import: rocmlock.errors, rocmlock.util.
"""
