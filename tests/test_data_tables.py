"""The data tables a team edits to add a GPU target, a ROCm component or an upstream (tools/rocmlock/data/
gpu_targets.toml, rocm_components.toml, upstreams.toml), validated where they are read.

They were loaded unchecked: a wrong type, a typo'd or a missing key was a KeyError or TypeError traceback from
whichever command read the table first (plan, build, doctor, preset, outdated, bump), a recipe's render error, or
nothing at all (a [packages] row under a misspelt package name checked no build). Each test writes a copy of a
shipped table with one thing wrong, as tests/test_aotriton_table.py and tests/test_pins.py do, and reads it through
the real loader. The CLI tests run `rocmlock` on a checkout-shaped copy: in-process (`main`) where the recipes
read the copy (plan, build, as tests/test_aotriton_table.py does), and as a subprocess whose rocmlock package is the
copy (doctor, preset, outdated, bump read the tables packaged with rocmlock), so exit code, stderr and the absence
of a traceback are the real process's.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from fakeupstream import closed_port_url, network_args
from rocmlock.build import plan
from rocmlock.build.recipes import discover_recipes, recipe_packages
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.gpu import targets
from rocmlock.host import rocm as rocm_host
from rocmlock.upstream import pairing, pins
from shipped import RECIPES, ROOT
from tomlwrite import changed, write_toml

DATA = ROOT / "tools/rocmlock/data"
GPU, COMPONENTS, UPSTREAMS = "gpu_targets.toml", "rocm_components.toml", "upstreams.toml"
SHIPPED = {name: tomllib.loads((DATA / name).read_text()) for name in (GPU, COMPONENTS, UPSTREAMS)}
PACKAGES = {name for recipe in discover_recipes(RECIPES) for name in recipe_packages(recipe)}


def _changed(tmp_path: Path, name: str, key: tuple[str | int, ...], value: Any) -> Path:
    """A copy of the data directory whose ``name`` has ``key`` (a path into it) set to ``value``, or deleted when
    value is ...; the path of that table."""
    shutil.copytree(DATA, tmp_path / "data", dirs_exist_ok=True)
    return write_toml(tmp_path / "data" / name, changed(SHIPPED[name], key, value))


def _load(path: Path) -> Any:
    """``path`` through its real loader (upstreams.toml: the data directory, as `rocmlock bump` reads it)."""
    if path.name == GPU:
        return targets.read_targets(path)
    if path.name == COMPONENTS:
        return rocm_host.read_components(path, PACKAGES)
    return pins.read_table(path.parent)


def _refused(path: Path) -> InputError:
    with pytest.raises(InputError) as exc:
        _load(path)
    message, hint = str(exc.value), exc.value.hint or ""
    assert message.startswith(f"{path}: ") and "\n" not in message and "\n" not in hint, message
    return exc.value


def _shown(key: tuple[str | int, ...]) -> str:
    """How an error names ``key``: dotted, quoted where it is no bare key, list positions in brackets."""
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"'
            out = f"{out}.{text}" if out else text
    return out


# ----------------------------------------------------------------------------- the shipped tables


def test_the_shipped_tables_validate_and_a_rewritten_copy_loads_the_same(tmp_path: Path) -> None:
    # CI catches a bad edit of a shipped table here, and the writer the other tests use changes nothing by itself.
    gpus = targets.read_targets(DATA / GPU)
    assert gpus == targets.all_targets() and list(gpus) == list(SHIPPED[GPU])
    assert targets.read_targets(write_toml(tmp_path / GPU, SHIPPED[GPU])) == gpus
    components = rocm_host.read_components(DATA / COMPONENTS, PACKAGES)
    assert components == rocm_host.component_table() and set(components) <= PACKAGES
    assert rocm_host.read_components(write_toml(tmp_path / COMPONENTS, SHIPPED[COMPONENTS])) == components
    table = pins.read_table(DATA)
    assert dataclasses.replace(table, path="") == dataclasses.replace(pins.load_table(), path="")
    assert [u.name for u in table.upstreams] == list(SHIPPED[UPSTREAMS]["upstream"])
    assert table.path == str(DATA / UPSTREAMS)
    shutil.copytree(DATA, tmp_path / "data")
    write_toml(tmp_path / "data" / UPSTREAMS, SHIPPED[UPSTREAMS])
    assert dataclasses.replace(pins.read_table(tmp_path / "data"), path="") == dataclasses.replace(table, path="")
    plan.check_tables(discover_recipes(RECIPES))  # the tables the shipped recipes read, and their cross-references


def test_the_schema_comments_name_every_key() -> None:
    # Each table's top comment is its schema: a key the loaders take must be described there.
    def comment(name: str) -> str:
        return "".join(line for line in (DATA / name).read_text().splitlines(True) if line.startswith("#"))

    for name in targets.KEYS:
        assert re.search(rf"^# {name}:", comment(GPU), re.MULTILINE), name
    for name in rocm_host.COMPONENT_KEYS:
        assert re.search(rf"^#\s+{name}:", comment(COMPONENTS), re.MULTILINE), name
    for name in (*pins.UPSTREAM_KEYS, *pins.SOURCE_KEYS, *pairing.RULE_KEYS):
        assert re.search(rf"^#\s+(\S+/)?{name}[:/ ]", comment(UPSTREAMS), re.MULTILINE), name


def test_the_build_scripts_read_the_component_table_where_plan_looks() -> None:
    # rocmlock_require_rocm_components (recipes/rocm-build-env.sh) reads the table relative to the recipe.
    script = (RECIPES / "rocm-build-env.sh").read_text()
    assert f'local table="${{RECIPE_DIR}}/{rocm_host.BUILD_SCRIPT_TABLE}"' in script


# ----------------------------------------------------------------------------- every key, every wrong type

SAMPLES: dict[str, Any] = {"str": "x", "int": 7, "float": 1.5, "bool": True, "list": ["x"], "dict": {"x": "y"},
                           "date": datetime.date(2026, 1, 1)}
S, I, N, B, L, D = ("str",), ("int",), ("int", "float"), ("bool",), ("list",), ("dict",)
KINDS: dict[str, dict[tuple[str | int, ...], tuple[str, ...]]] = {
    GPU: {
        ("gfx942",): D, ("gfx942", "isa"): S, ("gfx942", "architecture"): S, ("gfx942", "family"): S,
        ("gfx942", "sub_family"): S, ("gfx942", "generic"): S, ("gfx942", "xnack"): S, ("gfx942", "products"): L,
        ("gfx942", "products", 0): S, ("gfx942", "first_rocm"): S, ("gfx942", "flash_attn_ck"): B,
        ("gfx942", "flash_attn_triton"): B, ("gfx942", "aotriton"): B, ("gfx942", "bf16"): B,
        ("gfx942", "peak_bf16_tflops"): N, ("gfx942", "memory_gib"): I, ("gfx942", "bnb_first_rocm"): S,
        ("gfx942", "wavefront_size"): I, ("gfx942", "aotriton_tier"): D, ("gfx942", "aotriton_tier", "0.11.2b"): S,
    },
    COMPONENTS: {
        ("components",): D, ("components", "hipblas"): D, ("components", "hipblas", "name"): S,
        ("components", "hipblas", "header"): S, ("components", "hipblas", "debian"): S,
        ("components", "hipblas", "amd"): S, ("packages",): D, ("packages", "bitsandbytes"): L,
        ("packages", "bitsandbytes", 0): S,
    },
    UPSTREAMS: {
        ("upstream",): D, ("upstream", "pytorch"): D, ("upstream", "pytorch", "pypi"): S,
        ("upstream", "pytorch", "version_key"): S, ("upstream", "llamafactory", "recipe"): S,
        ("upstream", "pytorch", "source"): L, ("upstream", "pytorch", "source", 0): D,
        **{("upstream", "triton", "source", 0, k): S for k in ("name", "kind", "rev_key", "rev_file")},
        **{("upstream", "triton", "source", 1, k): S for k in ("sha256_key", "url", "rev_json", "rev_json_key")},
        **{("upstream", "bitsandbytes", "source", 0, k): S for k in ("repo", "tag")},
        ("pairing",): L, ("pairing", 0): D,
        **{("pairing", 0, k): S for k in ("name", "follower", "leader", "kind", "why")},
        **{("pairing", 0, k): I for k in ("follower_major", "leader_major", "offset")},
        ("pairing", 0, "stable_from"): S,
        ("pairing", 1, "floor"): S, ("pairing", 2, "series"): D, ("pairing", 2, "series", "2.12"): S,
        ("pairing", 3, "table"): S, ("pairing", 3, "record"): S, ("conda_names",): D, ("conda_names", "torch"): S,
    },
}
WRONG_TYPES = [(name, key, got, value) for name, kinds in KINDS.items() for key, ok in kinds.items()
               for got, value in SAMPLES.items() if got not in ok]


def test_every_key_has_wrong_type_cases() -> None:
    # A key a loader takes but KINDS lacks would go untested: this fails when one is added without its cases.
    gpu = {k[1] for k in KINDS[GPU] if len(k) == 2}
    assert gpu == set(targets.KEYS)
    assert {k[2] for k in KINDS[COMPONENTS] if len(k) == 3 and k[0] == "components"} == set(rocm_host.COMPONENT_KEYS)
    ups = KINDS[UPSTREAMS]
    assert {k[0] for k in ups} == set(SHIPPED[UPSTREAMS])
    assert {k[2] for k in ups if len(k) == 3 and k[0] == "upstream"} == set(pins.UPSTREAM_KEYS)
    assert {k[4] for k in ups if len(k) == 5} == set(pins.SOURCE_KEYS)
    assert {k[2] for k in ups if len(k) >= 3 and k[0] == "pairing"} == set(pairing.RULE_KEYS)


@pytest.mark.parametrize(("name", "key", "got", "value"), WRONG_TYPES,
                         ids=[f"{n.split('.')[0]}:{_shown(k)}={g}" for n, k, g, _ in WRONG_TYPES])
def test_every_key_of_a_wrong_type_is_named(tmp_path: Path, name: str, key: tuple[str | int, ...], got: str,
                                            value: Any) -> None:
    path = _changed(tmp_path, name, key, value)
    error = _refused(path)
    assert str(error).startswith(f"{path}: key '{_shown(key)}' must be "), str(error)
    assert str(error).endswith(f", got {got}"), str(error)


# ----------------------------------------------------------------------------- missing and unknown keys

MISSING = [
    *[(GPU, ("gfx942", k)) for k in targets.KEYS],
    (COMPONENTS, ("components",)), (COMPONENTS, ("packages",)),
    *[(COMPONENTS, ("components", "hipblas", k)) for k in rocm_host.COMPONENT_KEYS],
    *[(UPSTREAMS, (k,)) for k in ("upstream", "pairing", "conda_names")],
    *[(UPSTREAMS, ("upstream", "pytorch", k)) for k in ("pypi", "version_key", "source")],
    *[(UPSTREAMS, ("upstream", "pytorch", "source", 0, k)) for k in ("name", "kind", "url", "sha256_key")],
    (UPSTREAMS, ("upstream", "flash-attn", "source", 0, "sha256_key")),  # sdist
    (UPSTREAMS, ("upstream", "bitsandbytes", "source", 0, "rev_key")),  # git
    *[(UPSTREAMS, ("pairing", 0, k)) for k in ("name", "follower", "leader", "kind", "why", "follower_major",
                                               "leader_major", "offset")],
    (UPSTREAMS, ("pairing", 1, "floor")), (UPSTREAMS, ("pairing", 2, "series")),
]


@pytest.mark.parametrize(("name", "key"), MISSING, ids=[f"{n.split('.')[0]}:{_shown(k)}" for n, k in MISSING])
def test_every_missing_key_is_named_with_what_to_write(tmp_path: Path, name: str, key: tuple[str | int, ...]) -> None:
    path = _changed(tmp_path, name, key, ...)
    error = _refused(path)
    assert str(error) == f"{path}: key '{_shown(key)}' is missing", str(error)
    assert error.hint and "add " in error.hint, error.hint


def test_a_missing_gpu_key_says_what_to_write(tmp_path: Path) -> None:
    # The hint is the line to add, with the target's own isa (what its gfx name says).
    error = _refused(_changed_text(tmp_path, GPU, 'isa = "9.0.10"\n', ""))
    assert str(error).endswith("key 'gfx90a.isa' is missing")
    assert error.hint == 'add isa = "9.0.10" under [gfx90a] (the comment at the top of the file says what it means)'


UNKNOWN = [
    (GPU, ("gfx942", "flash_atn_ck"), "a GPU target row", "flash_attn_ck"),
    (GPU, ("gfx942", "wavefront"), "a GPU target row", "wavefront_size"),
    (COMPONENTS, ("component",), COMPONENTS, "components"),
    (COMPONENTS, ("components", "hipblas", "heder"), "a component", "header"),
    (UPSTREAMS, ("pairings",), UPSTREAMS, "pairing"),
    (UPSTREAMS, ("upstream", "pytorch", "version-key"), "an upstream", "version_key"),
    (UPSTREAMS, ("upstream", "pytorch", "source", 0, "sha256"), "a source", "sha256_key"),
    (UPSTREAMS, ("pairing", 0, "ofset"), "a pairing rule", "offset"),
    # Keys of another kind: what bump would ignore (an sdist's url) or a rule would never read.
    (UPSTREAMS, ("upstream", "flash-attn", "source", 0, "url"), 'a kind = "sdist" source', None),
    (UPSTREAMS, ("pairing", 0, "floor"), 'a kind = "minor-offset" rule', None),
    (UPSTREAMS, ("pairing", 1, "series"), 'a kind = "at-most" rule', None),
]


@pytest.mark.parametrize(("name", "key", "what", "meant"), UNKNOWN,
                         ids=[f"{n.split('.')[0]}:{_shown(k)}" for n, k, _, _ in UNKNOWN])
def test_an_unknown_key_is_named_with_the_nearest_one(tmp_path: Path, name: str, key: tuple[str | int, ...],
                                                      what: str, meant: str | None) -> None:
    value = {"url": "https://example.org/x.tar.gz", "floor": "2.11", "series": {"2.12": "2.12"}}.get(str(key[-1]), 1)
    path = _changed(tmp_path, name, key, value)
    error = _refused(path)
    nearest = f" (did you mean '{meant}'?)" if meant else ""
    assert str(error) == f"{path}: key '{_shown(key)}' is not one {what} takes{nearest}", str(error)
    assert error.hint and error.hint.startswith("its keys: ")


# ----------------------------------------------------------------------------- bad values, duplicates, references


def _changed_text(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the data directory whose ``name`` has the first ``old`` replaced by ``new`` (comments kept); the
    path of that table."""
    shutil.copytree(DATA, tmp_path / "data", dirs_exist_ok=True)
    path = tmp_path / "data" / name
    text = path.read_text()
    at = text.index(old) + old.startswith("\n")
    assert not text[text.rfind("\n", 0, at) + 1:].startswith("#"), f"{old!r} is first found in a comment"
    path.write_text(text.replace(old, new, 1))
    return path


GPU_VALUES = [
    ("[gfx942]", "[GFX942]", "key 'GFX942' is not a GPU target name: gfx, then the major version"),
    ("[gfx942]", "[mi300x]", "key 'mi300x' is not a GPU target name"),
    ("[gfx942]", "[gfx94]", "key 'gfx94' is not a GPU target name"),
    ("[gfx942]", '["gfx942:sramecc+"]', "key '\"gfx942:sramecc+\"' is not a GPU target name"),
    ('isa = "9.4.2"', 'isa = "9.4.3"', ("key 'gfx942.isa' must be \"9.4.2\" for gfx942 (major.minor.stepping in "
                                       "decimal), got '9.4.3'")),
    ('isa = "9.0.10"', 'isa = "9.0.a"', ("key 'gfx90a.isa' must be the __amdgpu_arch version, major.minor.stepping "
                                        "in decimal, got '9.0.a'")),
    ('architecture = "cdna3"', 'architecture = "CDNA 3"', "key 'gfx942.architecture' must be AMD's architecture"),
    ('family = "gfx9"', 'family = "cdna3"', "key 'gfx908.family' must be the target's family in AMD's hierarchy"),
    ('sub_family = "gfx9_4"', 'sub_family = "gfx94"', "key 'gfx942.sub_family' must be the target's sub-family"),
    ('generic = "gfx9-4-generic"', 'generic = "gfx9.4-generic"', "key 'gfx942.generic' must be the LLVM generic"),
    ('xnack = "supported"', 'xnack = "on"', "key 'gfx908.xnack' must be one of"),
    ('first_rocm = "6.0"', 'first_rocm = "6"', ("key 'gfx942.first_rocm' must be the first ROCm (major.minor) that "
                                               "supports the target, e.g. 6.0, got '6'")),
    ('bnb_first_rocm = "7.14"', 'bnb_first_rocm = "7.14.0"', "key 'gfx908.bnb_first_rocm' must be the first ROCm"),
    ('products = ["MI100"]', "products = []", "key 'gfx908.products' must be a non-empty list"),
    ('products = ["MI100"]', 'products = ["MI100", "MI100"]', "key 'gfx908.products[1]': 'MI100' is listed twice"),
    ('products = ["MI100"]', 'products = [" "]', "key 'gfx908.products[0]' must be a product name, got ' '"),
    ("peak_bf16_tflops = 92.3", "peak_bf16_tflops = -1.0", ("key 'gfx908.peak_bf16_tflops' must be the dense bf16 "
                                                           "peak in TFLOP/s (a number, 0 = unknown), got -1.0")),
    ("peak_bf16_tflops = 92.3", "peak_bf16_tflops = nan", "key 'gfx908.peak_bf16_tflops' must be the dense bf16"),
    ("memory_gib = 32", "memory_gib = 0", ("key 'gfx908.memory_gib' must be the device memory in GiB (a whole "
                                          "number above 0), got 0")),
    ("wavefront_size = 64\n\n[gfx90a]", "wavefront_size = 48\n\n[gfx90a]", ("key 'gfx908.wavefront_size' must be "
                                                                            "the wavefront size, 64 (CDNA) or 32")),
    # A row copied to start a new one, its table name left: TOML itself refuses the second [gfx942].
    ("[gfx950]", "[gfx942]", "not valid TOML: Cannot declare ('gfx942',) twice"),
    ("[gfx942]", "[gfx942\n", "not valid TOML: "),
]


@pytest.mark.parametrize(("old", "new", "message"), GPU_VALUES, ids=[m[:40] for _, _, m in GPU_VALUES])
def test_bad_gpu_values_are_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = _changed_text(tmp_path, GPU, old, new)
    assert str(_refused(path)).startswith(f"{path}: {message}")


def test_an_empty_or_missing_gpu_table(tmp_path: Path) -> None:
    path = tmp_path / GPU
    assert str(_refused(path)) == f"{path}: not found"
    path.write_text("# only comments\n")
    assert str(_refused(path)) == f"{path}: no GPU targets"
    path.write_bytes(b'[gfx942]\nisa = "\xff"\n')
    assert str(_refused(path)).startswith(f"{path}: cannot read: ")


COMPONENT_VALUES = [
    ("[components.hipblas]", "[components.HipBLAS]", "key 'components.HipBLAS' is not a component key"),
    ('header = "hipblas/hipblas.h"', 'header = "/opt/rocm/include/hipblas/hipblas.h"',
     ("key 'components.hipblas.header' must be a header path under $ROCM_PATH/include, e.g. hipblas/hipblas.h, got "
     "'/opt/rocm/include/hipblas/hipblas.h'")),
    ('header = "hipblas/hipblas.h"', 'header = "../hipblas/hipblas.h"', "key 'components.hipblas.header' must be"),
    ('header = "hipblas/hipblas.h"', 'header = "hipblas"', "key 'components.hipblas.header' must be"),
    ('debian = "libhipblas-dev"', 'debian = "libhipblas-dev libhipblas0"', ("key 'components.hipblas.debian' must be "
                                                                         "the Debian/Ubuntu package")),
    ('amd = "hipblas-dev"', 'amd = ""', "key 'components.hipblas.amd' must be AMD's package"),
    # A row copied to start a new one and left unchanged.
    ('header = "hiprand/hiprand.h"', 'header = "hipblas/hipblas.h"', ("key 'components.hiprand.header': header "
                                                                    "'hipblas/hipblas.h' is already "
                                                                    "components.hipblas.header's")),
    ('name = "hipRAND"', 'name = "hipBLAS"', "key 'components.hiprand.name': name 'hipBLAS' is already"),
    # [packages] refer to [components] and to what the recipes build.
    ('bitsandbytes = ["hipblas", "hipblaslt"', 'bitsandbytes = ["hipblass", "hipblaslt"',
     "key 'packages.bitsandbytes[0]': [components] has no 'hipblass' (did you mean 'hipblas'?)"),
    ('bitsandbytes = ["hipblas", "hipblaslt"', 'bitsandbytes = ["hipblas", "hipblas"',
     "key 'packages.bitsandbytes[1]': 'hipblas' is listed twice"),
    ('bitsandbytes = ["hipblas", "hipblaslt", "hiprand", "rocblas", "hipcub", "rocprim"]', "bitsandbytes = []",
     "key 'packages.bitsandbytes' must be a non-empty list of component keys"),
    ("\nbitsandbytes = [", "\nbitsandbytes-rocm = [", ("key 'packages.bitsandbytes-rocm': no recipe builds a package "
                                                     "'bitsandbytes-rocm' (did you mean 'bitsandbytes'?)")),
    ("\ndeepspeed = [", "\nDeepSpeed = [", "key 'packages.DeepSpeed' is not a conda package name"),
]


@pytest.mark.parametrize(("old", "new", "message"), COMPONENT_VALUES, ids=[m[:40] for _, _, m in COMPONENT_VALUES])
def test_bad_component_values_are_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = _changed_text(tmp_path, COMPONENTS, old, new)
    assert str(_refused(path)).startswith(f"{path}: {message}"), str(_refused(path))


def test_a_package_row_is_held_to_the_recipes_only_where_they_are_known(tmp_path: Path) -> None:
    # doctor reads the packaged table without the recipes; plan holds the rows to the recipes it plans.
    path = _changed_text(tmp_path, COMPONENTS, "\ndeepspeed = [", "\ndeep-speed = [")
    assert "deep-speed" in rocm_host.read_components(path)
    with pytest.raises(InputError, match="key 'packages.deep-speed': no recipe builds a package 'deep-speed'"):
        rocm_host.read_components(path, PACKAGES)


def _recipes_copy(root: Path) -> list[Path]:
    """recipes/ and tools/rocmlock/data/ laid out as in the repository (build.sh reads ../../tools/...)."""
    shutil.copytree(RECIPES, root / "recipes")
    shutil.copytree(DATA, root / "tools/rocmlock/data")
    return discover_recipes(root / "recipes")


def test_a_build_script_naming_a_package_the_table_lacks_is_refused(tmp_path: Path) -> None:
    # Before: build.sh's reader took `.get(package, [])`, so the build checked nothing for a misspelt row.
    recipes = _recipes_copy(tmp_path)
    table = tmp_path / "tools/rocmlock/data" / COMPONENTS
    packages = {n for r in recipes for n in recipe_packages(r)}
    rocm_host.check_build_scripts(recipes, packages)
    script = tmp_path / "recipes/deepspeed-rocm/build.sh"
    script.write_text(script.read_text().replace("rocmlock_require_rocm_components deepspeed",
                                                 "rocmlock_require_rocm_components deep-speed"))
    with pytest.raises(InputError) as exc:
        rocm_host.check_build_scripts(recipes, packages)
    assert str(exc.value) == (f"{script}: rocmlock_require_rocm_components deep-speed: {table} has no key "
                              "'packages.deep-speed', so its build would check nothing")
    table.unlink()
    with pytest.raises(InputError, match=r"bitsandbytes-rocm/build.sh: rocmlock_require_rocm_components "
                                         r"bitsandbytes reads .*/tools/rocmlock/data/rocm_components.toml, which is "
                                         "missing"):
        rocm_host.check_build_scripts(recipes, packages)


UPSTREAM_VALUES = [
    ("[upstream.pytorch]\n", "[upstream.PyTorch]\n", "key 'upstream.PyTorch' is not an upstream name"),
    ('pypi = "torch"', 'pypi = "torch vision"', "key 'upstream.pytorch.pypi' must be the project's name on PyPI"),
    ('pypi = "flash-attn"', 'pypi = "Torch"', ("key 'upstream.flash-attn.pypi': PyPI project 'torch' is already "
                                              "upstream.pytorch.pypi's")),
    ('version_key = "flash_attn_version"', 'version_key = "pytorch_version"',
     ("key 'upstream.flash-attn.version_key': variants.yaml key 'pytorch_version' is already "
     "upstream.pytorch.version_key's")),
    ('sha256_key = "flash_attn_sha256"', 'sha256_key = "pytorch_sha256"',
     "key 'upstream.flash-attn.source[0].sha256_key': variants.yaml key 'pytorch_sha256' is already"),
    ('name = "flash-attn"\nkind = "sdist"', 'name = "pytorch"\nkind = "sdist"',
     "key 'upstream.flash-attn.source[0].name': source name 'pytorch' is already upstream.pytorch.source[0].name's"),
    ('recipe = "llamafactory"', 'recipe = "recipes/llamafactory"', ("key 'upstream.llamafactory.recipe' must be a "
                                                                  "directory of recipes/")),
    ('\nkind = "sdist"', '\nkind = "tarball"', ("key 'upstream.flash-attn.source[0].kind' must be one of \"sdist\", "
                                           "\"archive\", \"git\", got 'tarball'")),
    ('repo = "bitsandbytes-foundation/bitsandbytes"\ntag = "{version}"\n', "",
     "key 'upstream.bitsandbytes.source[0].rev_key': nothing says where the commit comes from"),
    ('tag = "{version}"\n', "", ("key 'upstream.bitsandbytes.source[0].tag' is missing: repo and tag name the "
                                "release tag")),
    ('repo = "bitsandbytes-foundation/bitsandbytes"', 'repo = "bitsandbytes"',
     "key 'upstream.bitsandbytes.source[0].repo' must be a GitHub owner/repository"),
    ("pytorch-v{version}.tar.gz", "pytorch-v{verison}.tar.gz", ("key 'upstream.pytorch.source[0].url': {verison} is "
                                                               "no placeholder here (did you mean 'version'?)")),
    ("pytorch-v{version}.tar.gz", "pytorch-v{rev}.tar.gz", ("key 'upstream.pytorch.source[0].url': {rev} is no "
                                                           "placeholder here")),
    ("pytorch-v{version}.tar.gz", "pytorch-v{version.tar.gz", ("key 'upstream.pytorch.source[0].url' is not a valid "
                                                              "template: ")),
    ('url = "{github}/pytorch/pytorch/releases', 'url = "http://github.com/pytorch/pytorch/releases',
     "key 'upstream.pytorch.source[0].url' must be the archive's URL template"),
    # Issue 42: the JSON file and its key go together; the JSON's template takes rev_file's placeholders.
    ('rev_json_key = "llvm_hash"\n', "", ("key 'upstream.triton.source[1].rev_json_key' is missing: rev_json and "
                                          "rev_json_key name the JSON file")),
    ('rev_json_key = "llvm_hash"', 'rev_json_key = "llvm hash"', ("key 'upstream.triton.source[1].rev_json_key' "
                                                                  "must be the key of rev_json's object")),
    ("/{triton_rev}/cmake/llvm-info.json", "/{triton_llvm_rev}/cmake/llvm-info.json",
     "key 'upstream.triton.source[1].rev_json': {triton_llvm_rev} is no placeholder here"),
    # triton-llvm's commit file may name triton's commit (resolved before it), never its own.
    ("/{triton_rev}/cmake/llvm-hash.txt", "/{triton_llvm_rev}/cmake/llvm-hash.txt",
     "key 'upstream.triton.source[1].rev_file': {triton_llvm_rev} is no placeholder here"),
    ('leader = "pytorch"\nkind = "minor-offset"', 'leader = "pytorh"\nkind = "minor-offset"',
     "key 'pairing[0].leader': there is no [upstream.pytorh] (did you mean 'pytorch'?)"),
    ('follower = "torchvision"', 'follower = "torchvison"', ("key 'pairing[0].follower': there is no "
                                                            "[upstream.torchvison] (did you mean 'torchvision'?)")),
    ('follower = "torchvision"', 'follower = "pytorch"', ("key 'pairing[0].follower': a rule pairs two upstreams; "
                                                         "pytorch is its leader too")),
    ('follower = "aotriton"', 'follower = "triton"', ("key 'pairing[3].follower': triton is an [upstream.triton], "
                                                     "pinned in variants.yaml, but the rule's table")),
    ('\nkind = "minor-offset"', '\nkind = "minor_offset"', ("key 'pairing[0].kind' must be one of \"minor-offset\", "
                                                       "\"at-most\", \"series\", got 'minor_offset'")),
    ("follower_major = 0", "follower_major = -1", ("key 'pairing[0].follower_major' must be a whole number from 0, "
                                                  "got -1")),
    ('floor = "2.11"', 'floor = "2.11.0"', "key 'pairing[1].floor' must be the oldest follower series"),
    ('stable_from = "0.29.2"', 'stable_from = "0.29.x"', ("key 'pairing[0].stable_from' must be the first follower "
                                                         "release built on the stable ABI")),
    ('floor = "2.11"', 'floor = "2.11"\nstable_from = "2.11.1"', ("key 'pairing[1].stable_from' is not one a "
                                                                  "kind = \"at-most\" rule takes")),
    ('series = { "2.12" = "3.7"', 'series = { "2.12.1" = "3.7"', ("key 'pairing[2].series.\"2.12.1\"' is not a "
                                                                 "leader series (major.minor)")),
    ('series = { "2.12" = "3.7"', 'series = { "2.12" = "3.7.1"', ("key 'pairing[2].series.\"2.12\"' must be the "
                                                                 "follower series")),
    ('table = "aotriton.toml"', 'table = "aotriton.yaml"', ("key 'pairing[3].table' must be a data table under "
                                                           "tools/rocmlock/data/")),
    ('table = "aotriton.toml"', 'table = "aotrition.toml"', "key 'pairing[3].table': "),  # see below
    ('table = "aotriton.toml"', 'table = "aotriton.toml"\nseries = { "2.12" = "0.11" }',
     "key 'pairing[3].series': a rule with a table takes its series from the table"),
    ('and set its pytorch = [\\"{series}\\"]', 'and set its pytorch = [\\"{serie}\\"]',
     "key 'pairing[3].record': {serie} is no placeholder here (did you mean 'series'?)"),
    ('name = "torchaudio-pytorch"', 'name = "torchvision-pytorch"', ("key 'pairing[1].name': rule name "
                                                                    "'torchvision-pytorch' is already "
                                                                    "pairing[0].name's")),
    ('matplotlib = "matplotlib-base"', 'Torch = "pytorch"', ("key 'conda_names.Torch': PyPI project (normalized) "
                                                            "'torch' is already conda_names.torch's")),
    ('matplotlib = "matplotlib-base"', 'matplotlib = "Matplotlib Base"', ("key 'conda_names.matplotlib' must be the "
                                                                         "conda-forge package name")),
]


@pytest.mark.parametrize(("old", "new", "message"), UPSTREAM_VALUES, ids=[m[:48] for _, _, m in UPSTREAM_VALUES])
def test_bad_upstream_values_are_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = _changed_text(tmp_path, UPSTREAMS, old, new)
    assert str(_refused(path)).startswith(f"{path}: {message}"), str(_refused(path))


@pytest.mark.parametrize(("key", "value", "message"), [
    (("pairing", 2, "record"), "add {series} for {leader}", ("key 'pairing[2].record' is one only a rule with a table "
                                                            "takes")),
    (("pairing", 1, "why"), " ", "key 'pairing[1].why' must be the reason for the rule, in words, got ' '"),
    (("pairing", 2, "series"), {}, ("key 'pairing[2].series' must be a table of leader series = follower series "
                                   "(major.minor), e.g. { \"2.12\" = \"3.7\" }, got an empty table")),
    (("pairing", 3, "table"), "aotrition.toml", "key 'pairing[3].table': {data} has no aotrition.toml"),
    (("upstream",), {}, "key 'upstream' must list at least one upstream"),
    (("upstream", "deepspeed", "source"), [], "key 'upstream.deepspeed.source' must be a non-empty list of sources"),
])
def test_bad_upstream_structure_is_named(tmp_path: Path, key: tuple[str | int, ...], value: Any, message: str) -> None:
    path = _changed(tmp_path, UPSTREAMS, key, value)
    assert str(_refused(path)).startswith(f"{path}: {message.replace('{data}', str(path.parent))}")


# ----------------------------------------------------------------------------- through the CLI


def _checkout(root: Path, name: str, old: str, new: str) -> Path:
    """A checkout-shaped copy (tools/rocmlock, recipes/, pixi.toml) whose data table ``name`` has ``old`` replaced
    by ``new``; the path of that table."""
    shutil.copytree(ROOT / "tools/rocmlock", root / "tools/rocmlock", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(RECIPES, root / "recipes")
    shutil.copy(ROOT / "pixi.toml", root / "pixi.toml")
    table = root / "tools/rocmlock/data" / name
    text = table.read_text()
    assert old in text, old
    table.write_text(text.replace(old, new, 1))
    return table


def _rocmlock(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m rocmlock ARGS` with the copy's rocmlock package (and so its packaged tables) first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root / "tools")}
    return subprocess.run([sys.executable, "-m", "rocmlock", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _one_line(code: int, out: str, err: str, table: Path, message: str) -> None:
    assert code == 2, err
    assert out == "" and "Traceback" not in err, err
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {table}: {message}"), err
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), err


CLI = [
    (GPU, "flash_attn_ck = true", "flash_attn_ck = 1", "key 'gfx90a.flash_attn_ck' must be true or false, got int",
     ["doctor", "--target", "gfx942"]),
    (GPU, 'isa = "9.4.2"', 'isa = "9.4.2"\nmemory = 192', "key 'gfx942.memory' is not one a GPU target row takes",
     ["preset", "-e", "mi300x", "--method", "lora", "-o", "preset.yaml"]),
    (COMPONENTS, 'header = "rocprim/rocprim.hpp"', "header = 1",
     "key 'components.rocprim.header' must be a header path", ["doctor", "-e", "mi300x"]),
    (UPSTREAMS, 'pypi = "torch"', 'pypy = "torch"', ("key 'upstream.pytorch.pypy' is not one an upstream takes "
                                                    "(did you mean 'pypi'?)"), ["outdated"]),
    (UPSTREAMS, 'offset = 15', 'offset = "15"', "key 'pairing[0].offset' must be a whole number, got str",
     ["bump", "flash-attn=2.8.4"]),
]


@pytest.mark.parametrize(("name", "old", "new", "message", "args"), CLI, ids=[c[4][0] + ":" + c[0] for c in CLI])
def test_the_commands_that_read_a_packaged_table_exit_2_in_one_line(tmp_path: Path, name: str, old: str, new: str,
                                                                    message: str, args: list[str]) -> None:
    # The rocmlock of this process is the real package; the subprocess runs the copy, with its broken table.
    root = tmp_path / "checkout"
    table = _checkout(root, name, old, new)
    if args[0] in ("outdated", "bump"):  # refused before any request: nothing listens at this address
        args = [*args, "--recipes-dir", str(root / "recipes"), *network_args(closed_port_url())]
    out = _rocmlock(root, *args)
    _one_line(out.returncode, out.stdout, out.stderr, table, message)
    assert not (root / "preset.yaml").exists()


@pytest.mark.parametrize(("name", "old", "new", "message"), [
    (GPU, "aotriton = false", 'aotriton = "no"', "key 'gfx908.aotriton' must be true or false, got str"),
    (GPU, 'bnb_first_rocm = "6.3"', 'bnb_first_rocm = 6.3', "key 'gfx90a.bnb_first_rocm' must be the first ROCm"),
    # AOTriton's tier per release (gfx1101 and gfx1151 are experimental in the pinned 0.11.2b): a value not a tier, a tier that
    # says kernels where aotriton = false, and a missing entry for the release aotriton.toml pins.
    (GPU, '"0.11.2b" = "experimental", "0.12b"', '"0.11.2b" = "beta", "0.12b"',
     "key 'gfx1101.aotriton_tier.\"0.11.2b\"' must be one of \"supported\", \"experimental\", \"none\""),
    (GPU, '"0.11.2b" = "none"', '"0.11.2b" = "supported"',
     "key 'gfx908.aotriton_tier.\"0.11.2b\"' is \"supported\" but gfx908 has aotriton = false"),
    (GPU, '"0.11b" = "experimental", "0.11.2b" = "experimental", "0.12b" = "supported"',
     '"0.11b" = "experimental", "0.12b" = "supported"',
     "key 'gfx1151.aotriton_tier' has no entry for AOTriton 0.11.2b, the release aotriton.toml pins"),
    (COMPONENTS, "\ndeepspeed = [", "\ndeep-speed = [",
     "key 'packages.deep-speed': no recipe builds a package 'deep-speed'"),
    (COMPONENTS, '"hipblaslt", "hipsparse", "hipsolver"]\n# torchaudio',
     '"hipblaslt", "hipsparse", "hipsolver", "hipsparselt"]\n# torchaudio',
     "key 'packages.torchvision[4]': [components] has no 'hipsparselt'"),
])
@pytest.mark.parametrize("command", ["plan", "build"])
def test_plan_and_build_refuse_a_table_the_recipes_read_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    command: str, name: str, old: str, new: str,
                                                                    message: str) -> None:
    # The copy's tables (variants.yaml's GPU keys come from them; build.sh reads rocm_components.toml): plan checks
    # those before rendering.
    table = _checkout(tmp_path, name, old, new)
    args = [command, "--manifest-path", str(tmp_path / "pixi.toml"), "-e", "mi300x"]
    code = main([*args, "--output", str(tmp_path / "out")] if command == "build" else args)
    out = capsys.readouterr()
    _one_line(code, out.out, out.err, table, message)
    assert not (tmp_path / "out").exists()


def test_bump_refuses_a_recipe_key_naming_no_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # upstreams.toml read from a copy through the real loader, as conftest's aotriton_covers injects it.
    from rocmlock.upstream import bump

    path = _changed_text(tmp_path, UPSTREAMS, 'recipe = "llamafactory"', 'recipe = "llama-factory"')
    table = pins.read_table(path.parent)
    monkeypatch.setattr(bump, "load_table", lambda: table)
    shutil.copytree(RECIPES, tmp_path / "recipes")
    code = main(["bump", "llamafactory=0.9.9", "--recipes-dir", str(tmp_path / "recipes"),
                 "--manifest-path", str(tmp_path / "no-pixi.toml"), *network_args(closed_port_url())])
    out = capsys.readouterr()
    _one_line(code, out.out, out.err, path, f"key 'upstream.llamafactory.recipe' names 'llama-factory', but "
                                            f"{tmp_path / 'recipes'} has no llama-factory/recipe.yaml")
