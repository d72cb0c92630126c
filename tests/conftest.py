from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fakeupstream import FakeUpstream
    from flash_attn_aot import Compiles
    from quetz_server import QuetzChannel, QuetzServer
    from rocmlock.build.recipes import Matrix

sys.path.insert(0, str(Path(__file__).parent))

# In CI an unlisted skip fails the run (tests/ciskips.py); in_ci is the tests' one definition of "in CI".
from ciskips import in_ci, pytest_configure

__all__ = ["in_ci", "pytest_configure"]  # pytest_configure: a hook pytest finds here


def _loopback_bypasses_proxies() -> None:
    """Every server the tests start listens on 127.0.0.1: a machine's ``http_proxy`` must not carry requests to it.

    A CI host behind a proxy (``http_proxy`` set, ``no_proxy`` not naming 127.0.0.1) failed 10 tests and skipped
    the quetz ones: urllib, requests, pip, boto3 and rattler (reqwest) sent their 127.0.0.1 requests to the
    proxy. All of them skip the proxy for the hosts ``no_proxy``/``NO_PROXY`` name (CPython
    Lib/urllib/request.py proxy_bypass_environment; reqwest src/proxy.rs NoProxy::from_env). Set at import, so
    session fixtures and child processes have it too; any proxy stays in place for other hosts.
    """
    for name in ("no_proxy", "NO_PROXY"):
        hosts = [h.strip() for h in os.environ.get(name, "").split(",") if h.strip()]
        os.environ[name] = ",".join(dict.fromkeys([*hosts, "127.0.0.1", "localhost"]))


_loopback_bypasses_proxies()

SCRUB_PREFIXES = ("CONDA_", "PIXI_", "HIP_", "ROCM_", "HSA_", "RATTLER_", "MAMBA_")
SCRUB_NAMES = ("RATTLER_AUTH_FILE", "ROCM_PATH", "HIP_PATH", "HIP_PLATFORM", "MAX_JOBS", "PYTORCH_ROCM_ARCH",
               "GPU_ARCHS", "FLASH_ATTENTION_TRITON_AMD_ENABLE", "AOTRITON_INSTALLED_PREFIX",
               "ROCMLOCK_MAGMA_HOME", "MAGMA_HOME", "SOURCE_DATE_EPOCH", "REGISTRY_AUTH_FILE")


def _scrubbed(name: str) -> bool:
    return name.startswith(SCRUB_PREFIXES) or name in SCRUB_NAMES


# Environment variables that change behaviour never leak in from the developer's shell: taken out at import, so
# that session and module fixtures (an image built once per module, say) never see them either; a
# SOURCE_DATE_EPOCH in the shell changed such an image's digest, and a test comparing it with one built inside a
# test failed.
for _name in [n for n in os.environ if _scrubbed(n)]:
    del os.environ[_name]


@pytest.fixture(autouse=True)
def _scrub_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a test before this one set without monkeypatch is taken out again."""
    for name in list(os.environ):
        if _scrubbed(name):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def channels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A conda-forge-like channel and a private ROCm channel, built once per test session."""
    from channels import build_channel, forge_packages, private_packages

    root = tmp_path_factory.mktemp("channels")
    return {
        "forge": build_channel(root / "forge", forge_packages()),
        "private": build_channel(root / "private", private_packages()),
    }


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    """The shipped variant matrix (recipes/variants.yaml)."""
    from rocmlock.build.recipes import load_matrix
    from shipped import RECIPES

    return load_matrix(RECIPES)


@pytest.fixture(scope="session")
def locked_ws(channels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-GPU workspace locked once per session (tests/lockhelpers.py); tests change only copies of it."""
    from lockhelpers import lock_fresh_workspace

    return lock_fresh_workspace(tmp_path_factory.mktemp("locked"), channels)


@pytest.fixture
def ws_copy(locked_ws: Path, tmp_path: Path) -> Path:
    """A copy of the session's locked workspace that a test may change."""
    dest = tmp_path / "ws"
    shutil.copytree(locked_ws, dest)
    return dest


@pytest.fixture(scope="session")
def quetz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuetzServer]:
    """A real quetz server (tests/quetz_server.py), one per session; ``quetz_channel`` gives each test a channel.

    When it cannot start the tests that use it fail under CI=true (CI provides what it needs) and are
    skipped elsewhere, with quetz's own message either way.
    """
    from quetz_server import QuetzUnavailable, quetz_server

    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(quetz_server(tmp_path_factory.mktemp("quetz")))
        except QuetzUnavailable as exc:
            if in_ci():
                pytest.fail(f"CI must run the quetz server: {exc}")
            pytest.skip(f"no quetz server here: {exc}")
        yield server


@pytest.fixture
def quetz_channel(quetz: QuetzServer) -> QuetzChannel:
    """A new private channel on the session's quetz server, and an API key that owns it."""
    return quetz.private_channel()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeUpstream]:
    """A PyPI-JSON-API / GitHub stand-in on 127.0.0.1 (tests/fakeupstream.py) for outdated, bump and upstream."""
    from fakeupstream import serve

    # requests takes proxies from the environment (as pip does): never send 127.0.0.1 through one.
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    with serve() as server:
        yield server

@pytest.fixture
def aotriton_covers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., None]:
    """``aotriton_covers("2.12", "2.15")``: bump and outdated read a copy of tools/rocmlock/data whose
    aotriton.toml lists those PyTorch series (through the real loader), as if someone had checked them."""
    import tomllib

    from rocmlock.upstream import bump, outdated
    from rocmlock.upstream.pins import read_table

    def cover(*series: str) -> None:
        data = tmp_path / "rocmlock-data"
        shutil.copytree(Path(__file__).resolve().parents[1] / "tools/rocmlock/data", data, dirs_exist_ok=True)
        path = data / "aotriton.toml"
        text = path.read_text()
        listed = "pytorch = " + repr(tomllib.loads(text)["pytorch"]).replace("'", '"')
        assert listed in text, listed
        path.write_text(text.replace(listed, "pytorch = [" + ", ".join(f'"{s}"' for s in series) + "]"))
        table = read_table(data)
        monkeypatch.setattr(bump, "load_table", lambda: table)
        monkeypatch.setattr(outdated, "load_table", lambda: table)

    return cover


# py-rattler 0.28's tokio worker threads race the interpreter's finalization (the pyo3-async-runtimes
# shutdown problem, PyO3/pyo3-async-runtimes#40): a process that indexed or solved crashes with SIGSEGV or
# SIGABRT at exit in roughly 1 run of 6 here, after everything succeeded. The CLI leaves through
# `rocmlock.cli.main.run` (flush, `os._exit`) for the same reason; the test session does the same, so CI sees
# pytest's real exit status (5 for "no tests" included) and never a spurious 139.
_EXIT_STATUS: list[int] = []


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """cwd and every cache rocmlock or rattler could write to, under ``tmp_path`` (the secrets tests search it all)."""
    for var, sub in (("RATTLER_CACHE_DIR", "rattler-cache"), ("XDG_CACHE_HOME", "xdg-cache"),
                     ("ROCMLOCK_CACHE_DIR", "rocmlock-cache")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# flash-attn's training kernels compiled for every Triton-backend GPU target (tests/test_triton_aot.py): 12 targets
# of about 40 s of CPU each, the suite's costliest test by far (205 s of its ~20 minutes, on 2 cores, when it ran
# in the foreground). Started in the background at nice 19 when the test is among the collected ones, the
# compiles use the CPU the rest of the suite leaves idle (a load average of 1.1-1.6 on 2 cores without them);
# the test collects them, waiting for what is left.
_FLASH_ATTN_TEST = ("test_triton_aot.py", "test_flash_attns_own_training_kernels_compile_for_every_triton_backend_target")
_COMPILES = pytest.StashKey["Compiles"]()


def start_flash_attn_compiles(sdist: Path, workdir: Path) -> Compiles:
    from flash_attn_aot import Compiles, triton_targets

    env = {k: v for k, v in os.environ.items() if not _scrubbed(k)}
    targets = [f"{t.gfx}:{t.wavefront_size}" for t in triton_targets()]
    return Compiles(sdist, targets, workdir, os.cpu_count() or 1, env)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not any(
            (item.path.name, getattr(item, "originalname", item.name)) == _FLASH_ATTN_TEST for item in session.items):
        return  # (tests/test_ci_skips.py runs this conftest over a suite of its own, without flash_attn_aot)
    import importlib.util
    import tempfile

    from flash_attn_aot import pinned, sdist_to_test, sha256

    sdist = sdist_to_test()
    # Without triton or the pinned sdist (absent, or other bytes) the test says so itself (and fails under
    # CI=true): nothing is started, and nothing here can stop the session.
    if (importlib.util.find_spec("triton") is not None and sdist.is_file()
            and sha256(sdist) == pinned()[1]):
        workdir = Path(tempfile.mkdtemp(prefix="rocmlock-flash-attn-aot-"))
        session.config.stash[_COMPILES] = start_flash_attn_compiles(sdist, workdir)


@pytest.fixture(scope="session")
def flash_attn_compiles(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Compiles]:
    """``flash_attn_compiles(sdist)``: the background compiles started at collection, or (where none was, e.g.
    the sdist appeared later) ones started now."""

    def get(sdist: Path) -> Compiles:
        if _COMPILES not in request.config.stash:
            request.config.stash[_COMPILES] = start_flash_attn_compiles(sdist, tmp_path_factory.mktemp("fa-aot"))
        return request.config.stash[_COMPILES]

    return get


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if (compiles := session.config.stash.get(_COMPILES, None)) is not None:
        compiles.stop()
    # session.exitstatus, not the argument: the CI skip gate (ciskips.SkipGate) may have failed the run.
    _EXIT_STATUS.append(int(session.exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _EXIT_STATUS and os.environ.get("ROCMLOCK_TEST_NORMAL_EXIT") != "1":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
