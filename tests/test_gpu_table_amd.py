"""tools/rocmlock/data/gpu_targets.toml against AMD's own GPU table, PyPI's rocm-bootstrap (issue 34, item 4).

The expectations are read from rocm-bootstrap here, through its public API, not through rocmlock's reader
(rocmlock.gpu.amd): a row that disagrees fails this test even if the reader's comparison were wrong.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
import rocm_bootstrap
from rocmlock.errors import InputError
from rocmlock.gpu import targets as gpu_table

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "tools/rocmlock/data/gpu_targets.toml"
ROWS: dict[str, dict[str, object]] = tomllib.loads(TABLE.read_text())


def test_rocm_bootstrap_is_a_dependency_of_rocmlock_not_of_the_probe() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.replace(" ", "").startswith("rocm-bootstrap==0.3") for d in deps)
    # The standalone probe runs in an environment rocmlock is not installed in: it imports nothing of either.
    assert "rocm_bootstrap" not in (REPO / "tools/verify_env.py").read_text()


@pytest.mark.parametrize("gfx", list(ROWS))
def test_every_row_matches_amds_table(gfx: str) -> None:
    row, target = ROWS[gfx], rocm_bootstrap.lookup_target(gfx)
    assert row["isa"] == f"{target.major}.{target.minor}.{target.stepping}"
    assert row["xnack"] == target.xnack.value
    _, sub, fam = rocm_bootstrap.packaging_chain(gfx)
    assert (row["family"], row["sub_family"]) == (fam.key, sub.key)
    assert gfx in {t.name for t in sub.members} and gfx in {t.name for t in fam.members}
    generics = [b.llvm_generic for b in (sub, fam) if b.llvm_generic]
    if row["generic"]:
        assert row["generic"] == generics[0]  # the most specific generic target of its chain
    else:  # none in its chain, or gfx9-generic, which leaves out the MAI targets (rocm_bootstrap BUNDLE_GFX9_0)
        assert not generics or (generics[0] == "gfx9-generic" and gfx in ("gfx908", "gfx90a"))


def test_the_targets_rocm_714_trains_on_are_rows() -> None:
    """TheRock's RELEASES.md lists device packages for them; PyTorch, flash-attn's Triton backend and
    bitsandbytes build for them."""
    rows = gpu_table.all_targets()
    for gfx in ("gfx1102", "gfx1150", "gfx1152", "gfx1153", "gfx1200"):
        target = rows[gfx]
        assert target.supports_rocm("7.14") and target.is_rdna and target.wavefront_size == 32
        assert target.flash_attn_triton and not target.flash_attn_ck
        assert target.supports_bitsandbytes("7.14")
    # Not in PyTorch's rocm7.2 wheel architectures: ROCm 7.14 (TheRock) is their first.
    assert [g for g, t in rows.items() if not t.supports_rocm("7.2")] == ["gfx1152", "gfx1153"]


def _table_with(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "gpu_targets.toml"
    shutil.copy(TABLE, path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(("old", "new", "message"), [
    ('family = "gfx9"', 'family = "gfx10"', ("key 'gfx908.family' is 'gfx10', but AMD's GPU table (rocm-bootstrap "
                                            "0.3.0) says 'gfx9'")),
    ('sub_family = "gfx115x"', 'sub_family = "gfx110x"', "key 'gfx1150.sub_family' is 'gfx110x', but AMD's"),
    ('generic = ""', 'generic = "gfx9-generic"', ("key 'gfx908.generic' is 'gfx9-generic', but AMD's GPU table "
                                                 "(rocm-bootstrap 0.3.0) says ''")),
    ('generic = "gfx12-generic"', 'generic = "gfx11-generic"', "key 'gfx1200.generic' is 'gfx11-generic'"),
    # an empty generic is a value too: AMD's table gives gfx942 one (issue 41: "" was not compared)
    ('generic = "gfx9-4-generic"', 'generic = ""', ("key 'gfx942.generic' is '', but AMD's GPU table "
                                                   "(rocm-bootstrap 0.3.0) says 'gfx9-4-generic'")),
    ('xnack = "supported"', 'xnack = "unsupported"', "key 'gfx908.xnack' is 'unsupported', but AMD's"),
])
def test_a_row_that_disagrees_with_amd_is_refused_naming_the_key(tmp_path: Path, old: str, new: str,
                                                                 message: str) -> None:
    path = _table_with(tmp_path, old, new)
    with pytest.raises(InputError) as err:
        gpu_table.read_targets(path)
    assert str(err.value).startswith(f"{path}: {message}")
    assert (err.value.hint or "").startswith("write ")


def test_a_target_amd_does_not_know_is_refused(tmp_path: Path) -> None:
    path = _table_with(tmp_path, '[gfx1153]\nisa = "11.5.3"', '[gfx1154]\nisa = "11.5.4"')
    with pytest.raises(InputError, match=r"key 'gfx1154': gfx1154 is not a target of AMD's GPU table"):
        gpu_table.read_targets(path)
