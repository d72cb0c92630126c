"""A real one-node Slurm cluster on 127.0.0.1 for the tests: Debian's ``munge`` and ``slurm-wlm`` (``.ci/run`` installs
them), started from a private directory and stopped by PID.

munged runs with a generated key on its own socket; slurm.conf names one node (this machine's CPUs and most of its
memory) with ``ProctrackType=proctrack/linuxproc`` and ``TaskPlugin=task/none`` (no cgroups in a container),
``SlurmUser=root``, free ports, and no accounting. ``SLURM_CONF`` points the client commands (srun, sbatch, squeue,
sinfo) at it. Nothing is installed or changed outside the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

NODE = "fleet1"
PARTITION = "gpu"
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "sinfo", "scancel")


class ClusterError(Exception):
    """The cluster could not start; the message says which daemon and its last log lines."""


@dataclass
class Cluster:
    root: Path
    conf: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """This environment pointed at the test cluster, without the variables of any job it may run inside."""
        return {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=False, timeout=60)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 2048


def slurm_conf(root: Path, host: str, cpus: int, memory_mb: int, ports: list[int]) -> str:
    """slurm.conf of the one-node cluster under ``root``."""
    return "\n".join([
        "ClusterName=rocmlocktest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/munge.sock",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def missing_tools() -> list[str]:
    return [t for t in DAEMONS if shutil.which(t) is None]


def _tail(path: Path, n: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _wait(cluster: Cluster, what: str, ready: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc, name in zip(cluster.procs, cluster.names):
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited {proc.returncode}: {_tail(cluster.root / 'log' / f'{name}.out')}")
        if ready():
            return
        time.sleep(0.3)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s: " + _tail(cluster.root / "log" / "slurmctld.log")
                       + " || " + _tail(cluster.root / "log" / "slurmd.log"))


def _node_idle(cluster: Cluster) -> bool:
    return "idle" in cluster.run("sinfo", "--noheader", f"--nodes={NODE}", "--format=%T").stdout


def _start_daemon(cluster: Cluster, name: str, argv: list[str]) -> None:
    with (cluster.root / "log" / f"{name}.out").open("wb") as fh:
        cluster.procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
    cluster.names.append(name)


def _stop(cluster: Cluster) -> None:
    """Cancel every job (their processes outlive slurmd otherwise), then stop the daemons by PID, newest first."""
    if len(cluster.procs) == len(("munged", "slurmctld", "slurmd")):
        cluster.run("scancel", f"--user={os.getuid()}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cluster.run("squeue", "--noheader").stdout.strip():
            time.sleep(0.3)
    for proc in reversed(cluster.procs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def slurm_cluster() -> Iterator[Cluster]:
    """Start munged, slurmctld and slurmd; yield when the node is idle; stop them (jobs cancelled first)."""
    # A short path: munge's socket path must fit sockaddr_un (108 bytes).
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))
    root.chmod(0o700)
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir(mode=0o700)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, socket.gethostname(), os.cpu_count() or 1, max(_memory_mb() - 512, 1024),
                               _free_ports(2)))
    cluster = Cluster(root, conf)
    munge = root / "munge"
    try:
        subprocess.run(["mungekey", "--create", f"--keyfile={munge}/munge.key"], check=True, capture_output=True)
        _start_daemon(cluster, "munged", ["munged", "--foreground", "--force", f"--key-file={munge}/munge.key",
                                          f"--socket={munge}/munge.sock", f"--pid-file={munge}/munged.pid",
                                          f"--seed-file={munge}/seed", f"--log-file={root}/log/munged.log"])
        _wait(cluster, "munged", (munge / "munge.sock").exists)
        _start_daemon(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        _start_daemon(cluster, "slurmd", ["slurmd", "-D", "-f", str(conf), "-N", NODE])
        _wait(cluster, f"node {NODE}", lambda: _node_idle(cluster))
        yield cluster
    finally:
        _stop(cluster)
        shutil.rmtree(root, ignore_errors=True)
