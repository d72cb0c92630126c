"""The whole rocmlock pipeline on the offline example, end to end, with real processes.

build (rocmlock build) -> publish to a directory channel (rocmlock publish) -> serve that directory on
127.0.0.1 behind basic auth (rocmlock.channel.serve, a separate process) -> lock a copy of the example workspace
against the served channel (rocmlock lock, credentials from a RATTLER_AUTH_FILE in the work directory)
-> export (rocmlock export --check) -> install an environment from the lock (rocmlock install) -> an OCI image of it (rocmlock image)
-> run the installed probe (rocm-env-check) inside it.

On a host without an AMD GPU the probe exits non-zero (no /dev/kfd, no amdgpu driver): that is the
expected outcome and is reported as such; the pipeline fails only if a step fails or the probe did not run.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

# rattler_build and rocmlock are imported where the pipeline needs them: the --workdir check runs first, on the
# interpreter alone, so that it refuses a bad directory even where the venv is not readable (another uid's check).

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CHANNEL_NAME = "rocmlock-example"
PLACEHOLDER = "http://127.0.0.1:8000/rocmlock-example"
ENVIRONMENT = "mi300x"
SHIM = "#!/bin/sh\n# Host python shim of the rocmlock offline example: no conda python is reachable offline.\n" \
       "exec python3 \"$@\"\n"


def step(title: str) -> None:
    print(f"\n==> {title}", file=sys.stderr, flush=True)


def rocmlock(*args: str, env: dict[str, str], capture: bool = False) -> str:
    cmd = [sys.executable, "-m", "rocmlock", *args]
    print(f"> rocmlock {shlex.join(args)}", file=sys.stderr, flush=True)
    # The commands' own output goes to stderr, so that --json leaves stdout to the summary.
    proc = subprocess.run(cmd, env=env, check=False, text=True, stdout=subprocess.PIPE if capture else sys.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"quickstart: `rocmlock {shlex.join(args)}` failed with exit code {proc.returncode}")
    return proc.stdout or ""


def python_shim(output: Path) -> Path:
    """``python`` for the example channel: a noarch package whose bin/python execs the host's python3."""
    files = output.parent / "python-shim-files"
    (files / "bin").mkdir(parents=True, exist_ok=True)
    (files / "bin" / "python").write_text(SHIM)
    (files / "bin" / "python").chmod(0o755)
    import rattler_build as rb

    version = ".".join(str(v) for v in sys.version_info[:3])
    out = rb.assemble_package(name="python", version=version, target_platform="noarch", build_string="host_shim",
                              output_dir=str(output / "noarch"), files_dir=str(files), noarch="generic",
                              license="MIT", summary="Host python shim (rocmlock offline example): runs python3")
    return Path(str(out.path)) if hasattr(out, "path") else output / "noarch"


def run_probe(prefix: Path, env: dict[str, str]) -> dict[str, object]:
    probe = prefix / "bin" / "rocm-env-check"
    if not probe.is_file():
        raise SystemExit(f"quickstart: the probe was not installed ({probe} missing)")
    print(f"> {probe} --json", file=sys.stderr, flush=True)
    proc = subprocess.run([str(probe), "--json"], env=env, check=False, text=True, stdout=subprocess.PIPE)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit(f"quickstart: the probe did not run (exit {proc.returncode}, no JSON report)") from None
    report["exit_code"] = proc.returncode
    return report


def judge_probe(report: dict[str, object], prefix: Path) -> str:
    """Say what the probe's result means here; raise when it did not probe this environment."""
    if Path(str(report.get("prefix"))).resolve() != prefix.resolve():
        raise SystemExit(f"quickstart: the probe checked {report.get('prefix')}, not {prefix}")
    expected = report.get("expected") or {}
    failed = report.get("failed") or []
    if report["exit_code"] == 0:
        return "probe passed: this host has a working AMD GPU stack"
    if not Path("/dev/kfd").exists():
        return (f"probe exited {report['exit_code']} as expected on a host without an AMD GPU "
                f"(failed: {', '.join(map(str, failed))}; expected target {expected.get('arch')} read from the "
                "installed amdgpu-target)")
    return f"probe exited {report['exit_code']} on a GPU host: see the report (failed: {', '.join(map(str, failed))})"


SERVE_SCRIPT = """#!/bin/sh
# Serve the quickstart's channel again, on the port that workspace/pixi.toml and its lock name ({url}).
# The password stays in auth/credentials.json; use it with RATTLER_AUTH_FILE="$HERE/auth/credentials.json".
HERE=$(cd "$(dirname "$0")" && pwd)
ROCMLOCK_SERVE_PASSWORD=$("{python}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["127.0.0.1"]["BasicHTTP"]["password"])' "$HERE/auth/credentials.json")
export ROCMLOCK_SERVE_PASSWORD
# The server writes its pid once it listens (a second start, on a port taken, leaves the first one's):
# `quickstart --replace` stops it before it deletes this directory.
PYTHONPATH="{tools}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{python}" -m rocmlock.channel.serve "$HERE/channel" --channel {channel} \\
    --user quickstart --password-env ROCMLOCK_SERVE_PASSWORD --port {port} --pid-file "$HERE/serve-channel.pid"
"""


def link_recipes(workspace: Path) -> Path:
    """``workspace/recipes``: a link to this checkout's recipes/, where `rocmlock plan` and `build` look by default,
    so the kept workspace's commands (docs/try-it.md) need no --recipes-dir naming the checkout."""
    link = workspace / "recipes"
    link.symlink_to(REPO / "recipes", target_is_directory=True)
    return link


def write_serve_script(work: Path, url: str) -> Path:
    """``work/serve-channel.sh``: a kept work directory names a port that dies with the quickstart; this revives it."""
    port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    script = work / "serve-channel.sh"
    script.write_text(SERVE_SCRIPT.format(url=url, python=sys.executable, tools=REPO / "tools",
                                          channel=CHANNEL_NAME, port=port))
    script.chmod(0o755)
    return script


def pipeline(work: Path) -> dict[str, object]:
    from rocmlock.channel.serve import serving

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONDA_", "PIXI_", "RATTLER_"))}
    started = time.monotonic()
    output, channel = work / "output", work / "channel"

    step("1/8 build the example's packages (rocm-version, amdgpu-target, rocm-env-check) into a local channel")
    rocmlock("build", "--manifest-path", str(HERE / "pixi.toml"), "--recipes-dir", str(REPO / "recipes"),
             "--output", str(output), env=env)
    python_shim(output)

    step("2/8 publish to a directory channel")
    rocmlock("publish", "--from", str(output), "--to", str(channel), env=env)

    step("3/8 serve the channel on 127.0.0.1 behind basic auth")
    password = secrets.token_urlsafe(16)
    auth = work / "auth" / "credentials.json"
    auth.parent.mkdir(mode=0o700)
    write_private(auth, json.dumps({"127.0.0.1": {"BasicHTTP": {"username": "quickstart", "password": password}}}))
    # The same password for conda, which reads a netrc (requests' get_netrc_auth: $NETRC, else ~/.netrc) and not
    # rattler's auth file: conda 26.7.1 conda/gateways/connection/session.py, CondaHttpAuth._apply_basic_auth.
    netrc = work / "auth" / "netrc"
    write_private(netrc, f"machine 127.0.0.1 login quickstart password {password}\n")
    with serving(channel, CHANNEL_NAME, "quickstart", password) as url:
        print(f"serving {url} (credentials in {auth})", file=sys.stderr)
        env = {**env, "RATTLER_AUTH_FILE": str(auth)}
        workspace = work / "workspace"
        workspace.mkdir(exist_ok=True)
        manifest = workspace / "pixi.toml"
        manifest.write_text((HERE / "pixi.toml").read_text().replace(PLACEHOLDER, url))
        link_recipes(workspace)

        step("4/8 lock the example workspace against the served channel")
        rocmlock("lock", "--manifest-path", str(manifest), env=env)
        step("5/8 export: the conda exports match the lock")
        rocmlock("export", "--manifest-path", str(manifest), "--check", env=env)
        step(f"6/8 install environment '{ENVIRONMENT}' from the lock with rattler")
        prefix = work / "envs" / ENVIRONMENT
        rocmlock("install", "--manifest-path", str(manifest), "-e", ENVIRONMENT, "--prefix", str(prefix), env=env)
        # --no-base: offline there is no base image to pull; this layer cannot run on its own (the command says how
        # to use it), `rocmlock image --base REF` makes one that runs (docs/containers.md).
        step(f"7/8 an OCI layer of environment '{ENVIRONMENT}' (the environment alone at /opt/env, --no-base)")
        image = work / "image"
        rocmlock("image", "--manifest-path", str(manifest), "-e", ENVIRONMENT, "--no-base", "-o", str(image), env=env)

    serve_again = write_serve_script(work, url)

    step("8/8 run the probe inside the installed environment")
    report = run_probe(prefix, env)
    verdict = judge_probe(report, prefix)
    print(verdict, file=sys.stderr)
    return {"work": str(work), "lock": str(workspace / "pixi.lock"), "prefix": str(prefix), "image": str(image),
            "channel_url": url, "serve_again": str(serve_again),
            "probe_exit_code": report["exit_code"], "probe_failed": report.get("failed"), "verdict": verdict,
            "seconds": round(time.monotonic() - started, 1)}


KEPT_ONLY = ("work", "lock", "prefix", "image", "serve_again")


def kept_summary(summary: dict[str, Any], kept: bool) -> dict[str, Any]:
    """The summary as printed: ``kept`` says whether its paths exist after the run; without --workdir they were in
    a temporary directory that is gone, and are null rather than paths that name nothing."""
    return {**summary, "kept": kept, **({} if kept else dict.fromkeys(KEPT_ONLY))}


MARKER = ".rocmlock-quickstart"
SERVER_PID = "serve-channel.pid"


def stop_earlier_server(work: Path) -> None:
    """Stop the channel server an earlier run's serve-channel.sh started from ``work`` (its pid file), if it still
    runs: deleting the directory would leave it serving nothing on its port. Only a process whose command line is
    that script's server of ``work``'s channel is signalled (a pid can be reused by another process)."""
    try:
        text = (work / SERVER_PID).read_text().strip()
    except OSError:
        return
    if not text.isdigit():
        return
    pid = int(text)

    def ours() -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return b"rocmlock.channel.serve" in argv and os.fsencode(work.resolve() / "channel") in argv

    if not ours():
        return
    try:
        os.kill(pid, 15)
    except OSError:
        return
    for _ in range(50):
        if not ours():
            break
        time.sleep(0.1)
    print(f"quickstart: stopped the earlier run's channel server (pid {pid}, started by serve-channel.sh)",
          file=sys.stderr)


def refuse(message: str) -> NoReturn:
    """Bad input: one line, exit 2, nothing written."""
    print(f"quickstart: {message}", file=sys.stderr)
    raise SystemExit(2)


def write_private(path: Path, text: str) -> None:
    """A new file only the caller can read; never through a link, never over a file already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def check_workdir_owner(work: Path) -> None:
    """Refuse a work directory someone else could change while the quickstart writes its password into it and
    runs the probe it installs there (as root, often).

    The rule of OpenSSH's StrictModes (auth.c, auth_secure_path) and git's safe.directory (setup.c,
    ensure_valid_ownership): the directory must be the caller's and writable by nobody else; so must every
    directory above it, owned by the caller or root, except that a sticky one (/tmp) may be writable by all, since
    there nobody else can rename or remove what the caller owns. The directory itself is taken as given, never
    through a symbolic link (whoever owns the link can point it elsewhere between the check and the use)."""
    uid = os.geteuid()
    try:
        st = work.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        refuse(f"--workdir {work} cannot be looked at ({exc.strerror}); give a directory of your own")
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            refuse(f"--workdir {work} is a symbolic link; give the directory itself")
        if not stat.S_ISDIR(st.st_mode):
            refuse(f"--workdir {work} is not a directory")
        if st.st_uid != uid:
            refuse(f"--workdir {work} belongs to uid {st.st_uid}, not to you (uid {uid}): its owner could read the "
                   "channel password and replace what the quickstart runs; give a directory of your own")
        if _writable_by_others(st):
            refuse(f"--workdir {work} is writable by others (mode {stat.S_IMODE(st.st_mode):04o}): they could read "
                   "the channel password and replace what the quickstart runs; give a new directory, or chmod 700 it")
    given = work.absolute().parent
    real = Path(os.path.realpath(given))
    for above in (given, *given.parents, real, *real.parents):
        _check_above(work, above)


def _check_above(work: Path, above: Path) -> None:
    """A directory above the work directory (or a link on the way to it): the caller's or root's, and writable
    by nobody else unless sticky."""
    try:
        up = above.lstat()
    except FileNotFoundError:
        return  # made below by mkdir(parents=True), as the caller
    except OSError as exc:
        refuse(f"--workdir {work}: {above} above it cannot be looked at ({exc.strerror})")
    uid = os.geteuid()
    swappable = _writable_by_others(up) and not up.st_mode & stat.S_ISVTX and not stat.S_ISLNK(up.st_mode)
    if up.st_uid not in (uid, 0) or swappable:
        refuse(f"--workdir {work}: {above} above it could be changed by another user (uid {up.st_uid}, mode "
               f"{stat.S_IMODE(up.st_mode):04o}), who could swap the work directory; give one under a directory "
               "only you or root can write, or under /tmp")


def _is_marker(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def prepare_workdir(work: Path, replace: bool) -> None:
    """Make ``work`` ready: a new or empty directory of the caller's; a kept one of an earlier run only with
    ``replace``.

    A kept work directory is one the user works in (edits pixi.toml, locks, installs): it is never overwritten
    silently, and a directory the quickstart did not make is never deleted, even with ``--replace``. A new one is
    made 0700; one that another user owns or can write is refused (check_workdir_owner)."""
    check_workdir_owner(work)
    if work.is_dir() and any(work.iterdir()):
        if not _is_marker(work / MARKER):
            refuse(f"--workdir {work} is not empty and was not made by the quickstart; give a new or empty directory")
        if not replace:
            refuse(f"--workdir {work} holds an earlier run (its workspace, lock and environments would be "
                   "overwritten); pass --replace to start it afresh, or give another --workdir")
        stop_earlier_server(work)
        shutil.rmtree(work)
    if not work.is_dir():
        work.parent.mkdir(parents=True, exist_ok=True)
        work.mkdir(mode=0o700)
    write_private(work / MARKER, "made by examples/offline/quickstart.py; --replace deletes this directory\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep everything here (default: a temporary directory); "
                        "a new or empty directory of yours alone, or one of an earlier run with --replace")
    parser.add_argument("--replace", action="store_true",
                        help="delete the --workdir of an earlier quickstart run and start afresh")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    args = parser.parse_args(argv)
    if args.replace and args.workdir is None:
        parser.error("--replace needs --workdir")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="rocmlock-quickstart-"))
    prepare_workdir(work, args.replace)
    try:
        summary = pipeline(work.resolve())
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    summary = kept_summary(summary, args.workdir is not None)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    if args.workdir is not None:
        print(f"kept in {work}: its workspace names {summary['channel_url']}, served only while the quickstart "
              f"ran; to use it again, serve the channel on that port with: sh {summary['serve_again']}",
              file=sys.stderr)
    else:
        print(f"quickstart: removed {work} (the paths above are gone); --workdir DIR keeps the channel, lock, "
              "environment and image", file=sys.stderr)
    print(f"quickstart: ok in {summary['seconds']}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    code = main()
    # Skip interpreter finalization: py-rattler's background threads can crash it (see rocmlock.cli.main.run).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
