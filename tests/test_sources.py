"""`rocmlock sources fetch` / `build --sources`: a build host without network builds from a source cache.

Real things only: a url source and a git source (a bare repository served by plain HTTP, git's "dumb"
protocol) on 127.0.0.1, both with credentials in the URL; rattler-build fills the cache; the server is
stopped and a real rattler-build build of a small noarch recipe takes both sources from the cache.
The cache layout is rattler-build 0.73's (crates/rattler_build_source_cache/src/{cache,index}.rs).
Cost: about 10 s (each fetch or build is a real rattler-build run of a recipe with no requirements).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocmlock.build import sourcefetch
from rocmlock.build.plan import make_plan
from rocmlock.build.sources import plan_sources
from rocmlock.cli.main import main
from rocmlock.workspace.manifest import load_workspace

SECRET = "s3cret-token-4711"
WORKSPACE = """
[workspace]
name = "offline-test"
channels = ["conda-forge"]
platforms = ["linux-64"]

[dependencies]
offline-demo = "*"

[environments]
node = []
"""
VARIANTS = 'rocm_version: ["7.2"]\ngpu_target: [gfx942]\npython: ["3.12"]\n'
RECIPE = """
package: {{name: offline-demo, version: "1.0"}}
source:
  - url: http://user:{secret}@127.0.0.1:{port}/demo-1.0.tar.gz
    sha256: {sha256}
    target_directory: tarball
  - git: http://user:{secret}@127.0.0.1:{port}/demo.git
    rev: {commit}
    target_directory: repo
build:
  noarch: generic
  script:
    - mkdir -p $PREFIX/share/offline-demo
    # rattler-build strips the archive's one top directory (demo/)
    - cp tarball/data.txt repo/readme.txt $PREFIX/share/offline-demo/
"""


def _tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"from the tarball\n"
        info = tarfile.TarInfo("demo/data.txt")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _git(*args: str, cwd: Path) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _bare_repo(srv: Path, work: Path) -> str:
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "readme.txt").write_text("from the git repository\n")
    _git("add", "readme.txt", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    commit = _git("rev-parse", "HEAD", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(srv / "demo.git"), cwd=work)
    _git("update-server-info", cwd=srv / "demo.git")  # what git's dumb HTTP protocol reads
    return commit


class Upstream:
    """The sources' server on 127.0.0.1, a process of its own (py-rattler-build holds the GIL while it
    builds, so a server thread of the test's process could not answer); ``stop()`` makes every source
    URL unreachable."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1", "0"],
                                     cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
        self.port = int(re.search(r" port (\d+)", line).group(1))  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[Upstream]:
    srv = tmp_path / "srv"
    srv.mkdir()
    (srv / "demo-1.0.tar.gz").write_bytes(_tarball())
    server = Upstream(srv)
    yield server
    server.stop()


def _workspace(tmp_path: Path, upstream: Upstream, sha256: str | None = None) -> Path:
    commit = _bare_repo(upstream.root, tmp_path / "work")
    real = hashlib.sha256((upstream.root / "demo-1.0.tar.gz").read_bytes()).hexdigest()
    ws = tmp_path / "ws"
    (ws / "recipes" / "offline-demo").mkdir(parents=True)
    (ws / "recipes" / "variants.yaml").write_text(VARIANTS)
    (ws / "recipes" / "offline-demo" / "recipe.yaml").write_text(
        RECIPE.format(secret=SECRET, port=upstream.port, sha256=sha256 or real, commit=commit))
    (ws / "pixi.toml").write_text(WORKSPACE)
    return ws / "pixi.toml"


def _sources(manifest: Path, *args: str) -> int:
    return main(["sources", *args, "--manifest-path", str(manifest)])


def _build(manifest: Path, output: Path, *args: str) -> int:
    return main(["build", "--manifest-path", str(manifest), "--output", str(output), "--skip-doctor", *args])


def _all_bytes(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path, path.read_bytes()


def _snapshot(cache: Path) -> dict[str, bytes]:
    """Every file of the cache except git's own internals (its index holds file times)."""
    return {str(p.relative_to(cache)): data for p, data in _all_bytes(cache) if "/.git/" not in str(p)}


def test_fetch_then_build_with_the_network_gone(tmp_path: Path, upstream: Upstream,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _workspace(tmp_path, upstream)
    cache = tmp_path / "cache"
    assert _sources(manifest, "fetch", "--to", str(cache), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert [(s["kind"], len(s["used_by"])) for s in report["fetched"]] == [("git", 1), ("url", 1)]
    entries = json.loads((cache / "rocmlock-sources.json").read_text())["sources"]
    assert len(entries) == 2 and len(list((cache / ".metadata").glob("*.json"))) == 2
    for _path, data in _all_bytes(cache):  # no credential anywhere, git's internals included
        assert SECRET.encode() not in data
    assert not list(cache.glob(".rocmlock-staging-*"))

    upstream.stop()
    # The proof that the network is needed: without the cache the same build fails.
    assert _build(manifest, tmp_path / "no-cache") == 1
    capsys.readouterr()
    assert _sources(manifest, "check", "--to", str(cache)) == 0
    out = tmp_path / "out"
    assert _build(manifest, out, "--sources", str(cache)) == 0
    assert len(list((out / "noarch").glob("offline-demo-1.0-*.conda"))) == 1
    log = next((out / "logs").glob("offline-demo*.log")).read_text()
    assert "Found extracted source in cache" in log and "Found git source in cache" in log
    assert SECRET not in log


def test_fetch_is_deterministic_and_resumable(tmp_path: Path, upstream: Upstream,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _workspace(tmp_path, upstream)
    one, two = tmp_path / "one", tmp_path / "two"
    assert _sources(manifest, "fetch", "--to", str(one)) == 0
    assert _sources(manifest, "fetch", "--to", str(two)) == 0
    assert _snapshot(one) == _snapshot(two)
    before = _snapshot(one)
    capsys.readouterr()
    assert _sources(manifest, "fetch", "--to", str(one)) == 0
    assert "0 fetched, 2 already there" in capsys.readouterr().out
    assert _snapshot(one) == before


def test_wrong_sha256_is_refused_in_one_line_and_leaves_no_entry(tmp_path: Path, upstream: Upstream,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _workspace(tmp_path, upstream, sha256="0" * 64)
    cache = tmp_path / "cache"
    assert _sources(manifest, "fetch", "--to", str(cache)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("fetching ")]
    assert len(err) == 2 and err[0].startswith("error: ") and err[1].startswith("hint: "), err
    assert "demo-1.0.tar.gz" in err[0] and SECRET not in err[0]
    assert "sha256 mismatch" in err[0] and "0" * 64 in err[0] and "staging" not in err[0]
    # The git source fetched before it stays (a later run resumes); the url source has no entry at all.
    kept = json.loads((cache / "rocmlock-sources.json").read_text())["sources"]
    assert [e["kind"] for e in kept] == ["git"]
    assert all("demo-1.0.tar.gz" not in p.read_text() for p in (cache / ".metadata").glob("*.json"))
    assert not list(cache.glob(".rocmlock-staging-*"))
    assert not list(cache.glob("*_demo-1.0.tar.gz"))


def test_an_interrupted_fetch_leaves_no_half_entry(tmp_path: Path, upstream: Upstream,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = _workspace(tmp_path, upstream)
    cache = tmp_path / "cache"

    def interrupted(meta: dict) -> str:
        raise KeyboardInterrupt  # after the entry's paths moved, before its index file

    monkeypatch.setattr(sourcefetch, "_clean_metadata", interrupted)
    assert _sources(manifest, "fetch", "--to", str(cache)) == 130
    assert not (cache / ".metadata").exists() or not list((cache / ".metadata").glob("*.json"))
    assert _sources(manifest, "check", "--to", str(cache)) == 2  # nothing there counts as cached
    monkeypatch.undo()
    assert _sources(manifest, "fetch", "--to", str(cache)) == 0
    assert _sources(manifest, "check", "--to", str(cache)) == 0


def test_check_names_a_missing_or_damaged_entry(tmp_path: Path, upstream: Upstream,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _workspace(tmp_path, upstream)
    cache = tmp_path / "cache"
    assert _sources(manifest, "fetch", "--to", str(cache)) == 0
    archive = next(cache.glob("*_demo-1.0.tar.gz"))
    archive.write_bytes(archive.read_bytes() + b"x")
    capsys.readouterr()
    assert _build(manifest, tmp_path / "out", "--sources", str(cache)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: ") and "demo-1.0.tar.gz" in err[0] and "sha256" in err[0]
    assert not (tmp_path / "out" / "noarch").exists()  # refused before anything was built
    assert _sources(manifest, "check", "--to", str(tmp_path / "nowhere")) == 2


def test_a_git_rev_the_repository_lacks_is_refused_in_one_line(tmp_path: Path, upstream: Upstream,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    manifest = _workspace(tmp_path, upstream)
    recipe = manifest.parent / "recipes" / "offline-demo" / "recipe.yaml"
    text = recipe.read_text()
    rev = re.search(r"rev: (\w+)", text).group(1)  # type: ignore[union-attr]
    recipe.write_text(text.replace(rev, "f" * 40))
    assert _sources(manifest, "fetch", "--to", str(tmp_path / "cache")) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("fetching ")]
    assert len(err) == 2 and err[0].startswith("error: ") and "demo.git" in err[0], err
    assert SECRET not in err[0] and "staging" not in err[0] and "f" * 40 in err[0]


def test_the_shipped_plan_lists_each_rocms_pytorch_source(tmp_path: Path) -> None:
    """Issue 34: what `rocmlock sources fetch` would fetch for an environment of each ROCm version: 7.2's PyTorch
    2.12.1 as its hash-pinned release asset, 7.14's 2.14.1 as a git checkout of the full tag commit (fetched by
    rattler-build and refused unless it checks out that commit), and 7.14's Triton 3.8.0 without an LLVM archive."""
    from test_plan import mirror, workspace

    mirror(tmp_path, ("pytorch-rocm", "triton-rocm", "rocm-version", "amdgpu-target", "flash-attn-rocm",
                      "llamafactory"))
    manifest = workspace(tmp_path, {"a72": ("gfx942", "7.2.*", "3.12.*"), "a714": ("gfx942", "7.14.*", "3.12.*")},
                         pytorch=">=2.12")
    plan = make_plan(load_workspace(manifest))
    by_rocm: dict[str, list[tuple[str, str, str]]] = {}
    for variant in plan.variants:
        if variant.stage in ("pytorch", "triton"):
            rocm = dict(variant.variant)["rocm_version"]
            by_rocm.setdefault(rocm, []).extend((variant.stage, s.kind, s.pin) for s in plan_sources(plan, [variant]))
    torch72 = [s for s in by_rocm["7.2"] if s[0] == "pytorch" and s[1] == "url"]
    assert torch72 and all(re.fullmatch(r"[0-9a-f]{64}", pin) for _, _, pin in torch72)
    assert ("pytorch", "git", "5c4886908584029761b579af026dcfb627c84070") in by_rocm["7.14"]
    assert not [s for s in by_rocm["7.14"] if s[0] == "pytorch" and s[1] == "url" and "pytorch-v" in s[2]]
    assert ("triton", "git", "675c59878aa2280b31f722aaf42b825fcee21de8") in by_rocm["7.14"]
    assert [s for s in by_rocm["7.14"] if s[0] == "triton"] == [
        ("triton", "git", "675c59878aa2280b31f722aaf42b825fcee21de8")]  # no LLVM archive
    # Until its LLVM pin is verified, 7.14's Triton is skipped, and so is the PyTorch that needs it; the plan says why.
    skipped = {v.stage: v.skip_reason for v in plan.variants if dict(v.variant).get("rocm_version") == "7.14"}
    assert "has no verified LLVM pin" in (skipped["triton"] or "")
    assert (skipped["pytorch"] or "").startswith("needs triton, but triton-3.8.0-rocm714_py312_")
    assert not any(v.skip_reason for v in plan.variants if dict(v.variant).get("rocm_version") == "7.2")


@pytest.mark.parametrize(("change", "says"), [
    ({"paths": ["../../../victim"]}, "leaves the cache"),
    ({"paths": ["/etc"]}, "leaves the cache"),
    ({"paths": ["a//b"]}, "leaves the cache"),
    ({"key": "../../k"}, "is no cache key"),
    ({"url": ["x"]}, "url is not a string"),
    ({"paths": "x"}, "paths is not a list of strings"),
    ({"kind": "svn"}, "kind is not 'url' or 'git'"),
    ({"rev": "abc\x1b[2J"}, "rev is not a string of printable characters"),
])
def test_a_source_manifest_from_another_host_is_checked_before_any_path_is_joined(
        tmp_path: Path, change: dict[str, object], says: str) -> None:
    """The manifest comes with a cache copied from another host: `paths: ["../../../V"]` made `build --sources`
    delete and replace a directory outside the build's output; a list where a string goes was a TypeError
    traceback. Each is refused as a damaged manifest, exit 2, before anything is read or written."""
    from rocmlock.build.sources import MANIFEST, read_manifest
    from rocmlock.errors import InputError

    entry = {"kind": "git", "url": "https://github.com/x/y.git", "rev": "0" * 40, "file_name": None, "key": "k1",
             "paths": ["k1_git"], "commit": None, **change}
    (tmp_path / MANIFEST).write_text(json.dumps({"version": 1, "sources": [entry]}))
    with pytest.raises(InputError) as caught:
        read_manifest(tmp_path)
    assert says in str(caught.value) and "\x1b" not in str(caught.value), str(caught.value)
