"""Every key of the workspace model with a value of the wrong type: exit 2 and one line naming file, key and type.

Table-driven: each case replaces one value of a valid manifest (or adds one key) and runs ``rocmlock lock``
and ``rocmlock export``. The keys are those rocmlock models (rocmlock.workspace.manifest, .dependencies, .platforms,
.pypi, .pixi_keys), as pixi 0.77 types them (pixi_manifest/src/toml/{workspace,feature,environment,
target,channel}.rs: a channel priority is an integer, a solve group a string, ``no-default-feature`` a
boolean). No solve runs: every case fails while the manifest is read. Cost: about 4 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rocmlock.cli.main import main

BASE = """[workspace]
name = "types"
channels = ["conda-forge", { channel = "./private", priority = 1 }]
platforms = ["linux-64", { name = "linux-64-gfx942", platform = "linux-64", __amdgpu_arch = "9.4.2" }]
channel-priority = "strict"

[dependencies]
python = "3.12.*"
numpy = { version = ">=2", build = "py312*" }

[target.linux-64.dependencies]
requests = "*"

[constraints]
openssl = ">=3"

[feature.gfx942]
platforms = ["linux-64-gfx942"]
channels = ["conda-forge"]
channel-priority = "strict"
dependencies = { amdgpu-target = { version = "*", build = "gfx942" } }

[environments]
cpu = ["gfx942"]
mi300x = { features = ["gfx942"], solve-group = "gpu", no-default-feature = false }
"""

DEPS = '[dependencies]\npython = "3.12.*"\nnumpy = { version = ">=2", build = "py312*" }\n'
FEATURE = BASE[BASE.index("[feature.gfx942]"):BASE.index("[environments]")]
ENVS = BASE[BASE.index("[environments]"):]


def _top(key_line: str, table: str) -> tuple[tuple[str, str], ...]:
    """Replace the table ``table`` by a top-level ``key_line`` (TOML keys before the first table)."""
    insert = ("[workspace]\n", f"{key_line}\n[workspace]\n")
    return ((table, ""), insert) if table else (insert,)


def _ws_key(line: str) -> tuple[str, str]:
    """Add ``line`` to the [workspace] table."""
    return 'channel-priority = "strict"\n\n[dependencies]', f'channel-priority = "strict"\n{line}\n\n[dependencies]'


# (replacements old -> new, the key the error must name, the words of the expected type)
CASES = [
    ('name = "types"', "name = 3", "workspace.name", "a string"),
    ('channels = ["conda-forge", { channel = "./private", priority = 1 }]', 'channels = "conda-forge"',
     "workspace.channels", "a list"),
    ('channels = ["conda-forge", {', 'channels = [3, {', "workspace.channels[0]", "channel"),
    ('{ channel = "./private", priority = 1 }', '{ channel = 7, priority = 1 }', "workspace.channels[1]", "channel"),
    ('{ channel = "./private", priority = 1 }', '{ channel = "./private", priority = "high" }',
     "workspace.channels[1].priority", "an integer"),
    ('{ channel = "./private", priority = 1 }', '{ channel = "./private", priority = 1.5 }',
     "workspace.channels[1].priority", "an integer"),
    ('{ channel = "./private", priority = 1 }', '{ channel = "./private", priority = true }',
     "workspace.channels[1].priority", "an integer"),
    ('platforms = ["linux-64", {', 'platforms = [64, {', "workspace.platforms[0]", ""),
    ('platforms = ["linux-64", { name', 'platforms = "linux-64"\nx = [{ name', "workspace.platforms", "a list"),
    ('__amdgpu_arch = "9.4.2" }]', '__amdgpu_arch = 942 }]', "workspace.platforms[1].__amdgpu_arch", "a string"),
    ('channel-priority = "strict"\n\n[dependencies]', 'channel-priority = 1\n\n[dependencies]',
     "workspace.channel-priority", "one of"),
    ('[dependencies]\npython = "3.12.*"', "[dependencies]\npython = 3.12", "dependencies.python", "string"),
    (_top('dependencies = "python"', DEPS), "dependencies", "a table"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = 2, build = "py312*" }',
     "dependencies.numpy.version", "string"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = ">=2", build = 312 }',
     "dependencies.numpy.build", "a string"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = ">=2", channel = ["a"] }',
     "dependencies.numpy.channel", "a string"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = ">=2", build-number = [1] }',
     "dependencies.numpy.build-number", "a string"),
    (*_ws_key('exclude-newer = 3'), "workspace.exclude-newer", "date"),
    (*_ws_key('solve-strategy = 3'), "workspace.solve-strategy", "one of"),
    (*_ws_key('pypi-options = 3'), "workspace.pypi-options", "a table"),
    ('{ name = "linux-64-gfx942", platform', '{ name = 942, platform', "workspace.platforms[1].name", "a string"),
    ('platform = "linux-64", __amdgpu_arch', 'platform = ["linux-64"], __amdgpu_arch', "workspace.platforms[1].platform",
     "a string"),
    (_top('host-dependencies = ["python"]', ""), "host-dependencies", "a table"),
    ((('[constraints]\nopenssl = ">=3"\n', ""), ("[workspace]\n", 'constraints = "openssl"\n[workspace]\n')),
     "constraints", "a table"),
    ('[feature.gfx942]\nplatforms', '[feature.gfx942]\ntarget = "linux-64"\nplatforms', "feature.gfx942.target",
     "a table"),
    ('[target.linux-64.dependencies]\nrequests = "*"', '[target]\nlinux-64 = "requests"',
     "target.linux-64", "a table"),
    ('[target.linux-64.dependencies]\nrequests = "*"', '[target.linux-64]\ndependencies = ["requests"]',
     "target.linux-64.dependencies", "a table"),
    ('[constraints]\nopenssl = ">=3"', "[constraints]\nopenssl = 3", "constraints.openssl", "string"),
    ('[feature.gfx942]\nplatforms = ["linux-64-gfx942"]', '[feature.gfx942]\nplatforms = "linux-64-gfx942"',
     "feature.gfx942.platforms", "a list"),
    ('[feature.gfx942]\nplatforms = ["linux-64-gfx942"]', '[feature.gfx942]\nplatforms = [942]',
     "feature.gfx942.platforms[0]", "a platform name"),
    ('channels = ["conda-forge"]\nchannel-priority = "strict"\ndependencies',
     'channels = "conda-forge"\nchannel-priority = "strict"\ndependencies', "feature.gfx942.channels", "a list"),
    ('channels = ["conda-forge"]\nchannel-priority = "strict"\ndependencies',
     'channels = ["conda-forge"]\nchannel-priority = false\ndependencies', "feature.gfx942.channel-priority",
     "one of"),
    ('dependencies = { amdgpu-target = { version = "*", build = "gfx942" } }',
     'dependencies = ["amdgpu-target"]', "feature.gfx942.dependencies", "a table"),
    ('build = "gfx942" } }\n', 'build = 942 } }\n', "feature.gfx942.dependencies.amdgpu-target.build", "a string"),
    (_top('feature = "gfx942"', FEATURE) + (("cpu = [\"gfx942\"]\n", ""),), "feature", "a table"),
    ('[environments]\ncpu = ["gfx942"]', '[environments]\ncpu = "gfx942"', "environments.cpu", "list"),
    ('[environments]\ncpu = ["gfx942"]', "[environments]\ncpu = [942]", "environments.cpu[0]", "a feature name"),
    ('[environments]\ncpu = ["gfx942"]', '[environments]\ncpu = [["gfx942"]]', "environments.cpu[0]",
     "a feature name"),
    ('{ features = ["gfx942"], solve-group', '{ features = "gfx942", solve-group', "environments.mi300x.features",
     "a list"),
    ('solve-group = "gpu"', "solve-group = 1", "environments.mi300x.solve-group", "a string"),
    ("no-default-feature = false", 'no-default-feature = "yes"', "environments.mi300x.no-default-feature",
     "a boolean"),
    (_top('environments = ["cpu"]', ENVS), "environments", "a table"),
]


def _case(case: tuple) -> tuple[tuple[tuple[str, str], ...], str, str]:
    if isinstance(case[0], str):
        return ((case[0], case[1]),), case[2], case[3]
    return case[0], case[1], case[2]


CASES = [_case(c) for c in CASES]


@pytest.mark.parametrize(("edits", "key", "expected"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("command", ["lock", "export"])
def test_a_wrong_type_is_one_line_naming_file_key_and_type(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           edits: tuple[tuple[str, str], ...], key: str,
                                                           expected: str, command: str) -> None:
    text = BASE
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    manifest = tmp_path / "pixi.toml"
    manifest.write_text(text)
    assert main([command, "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("hint: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {manifest}: "), err
    assert f"'{key}" in lines[0] and expected in lines[0], err
    assert "Traceback" not in err
    # What to do, on the line after: every key says it (a type error named the key and the type, but no fix).
    assert err.splitlines()[1].startswith("hint: "), err


# Values of the right type that pixi 0.77 still rejects while it reads the manifest, and rocmlock must reject
# the same way (exit 2, one line, the key), before anything is written or solved:
# - an environment name outside ``^[a-z0-9-]+$`` (pixi_manifest/src/environment.rs, EnvironmentName::from_str);
#   it is also the directory envs/<name>/ the exports go to, so ``..`` would write outside envs/;
# - a channel URL that does not parse (pixi parses channels with the url crate: toml/channel.rs), credentials
#   never shown;
# - a dependency table whose parts do not form a match spec (pixi_spec toml.rs builds a MatchSpec from them).
SECRET_IN_URL = "pw-2f9e1"
BAD_VALUES = [
    ('[environments]\ncpu = ["gfx942"]', '[environments]\n".." = ["gfx942"]', "environments...",
     "not a valid environment name"),
    ('[environments]\ncpu = ["gfx942"]', '[environments]\n"../../x" = ["gfx942"]', "environments.../../x",
     "not a valid environment name"),
    ('[environments]\ncpu = ["gfx942"]', '[environments]\nCpu_1 = ["gfx942"]', "environments.Cpu_1",
     "not a valid environment name"),
    # Valid to pixi's pattern, but no directory can be named so (NAME_MAX 255): it failed at write time, exit 1.
    ('[environments]\ncpu = ["gfx942"]', '[environments]\n' + "e" * 300 + ' = ["gfx942"]', "environments." + "e" * 40,
     "an environment name of 300 characters"),
    # pixi refuses a key it does not know in every table it reads (toml_span TableHelper::finalize: toml/
    # manifest.rs, workspace.rs, feature.rs, environment.rs, target.rs), so a typo never drops dependencies.
    ('[dependencies]\npython', '[dependecies]\npython', "dependecies", "not a key pixi reads"),
    ('channel-priority = "strict"\n\n[dependencies]', 'chanels = ["x"]\nchannel-priority = "strict"\n\n[dependencies]',
     "workspace.chanels", "not a key pixi reads"),
    ('[feature.gfx942]\nplatforms', '[feature.gfx942]\ndependecies = { x = "*" }\nplatforms',
     "feature.gfx942.dependecies", "not a key pixi reads"),
    ('[target.linux-64.dependencies]', '[target.linux-64.dependecies]', "target.linux-64.dependecies",
     "not a key pixi reads"),
    ('solve-group = "gpu"', 'solve-group = "gpu", dependecies = { x = "*" }', "environments.mi300x.dependecies",
     "not a key pixi reads"),
    # environment.rs: host-/build-dependencies and system-requirements are feature-only keys.
    ('solve-group = "gpu"', 'solve-group = "gpu", host-dependencies = { x = "*" }',
     "environments.mi300x.host-dependencies", "not a key pixi reads"),
    ('[environments]\ncpu = ["gfx942"]', '[environments]\ncpu = {}', "environments.cpu", "features"),
    # toml/manifest.rs: "The feature 'default' is reserved and cannot be redefined" (it is the top-level tables).
    ('[feature.gfx942]\nplatforms', '[feature.default.dependencies]\nnumpy = "*"\n\n[feature.gfx942]\nplatforms',
     "feature.default", "reserved"),
    ('{ channel = "./private", priority = 1 }',
     f'{{ channel = "https://u:{SECRET_IN_URL}@[::1/t/tk-7c1d/x", priority = 1 }}', "workspace.channels[1]",
     "not a valid channel"),
    ('channels = ["conda-forge", {', 'channels = ["http://h:99999/x", {', "workspace.channels[0]",
     "not a valid channel"),
    ('channels = ["conda-forge"]\nchannel-priority', 'channels = ["http://"]\nchannel-priority',
     "feature.gfx942.channels[0]", "not a valid channel"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = ">=2", build = "py312[x]" }',
     "dependencies.numpy", "not a valid match spec"),
    ('numpy = { version = ">=2", build = "py312*" }', 'numpy = { version = ">=2", channel = "::" }',
     "dependencies.numpy", "not a valid match spec"),
    ('numpy = { version = ">=2", build = "py312*" }',
     f'numpy = {{ version = ">=2", channel = "https://u:{SECRET_IN_URL}@[::1/x" }}', "dependencies.numpy",
     "not a valid match spec"),
    # A key pixi reads as a PackageName: a spec in it ("rocm-version 99" became rocm-version ==99) is refused.
    ('numpy = { version = ">=2", build = "py312*" }', '"numpy 99" = "*"', "dependencies.numpy 99",
     "is not a package name"),
    ('numpy = { version = ">=2", build = "py312*" }', '"numpy>=2" = "*"', "dependencies.numpy>=2",
     "is not a package name"),
]


@pytest.mark.parametrize(("old", "new", "key", "expected"), BAD_VALUES,
                         ids=[f"{c[2]}-{i}" for i, c in enumerate(BAD_VALUES)])
@pytest.mark.parametrize("command", ["lock", "export"])
def test_a_value_pixi_rejects_is_one_line_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              old: str, new: str, key: str, expected: str,
                                                              command: str) -> None:
    assert BASE.count(old) == 1, old
    manifest = tmp_path / "ws" / "pixi.toml"
    manifest.parent.mkdir()
    manifest.write_text(BASE.replace(old, new))
    assert main([command, "--manifest-path", str(manifest)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("hint: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: {manifest}: "), err
    assert f"'{key}" in lines[0] and expected in lines[0], err
    assert "Traceback" not in err and SECRET_IN_URL not in err and "tk-7c1d" not in err
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".rocmlock" not in p.parts)
    assert written == ["ws", "ws/pixi.toml"]  # no output, inside the workspace or outside it
