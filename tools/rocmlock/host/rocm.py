"""Where the host's ROCm is, which version it is, and where its device libraries are, on every layout users have.

- TheRock's Python packages (ROCm 7.14 and later, ``pip install 'rocm[libraries,devel]'``): the tree
  ``rocm-sdk path --root`` prints (``<site-packages>/_rocm_sdk_devel``), laid out like /opt/rocm; a TheRock tarball
  is that same tree wherever it was extracted (:mod:`rocmlock.host.therock` has the sources). A ``rocm-sdk`` on PATH
  wins over /opt/rocm: it is the ROCm of the active environment, the one its PyTorch (rocm7.14 wheels find ROCm
  through RPATH in the same site-packages) runs on.
- AMD's packages: ``/opt/rocm-X.Y.Z`` (``/opt/rocm`` links to it) with ``.info/version``, ``lib/llvm/bin/clang``
  and ``amdgcn/bitcode``.
- A distribution's (Debian/Ubuntu, ROCm 7.2.4 in Debian experimental): ROCm in ``/usr``, no ``.info/version``
  (the version is in ``include/rocm-core/rocm_version.h`` and ``hipconfig --version``), clang in
  ``/usr/lib/llvm-22`` and the device libraries in that clang's resource directory
  (``/usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode``).

With ``--rocm-path``/``ROCM_PATH`` set, clang looks for the device libraries in ``<rocm>/amdgcn/bitcode`` only
(clang/lib/Driver/ToolChains/AMDGPU.cpp, RocmInstallationDetector), so ``ROCM_PATH=/usr`` breaks a distro ROCm
unless ``HIP_DEVICE_LIB_PATH`` names the real directory: everything that exports ROCM_PATH must export that too.
The recipes' ``rocm-build-env.sh`` and the ``rocm-version`` activation script follow the same search order.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from rocmlock.errors import InputError, expect_type
from rocmlock.gpu.targets import version_tuple
from rocmlock.host import therock
from rocmlock.util.runner import CommandError, CommandResult, Runner, run_command
from rocmlock.util.tables import check_keys, did_you_mean, expect_match, expect_unique, key, read_toml

Which = Callable[[str, str | None], str | None]

HIP_HEADER = Path("include/hip/hip_runtime.h")
DEFAULT_ROCM = Path("/opt/rocm")
DISTRO_ROCM = Path("/usr")
VERSION_HEADER = Path("include/rocm-core/rocm_version.h")
# One file every ROCm device-library directory holds (ROCm-Device-Libs' ocml).
DEVICE_LIB_PROBE = "ocml.bc"


@dataclass(frozen=True)
class Host:
    """The host as doctor sees it; every part is injectable so tests can describe another machine."""

    env: Mapping[str, str]
    runner: Runner = run_command
    which: Which = field(default=lambda name, path: shutil.which(name, path=path))
    kfd: Path = Path("/dev/kfd")
    # Stands for / where /sys is read (the GPUs in KFD's topology), so tests can describe another machine.
    sysroot: Path = Path("/")

    def find(self, name: str) -> str | None:
        return self.which(name, self.env.get("PATH", os.defpath))

    def run(self, argv: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 60.0) -> CommandResult | None:
        """Run a probe command; ``None`` when it cannot even start (a finding, not a crash)."""
        try:
            return self.runner(argv, env=env or self.env, cwd=cwd, timeout=timeout, check=False)
        except CommandError:
            return None

    def output(self, argv: list[str], timeout: float = 60.0) -> str | None:
        """A probe command's stripped stdout, ``None`` when it fails or prints nothing."""
        res = self.run(argv, timeout=timeout)
        return res.stdout.strip() if res is not None and res.ok and res.stdout.strip() else None


def holds_header(path: str | Path) -> bool:
    return (Path(path) / HIP_HEADER).is_file()


# The order rocm-build-env.sh and the rocm-version activation take them in: ROCM_PATH wins.
ROCM_VARS = ("ROCM_PATH", "HIP_PATH")


def set_rocm_vars(env: Mapping[str, str]) -> list[str]:
    """Which of ROCM_PATH and HIP_PATH are set (non-empty), ROCM_PATH first."""
    return [v for v in ROCM_VARS if env.get(v)]


def same_install(a: str | Path, b: str | Path) -> bool:
    """Two names of one directory (/opt/rocm and /opt/rocm-7.2.4, /usr and /usr/)."""
    return os.path.realpath(a) == os.path.realpath(b)


def searching(host: Host) -> Host:
    """``host`` without a ROCM_PATH/HIP_PATH that holds no ROCm, for finding where ROCm really is.

    Debian's hipconfig answers ``--hipclangpath`` and ``--path`` from $ROCM_PATH: asked with a ROCM_PATH that names
    nothing, it names a clang under it, and the device libraries, the version and the fix went missing with it.
    """
    bad = [v for v in ROCM_VARS if host.env.get(v) and not holds_header(host.env[v])]
    return replace(host, env={k: v for k, v in host.env.items() if k not in bad}) if bad else host


def is_distro_layout(prefix: Path) -> bool:
    """ROCm installed into the system prefix by a distribution's packages (no ``.info/version`` there)."""
    return prefix == DISTRO_ROCM and not (prefix / ".info/version").is_file()


def _hipconfig(host: Host, prefix: Path | None) -> str | None:
    if prefix is not None and (prefix / "bin/hipconfig").is_file():
        return str(prefix / "bin/hipconfig")
    return host.find("hipconfig")


# The first `rocm-sdk path --root` unpacks the devel tarball (gigabytes): give it time.
SDK_TIMEOUT_S = 600.0


def sdk_root(host: Host) -> Path | None:
    """The devel tree of TheRock's Python packages (``rocm-sdk path --root``) when it holds ROCm, else None."""
    exe = host.find(therock.ROCM_SDK)
    out = host.output([exe, "path", "--root"], timeout=SDK_TIMEOUT_S) if exe else None
    root = Path(out.splitlines()[-1].strip()) if out else None
    return root if root is not None and root.is_absolute() and holds_header(root) else None


def sdk_runtime(host: Host) -> tuple[str, str] | None:
    """(``rocm-sdk`` command, ROCm version) of TheRock's Python packages on PATH, devel tree or not: a node that only
    runs needs rocm-sdk-core and -libraries, whose version ``rocm-sdk version`` prints (the ``rocm`` package's, PEP
    440: ``7.14.0``, ``7.13.0a20260430`` is 7.13, which is the ROCm release). None without ``rocm-sdk``."""
    exe = host.find(therock.ROCM_SDK)
    out = host.output([exe, "version"]) if exe else None
    parts = version_tuple(out.splitlines()[-1].strip()) if out else ()
    return (exe, ".".join(str(p) for p in parts[:3])) if exe and len(parts) >= 2 else None


def discover_prefix(host: Host) -> Path | None:
    """Where ROCm is when HIP_PATH/ROCM_PATH do not say: ``rocm-sdk path --root``, else /opt/rocm, else
    ``hipconfig --path``, else /usr."""
    sdk = sdk_root(host)
    if sdk is not None:
        return sdk
    if holds_header(DEFAULT_ROCM):
        return DEFAULT_ROCM
    hipconfig = host.find("hipconfig")
    reported = host.output([hipconfig, "--path"]) if hipconfig else None
    if reported and holds_header(reported):
        return Path(reported)
    return DISTRO_ROCM if holds_header(DISTRO_ROCM) else None


# What a ROCm .info/version holds before its "-<build>": 7.2.1, 6.4.0, TheRock's 7.14.0rc20260930.
VERSION_TEXT = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,4})?[A-Za-z0-9.+~]{0,40}")


def _version_from_info(root: Path) -> str | None:
    for rel in (".info/version", ".info/version-dev"):
        try:
            text = (root / rel).read_text().strip()
        except OSError:
            continue
        version = text.splitlines()[0].split("-")[0] if text else ""
        if VERSION_TEXT.fullmatch(version):  # a file of the host, not ours: a version or nothing read from it
            return version
    return None


def _version_from_header(root: Path) -> str | None:
    """``ROCM_VERSION_MAJOR/MINOR/PATCH`` from rocm-core's ``rocm_version.h`` (AMD's and Debian's packages)."""
    try:
        text = (root / VERSION_HEADER).read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+ROCM_VERSION_{key}\s+(\d+)", text) for key in ("MAJOR", "MINOR", "PATCH")]
    if not (parts[0] and parts[1]):
        return None
    return ".".join(m.group(1) for m in parts if m)


def find_version(host: Host, prefix: Path | None) -> tuple[str | None, str]:
    """The ROCm version and its source: ``.info/version``, else rocm-core's header, else ``hipconfig --version``."""
    if prefix is not None:
        version = _version_from_info(prefix)
        if version:
            return version, f"{prefix}/.info/version"
        version = _version_from_header(prefix)
        if version:
            return version, f"{prefix}/{VERSION_HEADER}"
    runtime = sdk_runtime(host) if prefix is not None and therock.is_python_tree(prefix) else None
    if runtime is not None:
        return runtime[1], "rocm-sdk version"
    hipconfig = _hipconfig(host, prefix)
    out = host.output([hipconfig, "--version"]) if hipconfig else None
    if out and version_tuple(out.splitlines()[-1]):
        # HIP's version is major.minor.build; major.minor is the ROCm release it ships with.
        return ".".join(str(p) for p in version_tuple(out.splitlines()[-1])[:2]), "hipconfig --version"
    return None, ""


def holds_device_libs(path: str | Path) -> bool:
    return (Path(path) / DEVICE_LIB_PROBE).is_file()


def _clang_of(host: Host, prefix: Path | None) -> str | None:
    """The clang hipcc drives: ``<rocm>/lib/llvm/bin/clang`` (AMD), else the one ``hipconfig --hipclangpath`` names."""
    if prefix is not None and (prefix / "lib/llvm/bin/clang").is_file():
        return str(prefix / "lib/llvm/bin/clang")
    hipconfig = _hipconfig(host, prefix)
    bindir = host.output([hipconfig, "--hipclangpath"]) if hipconfig else None
    if bindir and (Path(bindir) / "clang").is_file():
        return str(Path(bindir) / "clang")
    return None


def device_lib_candidates(host: Host, prefix: Path | None) -> Iterator[tuple[Path, str]]:
    """Where ROCm's device libraries may be, in search order, each with how it was found.

    The clang hipcc drives is asked before the ``lib/llvm/lib/clang/*`` glob: a stale resource directory beside the
    real one (21 beside 22) would otherwise be found first and break a compile that works without it. Of the glob,
    the newest first; rocm-build-env.sh and the rocm-version activation search in this order too. Lazy: the clang
    (and hipconfig) run only when neither ``<rocm>`` directory holds them, as in those scripts.
    """
    if prefix is not None:
        yield prefix / "amdgcn/bitcode", "<rocm>/amdgcn/bitcode"
        yield prefix / "lib/llvm/amdgcn/bitcode", "<rocm>/lib/llvm/amdgcn/bitcode"
    clang = _clang_of(host, prefix)
    resource = host.output([clang, "-print-resource-dir"]) if clang else None
    if resource:
        yield Path(resource) / "amdgcn/bitcode", f"{clang} -print-resource-dir"
    if prefix is not None:
        for p in sorted((prefix / "lib/llvm/lib/clang").glob("*/amdgcn/bitcode"), reverse=True):
            yield p, "<rocm>/lib/llvm/lib/clang/*/amdgcn/bitcode"
        # Debian 12 / Ubuntu 24.04's ROCm 5.x packages: the multiarch library directory.
        for p in sorted((prefix / "lib").glob("*-linux-gnu/amdgcn/bitcode")):
            yield p, "<rocm>/lib/<multiarch>/amdgcn/bitcode"


def find_device_libs(host: Host, prefix: Path | None) -> tuple[Path | None, str]:
    """The device-library directory the compiler needs, and how it was found (HIP_DEVICE_LIB_PATH wins)."""
    given = host.env.get("HIP_DEVICE_LIB_PATH")
    if given:
        return Path(given), "HIP_DEVICE_LIB_PATH"
    for path, how in device_lib_candidates(host, prefix):
        if holds_device_libs(path):
            return path, how
    return None, ""


_LINKED_OCML = re.compile(r'-mlink-builtin-bitcode" "([^"]*)/' + re.escape(DEVICE_LIB_PROBE) + '"')


@dataclass(frozen=True)
class DryRun:
    """What the compiler would do for a HIP compile (``-###``): the device libraries it links, or why not."""

    ok: bool
    device_libs: Path | None
    error: str


def dry_run_device_libs(host: Host, compiler: str, env: Mapping[str, str], gfx: str = "gfx90a") -> DryRun | None:
    """Ask the compiler (``hipcc -###``, nothing compiled) where it finds the device libraries in ``env``.

    ``None`` when the dry run says nothing either way (the compiler did not start, or failed for another reason).
    """
    with tempfile.TemporaryDirectory(prefix="rocmlock-dryrun-") as tmp:
        src = Path(tmp) / "probe.hip"
        src.write_text("")
        argv = [compiler, *(["-x", "hip"] if "clang" in Path(compiler).name else []), "-###",
                f"--offload-arch={gfx}", "-c", str(src), "-o", str(Path(tmp) / "probe.o")]
        res = host.run(argv, env=env, cwd=Path(tmp))
    if res is None:
        return None
    text = res.stderr + res.stdout
    linked = _LINKED_OCML.search(text)
    if res.ok and linked:
        return DryRun(True, Path(linked.group(1)), "")
    for line in text.splitlines():
        if "device librar" in line and "error" in line:
            return DryRun(False, None, line.strip())
    return None


def compile_env(host: Host, prefix: Path | None, device_libs: Path | None) -> dict[str, str]:
    """The environment a build gets from ``rocm-build-env.sh``: HIP_PLATFORM=amd, ROCM_PATH/HIP_PATH set to the
    ROCm found, and HIP_DEVICE_LIB_PATH whenever the device libraries are not where clang looks for that
    ROCM_PATH (``<rocm>/amdgcn/bitcode``)."""
    env = {**host.env, "HIP_PLATFORM": "amd"}
    if prefix is not None:
        env.setdefault("ROCM_PATH", env.get("HIP_PATH", str(prefix)))
        env.setdefault("HIP_PATH", env["ROCM_PATH"])
    if device_libs is not None and "HIP_DEVICE_LIB_PATH" not in env \
            and not holds_device_libs(Path(env.get("ROCM_PATH", "/nonexistent")) / "amdgcn/bitcode"):
        env["HIP_DEVICE_LIB_PATH"] = str(device_libs)
    return env


@dataclass(frozen=True)
class Component:
    """A host-ROCm library a recipe compiles against (tools/rocmlock/data/rocm_components.toml)."""

    name: str
    header: str
    debian: str
    amd: str

    def describe(self) -> str:
        return f"{self.name} (include/{self.header}; Debian/Ubuntu: {self.debian}, AMD: {self.amd})"


COMPONENTS = "rocm_components.toml"
# rocm-build-env.sh's rocmlock_require_rocm_components reads ${RECIPE_DIR}/../../tools/rocmlock/data/<this table>.
BUILD_SCRIPT_TABLE = f"../../tools/rocmlock/data/{COMPONENTS}"
_REQUIRES = re.compile(r"^[ \t]*rocmlock_require_rocm_components[ \t]+([^\s;|&]+)", re.MULTILINE)
_COMPONENT_KEY = re.compile(r"[a-z0-9][a-z0-9_-]*")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9._-]*")  # a conda package name
_COMPONENT_STRINGS: dict[str, tuple[re.Pattern[str], str, str]] = {
    "name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+-]*"), "the component's name as AMD writes it, e.g. hipBLAS",
             '"hipBLAS"'),
    "header": (re.compile(r"(?!\.\.?/)(?!.*/\.\.?/)[A-Za-z0-9_+-][A-Za-z0-9_+./-]*\.(h|hh|hpp|hxx|cuh)"),
               "a header path under $ROCM_PATH/include, e.g. hipblas/hipblas.h", '"hipblas/hipblas.h"'),
    "debian": (re.compile(r"[a-z0-9][a-z0-9+.-]+"), "the Debian/Ubuntu package with the header, e.g. libhipblas-dev",
               '"libhipblas-dev"'),
    "amd": (re.compile(r"[a-z0-9][a-z0-9+.-]+"), "AMD's package with the header, e.g. hipblas-dev", '"hipblas-dev"'),
}
COMPONENT_KEYS = tuple(_COMPONENT_STRINGS)


@cache
def component_table() -> dict[str, tuple[Component, ...]]:
    """Per conda package (``bitsandbytes``), the host-ROCm components its build needs (the packaged table)."""
    return read_components(Path(str(resources.files("rocmlock").joinpath(f"data/{COMPONENTS}"))))


def read_components(path: Path, packages: Collection[str] | None = None) -> dict[str, tuple[Component, ...]]:
    """The component table at ``path``, validated: an InputError naming the file and the key otherwise.

    ``packages``: the conda packages the recipes build; each ``[packages]`` row must be one of them (None: not
    checked, the recipes are not at hand).
    """
    data = read_toml(path)
    check_keys(data, path, (), ("components", "packages"), ("components", "packages"), COMPONENTS,
               lambda name: f"add a [{name}] table (the comment at the top of the file says what it holds)")
    components = _components(path, expect_type(data["components"], dict, path, "components",
                                                "a table of components ([components.<key>])"))
    rows = expect_type(data["packages"], dict, path, "packages", "a table of package = [component keys]")
    table: dict[str, tuple[Component, ...]] = {}
    for package, keys in rows.items():
        if not _PACKAGE.fullmatch(package):
            raise InputError(f"{path}: key '{key('packages', package)}' is not a conda package name",
                             hint="use the package name of the recipe (package.name in its recipe.yaml), e.g. pytorch")
        if packages is not None and package not in packages:
            raise InputError(f"{path}: key '{key('packages', package)}': no recipe builds a package '{package}'"
                             f"{did_you_mean(package, packages)}",
                             hint=f"use a recipe's package name (package.name in its recipe.yaml): "
                                  f"{', '.join(sorted(packages))}")
        table[package] = _needs(path, package, keys, components)
    return table


def _components(path: Path, rows: dict[str, Any]) -> dict[str, Component]:
    out = {name: _component(path, ("components", name), row) for name, row in rows.items()}
    seen: dict[str, dict[str, str]] = {"name": {}, "header": {}}  # a row copied to start a new one, left unchanged
    for name, component in out.items():
        for field_name, values in seen.items():
            expect_unique(values, getattr(component, field_name), path, key("components", name, field_name),
                          field_name)
    return out


def _component(path: Path, where: tuple[str, str], row: Any) -> Component:
    if not _COMPONENT_KEY.fullmatch(where[1]):
        raise InputError(f"{path}: key '{key(*where)}' is not a component key (lower case letters, digits, - and _)",
                         hint="name it after the library, e.g. [components.hipblas]")
    row = expect_type(row, dict, path, key(*where), f"a table ([{key(*where)}], then its keys)")
    check_keys(row, path, where, COMPONENT_KEYS, COMPONENT_KEYS, "a component",
               lambda k: f"add {k} = {_COMPONENT_STRINGS[k][2]} under [{key(*where)}]")
    return Component(**{k: expect_match(row[k], pattern, path, key(*where, k), what)
                        for k, (pattern, what, _) in _COMPONENT_STRINGS.items()})


def _needs(path: Path, package: str, keys: Any, components: Mapping[str, Component]) -> tuple[Component, ...]:
    what = 'a non-empty list of component keys of [components], e.g. ["hipblas", "hiprand"]'
    items = expect_type(keys, list, path, key("packages", package), what)
    if not items:
        raise InputError(f"{path}: key '{key('packages', package)}' must be {what}, got an empty list",
                         hint="or remove the row: a package that needs no ROCm component has none")
    for i, item in enumerate(items):
        where = key("packages", package, i)
        if expect_type(item, str, path, where, "a component key of [components]") not in components:
            raise InputError(f"{path}: key '{where}': [components] has no '{item}'{did_you_mean(item, components)}",
                             hint=f"add [components.{item}], or use one of: {', '.join(components)}")
        if item in items[:i]:
            raise InputError(f"{path}: key '{where}': '{item}' is listed twice", hint="remove the duplicate")
    return tuple(components[k] for k in items)


def check_build_scripts(recipes: Iterable[Path], packages: Collection[str]) -> None:
    """The component table each recipe's build.sh checks (``rocmlock_require_rocm_components PACKAGE``), validated
    against ``packages`` (what the recipes build), and a row there for each PACKAGE a script names."""
    tables: dict[Path, dict[str, tuple[Component, ...]]] = {}
    for recipe in recipes:
        script = recipe.parent / "build.sh"
        names = _REQUIRES.findall(script.read_text()) if script.is_file() else []
        for package in (n for n in names if not n.startswith("$")):  # a shell variable: nothing to hold it to
            path = Path(os.path.normpath(recipe.parent / BUILD_SCRIPT_TABLE))
            if path not in tables and not path.is_file():
                raise InputError(f"{script}: rocmlock_require_rocm_components {package} reads {path}, which is "
                                 "missing", hint=f"restore tools/rocmlock/data/{COMPONENTS} from git")
            if path not in tables:
                tables[path] = read_components(path, packages)
            if package not in tables[path]:
                raise InputError(f"{script}: rocmlock_require_rocm_components {package}: {path} has no key "
                                 f"'{key('packages', package)}', so its build would check nothing",
                                 hint=f"add {key('packages', package)} = [...] (the components its build needs) "
                                      "to that table, or remove the call")


def missing_components(prefix: Path, packages: Iterable[str]) -> dict[str, tuple[Component, ...]]:
    """For each package of ``packages`` in the table, its components without a header under ``prefix/include``."""
    table = component_table()
    return {pkg: tuple(c for c in table[pkg] if not (prefix / "include" / c.header).is_file())
            for pkg in packages if pkg in table}
