"""Conda exports of a lock, as pure renderers (records in, text out; no timestamps, fixed order).

``envs/<env>/environment.yml``: name, channels and exact ``name=version=build`` pins, for
``conda env create -f``. ``envs/<env>/conda-<platform>.lock``: an ``@EXPLICIT`` file, one package
URL per line with its sha256, dependencies before dependents, for ``conda create --file``.
PyPI packages of a pixi.lock go into environment.yml's ``pip:`` section pinned exactly (conda hands
that list to ``python -m pip install -r`` in the new environment: conda/env/installers/pip.py) and into
``envs/<env>/requirements-<platform>.txt`` in pip's hash-checking format, which an ``@EXPLICIT`` file
cannot carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rattler import PackageRecord, RepoDataRecord

from rocmlock.errors import InputError
from rocmlock.lock.condalock import CONDA_LOCK_NAME, render_conda_lock
from rocmlock.lock.generated import HEADER
from rocmlock.lock.lockfile import UNSAFE_HINT, LockedPlatform, pin_problem, record_problem, view
from rocmlock.util.credentials import redact_url
from rocmlock.util.text import escape, line_problem
from rocmlock.workspace.pypi import DEFAULT_INDEXES, PypiIndexes, PypiPin, SourcePackage, render_requirements

# The workspace root as seen from envs/<env>/, where every export is written.
ROOT_FROM_EXPORTS = "../.."


def _gpu_comment(platform: LockedPlatform) -> list[str]:
    vps = [v for v in platform.virtual_packages if v.startswith("__amdgpu")]
    return [f"# virtual packages: {', '.join(vps)}"] if vps else []


# conda reads environment.yml differently across versions (conda/conda, tags 23.11.0 .. 26.7.1, run by
# hand as the README records): up to 26.5 `conda env create` runs conda/env/installers/conda.py, which
# drops a `nodefaults` entry and then leaves the .condarc channels out; from 26.7.0 `env create` is
# `conda create` (conda/cli/main_env_create.py -> conda/cli/install.py), which hands every listed
# channel to the solver, so `nodefaults` is fetched as a channel and fails. Channel-qualified pins
# (`<url>::name=...`) are no way out: before 26.7, conda's MatchSpec keeps only the last path segment
# of a channel URL and looks it up on anaconda.org. So: plain exact pins, no `nodefaults`.
YML_NOTES = (
    "# Exact name=version=build pins from the channels below, for `conda env create -f` (conda 23.x-26.x).",
    "# conda also reads the channels of your .condarc (after these; `defaults` when it lists none); they can",
    "# only supply a package of the very same name, version and build. To keep them out:",
    "#   conda 26.7+: conda create -n <name> --file environment.yml --override-channels -c <each channel below>",
    "#   conda 24.9+: conda create -n <name> --file conda-<platform>.lock   (URLs and sha256, no channels read)",
    "# No `nodefaults` entry: conda 26.7+ fetches it as a channel and fails.",
)


# conda 26.7.1 gives every python 2.*/3.* record a `pip` dependency when it reads repodata
# (conda/core/subdir_data.py:695-699; the sharded path too, conda/_private/shards/subset.py:213-216), because
# `add_pip_as_python_dependency` is on by default (conda/base/context.py:221). A lock never holds that `pip`
# (rattler and pixi add nothing), so conda needs one the lock does not pin: a channel without it fails the solve
# (UnsatisfiableError on python), one with it (conda-forge) installs an unpinned pip.
PIP_NOTES = (
    "# python without pip: conda adds `pip` to python's dependencies (add_pip_as_python_dependency, on by default),",
    "# which this lock does not hold. To create exactly the locked packages:",
    "#   CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY=false conda env create -f environment.yml",
)


def _pip_notes(records: Sequence[RepoDataRecord], pins: Sequence[PypiPin]) -> tuple[str, ...]:
    names = {view(r).name for r in records}
    # A pip: section needs pip anyway (conda adds it, see _pip_section); its own comment says so.
    return PIP_NOTES if "python" in names and "pip" not in names and not pins else ()


def _skipped_comment(skipped: Sequence[SourcePackage]) -> list[str]:
    if not skipped:
        return []
    return [f"# not exported (--skip-source; install them yourself): {', '.join(s.describe() for s in skipped)}"]


def _pip_section(records: Sequence[RepoDataRecord], pins: Sequence[PypiPin], indexes: PypiIndexes) -> list[str]:
    if not pins:
        return []
    lines = []
    if not any(view(r).name == "pip" for r in records):
        # conda/env/env.py (validate_keys): a pip: section without a `pip` dependency makes conda add one.
        lines.append("  # no conda `pip` is locked: conda adds an unpinned `pip` from the channels to run this section")
    lines.append("  - pip:")
    lines += [f"    - {opt}" for opt in indexes.options(ROOT_FROM_EXPORTS)]
    lines += [f"    - {pin.requirement()}" for pin in sorted(pins, key=lambda p: p.name)]
    return lines


def check_strings(env: str, records: Sequence[RepoDataRecord], pins: Sequence[PypiPin] = (),
                  channels: Sequence[str] = (), platforms: Sequence[str] = ()) -> None:
    """Refuse (exit 2) a string that would add a line or a comment to an export: records of a fresh solve come
    from a channel's repodata, and a newline in a build string or URL would write lines of its own.
    ``platforms`` (names, subdirs, virtual packages) are written in comments, where a ``#`` is harmless."""
    problem = next((p for p in map(record_problem, records) if p), None) or \
        next((p for p in map(pin_problem, pins) if p), None)
    texts = (("environment name", env, False), *(("channel", c, False) for c in channels),
             *(("platform", p, True) for p in platforms))
    for what, text, hash_ok in texts:
        why = line_problem(text, hash_allowed=hash_ok)
        problem = problem or (f"the {what} '{escape(text)}' {why}" if why else None)
    if problem:
        raise InputError(f"environment '{escape(env)}': {problem}; no export written", hint=UNSAFE_HINT)


def _platform_texts(platform: LockedPlatform) -> tuple[str, ...]:
    return (platform.name, platform.subdir, *platform.virtual_packages)


def render_environment_yml(env: str, channels: Sequence[str], platform: LockedPlatform,
                           records: Sequence[RepoDataRecord], other_platforms: Sequence[str] = (),
                           pins: Sequence[PypiPin] = (), indexes: PypiIndexes = DEFAULT_INDEXES,
                           skipped: Sequence[SourcePackage] = ()) -> str:
    """``environment.yml`` pinning every package of ``env`` on ``platform`` to its exact build.

    PyPI ``pins`` become a ``pip:`` section of exact pins; ``skipped`` source packages are named in a comment.
    """
    check_strings(env, records, pins, channels, (*_platform_texts(platform), *other_platforms))
    lines = [HEADER, f"# platform: {platform.name} ({platform.subdir})", *_gpu_comment(platform)]
    if other_platforms:
        lines.append(f"# other platforms: {', '.join(other_platforms)} (see conda-<platform>.lock)")
    lines += _skipped_comment(skipped)
    # `channels:` alone is null; an environment with no channels (pixi accepts `channels = []`) gets a list.
    lines += [*YML_NOTES, *_pip_notes(records, pins), f"name: {env}", "channels:" if channels else "channels: []"]
    lines += [f"  - {redact_url(c).rstrip('/')}" for c in channels]
    # conda 26.7 (conda/env/env.py, dependencies_validation) wants a list: `dependencies:` alone is null.
    lines.append("dependencies:" if records or pins else "dependencies: []")
    for pin in sorted(map(view, records), key=lambda v: v.name):
        lines.append(f"  - {pin.name}={pin.version}={pin.build}")
    lines += _pip_section(records, pins, indexes)
    return "\n".join(lines) + "\n"


def render_explicit(env: str, platform: LockedPlatform, records: Sequence[RepoDataRecord],
                    pypi_file: str | None = None, skipped: Sequence[SourcePackage] = ()) -> str:
    """An ``@EXPLICIT`` file: ``url#sha256:<hex>`` per package, dependencies first.

    conda reads ``#sha256:`` lines from 24.9.0 on (conda/misc.py, url_pat; conda/conda#14048); older conda
    stops with "Could not parse explicit URL" and takes environment.yml instead.
    """
    check_strings(env, records, platforms=_platform_texts(platform))
    lines = [HEADER, f"# environment: {env}", f"# platform: {platform.subdir}",
             f"# rocmlock platform: {platform.name}", *_gpu_comment(platform)]
    if pypi_file:
        lines.append(f"# PyPI packages: then `python -m pip install --require-hashes -r {pypi_file}`")
    lines += [*_skipped_comment(skipped), "@EXPLICIT"]
    by_name = {view(r).name: view(r) for r in records}
    # sort_topologically is deterministic for a given input order; sort by name first.
    by_name_first = sorted(records, key=lambda r: view(r).name)
    ordered = PackageRecord.sort_topologically(list[PackageRecord](by_name_first))
    for rec in ordered:
        full = by_name[rec.name.normalized]
        digest = f"#sha256:{full.sha256}" if full.sha256 else (f"#{full.md5}" if full.md5 else "")
        lines.append(f"{redact_url(full.url)}{digest}")
    return "\n".join(lines) + "\n"


def explicit_name(platform: str) -> str:
    """File name of the explicit export for ``platform``."""
    return f"conda-{platform}.lock"


def requirements_name(platform: str) -> str:
    """File name of the PyPI export (pip's hash-checking format) for ``platform``."""
    return f"requirements-{platform}.txt"


def render_requirements_file(env: str, platform: LockedPlatform, pins: Sequence[PypiPin],
                             indexes: PypiIndexes) -> str:
    """``requirements-<platform>.txt``: the PyPI packages of ``env`` on ``platform``, each with its sha256."""
    check_strings(env, (), pins)
    header = [HEADER, f"# environment: {env}", f"# platform: {platform.name} ({platform.subdir})",
              f"# after the conda packages ({explicit_name(platform.name)}), in that environment:",
              f"#   python -m pip install --require-hashes -r {requirements_name(platform.name)}"]
    return render_requirements(header, pins, indexes, ROOT_FROM_EXPORTS)


def render_exports(envs_dir: Path, env: str, channels: Sequence[str],
                   platforms: Sequence[LockedPlatform],
                   records: Mapping[str, Sequence[RepoDataRecord]],
                   pypi: Mapping[str, Sequence[PypiPin]] | None = None, indexes: PypiIndexes = DEFAULT_INDEXES,
                   skipped: Mapping[str, Sequence[SourcePackage]] | None = None,
                   gpu_target: str | None = None) -> dict[Path, str]:
    """Every export file of ``env``: environment.yml (first platform), one explicit file per platform,
    conda-lock.yml where its format can hold the environment (:mod:`rocmlock.lock.condalock`) and, where the lock
    holds PyPI packages, one requirements file per platform."""
    out: dict[Path, str] = {}
    pypi, skipped = pypi or {}, skipped or {}
    present = [p for p in platforms if p.name in records]
    if not present:
        return out
    first = present[0]
    others = [p.name for p in present[1:]]
    out[envs_dir / env / "environment.yml"] = render_environment_yml(
        env, channels, first, records[first.name], others, pypi.get(first.name, ()), indexes,
        skipped.get(first.name, ()))
    for plat in present:
        pins = pypi.get(plat.name, ())
        req = requirements_name(plat.name) if pins else None
        out[envs_dir / env / explicit_name(plat.name)] = render_explicit(
            env, plat, records[plat.name], req, skipped.get(plat.name, ()))
        if req:
            out[envs_dir / env / req] = render_requirements_file(env, plat, pins, indexes)
    conda_lock = render_conda_lock(env, channels, present, records, gpu_target,
                                   [p.name for p in present if pypi.get(p.name)])
    if conda_lock is not None:
        out[envs_dir / env / CONDA_LOCK_NAME] = conda_lock
    return out


