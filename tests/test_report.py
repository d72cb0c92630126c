"""`rocmlock report`: many nodes' probe reports merged into one table; identical failures grouped, slow GPUs flagged,
hostile and truncated reports one line each while the rest is still merged."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rocmlock.cli.main import main

REPO = Path(__file__).resolve().parents[1]
ROCMINFO_FIX = "install the environment built for gfx90a (its amdgpu-target), not gfx942"


def probe_report(hostname: str | None, gpus: list[str] | None = None, failed: tuple[str, ...] = (),
                 gemm: float | None = None, step_s: float | None = None, steps: int = 30) -> dict[str, Any]:
    """A report shaped as tools/verify_env.py writes it (its build_report and run_check)."""
    gpus = gpus if gpus is not None else ["gfx942"] * 8
    checks: list[dict[str, Any]] = [
        {"id": "host.driver", "status": "ok", "evidence": "amdgpu loaded", "fix": "", "required": True,
         "seconds": 0.0, "data": {"gfx": gpus}},
        {"id": "tools.rocminfo", "status": "fail" if "tools.rocminfo" in failed else "ok",
         "evidence": f"rocminfo sees {gpus[0]}; this environment is for gfx942", "fix": ROCMINFO_FIX,
         "required": True, "seconds": 0.1, "data": {}},
        {"id": "torch.gpu", "status": "fail" if "torch.gpu" in failed else "ok",
         "evidence": "torch.cuda.is_available() is False with a ROCm build", "fix": "fix the host checks above",
         "required": True, "seconds": 0.1, "data": {}},
    ]
    if gemm is not None:
        checks.append({"id": "bench.gemm", "status": "ok", "evidence": "", "fix": "", "required": True,
                       "seconds": 2.0, "data": {"tflops": gemm}})
    if step_s is not None:
        checks.append({"id": "train.lora", "status": "ok", "evidence": "", "fix": "", "required": True,
                       "seconds": step_s * steps, "data": {"losses": [1.0] * steps, "seconds": step_s * steps}})
    report: dict[str, Any] = {
        "schema": 1, "probe": "rocm-env-check", "version": "0.1.0", "ok": not failed, "failed": list(failed),
        "rocm": "7.2.4", "python": "3.12.8", "prefix": "/envs/mi300x",
        "expected": {"arch": "gfx942", "arch_source": "--expect-arch", "rocm": "7.2", "rocm_source": "--expect-rocm"},
        "checks": checks}
    if hostname is not None:
        report["hostname"] = hostname
    return report


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """Six nodes: three fine, two with the wrong GPU (same failure), one whose GEMM and train step are slow."""
    d = tmp_path / "reports"
    for i in (1, 2, 3):
        write(d / f"r{i}.json", probe_report(f"gpu{i:02d}", gemm=600.0 + i, step_s=0.040))
    for i in (4, 5):
        write(d / f"r{i}.json", probe_report(f"gpu{i:02d}", ["gfx90a"] * 8, ("tools.rocminfo",), gemm=300.0,
                                              step_s=0.041))
    write(d / "r6.json", probe_report("gpu06", gemm=150.0, step_s=0.200))
    return d


def test_a_fleet_in_one_table_failures_grouped_outliers_flagged(
        fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(fleet), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    verdicts = {n["node"]: (n["verdict"], n["outliers"]) for n in report["nodes"]}
    assert verdicts == {"gpu01": ("pass", []), "gpu02": ("pass", []), "gpu03": ("pass", []),
                        "gpu04": ("fail", ["gemm"]), "gpu05": ("fail", ["gemm"]), "gpu06": ("slow", ["gemm", "step"])}
    assert report["medians"] == {"gemm_tflops": 450.5, "step_ms": 40.5}
    assert report["failure_groups"] == [{"failed": ["tools.rocminfo"], "nodes": ["gpu04", "gpu05"]}]
    assert report["counts"] == {"pass": 3, "fail": 2, "slow": 1, "unreadable": 0}
    gpu04 = next(n for n in report["nodes"] if n["node"] == "gpu04")
    assert (gpu04["gpus"], gpu04["rocm"], gpu04["expected_arch"]) == (["gfx90a"] * 8, "7.2.4", "gfx942")

    assert main(["report", str(fleet)]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split() == ["node", "gpus", "rocm", "verdict", "failed", "checks", "gemm", "TF/s", "train",
                                "ms/step"]
    assert lines[4].split()[:6] == ["gpu04", "gfx90a", "x8", "(env:", "gfx942)", "7.2.4"]
    assert "2 node(s) fail tools.rocminfo: gpu04, gpu05" in text
    assert "  tools.rocminfo: rocminfo sees gfx90a; this environment is for gfx942" in text
    assert f"    fix: {ROCMINFO_FIX}" in text
    assert "gpu06: GEMM 150 TF/s against the median 450.5; train step 200 ms against the median 40.5" in text
    assert text.rstrip().endswith("6 node(s): 3 pass, 2 fail, 1 slow")


def test_output_is_the_same_for_the_same_reports_in_any_order(fleet: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    main(["report", str(fleet), "--json"])
    first = capsys.readouterr().out
    files = sorted(fleet.iterdir(), reverse=True)
    main(["report", *map(str, files), "--json"])
    assert capsys.readouterr().out.replace(str(fleet), "") == first.replace(str(fleet), "")


def test_a_healthy_fleet_exits_0_and_the_ratio_is_the_callers(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("r4.json", "r5.json"):
        (fleet / name).unlink()
    assert main(["report", str(fleet)]) == 1  # gpu06 is slow against 0.8 x the median
    assert main(["report", str(fleet), "--min-gemm-ratio", "0.1"]) == 0
    assert "4 node(s): 4 pass, 0 fail, 0 slow" in capsys.readouterr().out


def test_a_report_without_hostname_is_named_by_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "node-17.json", probe_report(None))
    assert main(["report", str(tmp_path / "node-17.json"), "--json"]) == 0
    assert [n["node"] for n in json.loads(capsys.readouterr().out)["nodes"]] == ["node-17"]


def test_the_probes_own_report_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "verify_env.py"), "--json", "--only", "host",
                           "--only", "rocm"], capture_output=True, text=True, check=False, timeout=300)
    write(tmp_path / "probe.json", proc.stdout)
    assert main(["report", str(tmp_path), "--json"]) == 1  # no amdgpu driver here
    (node,) = json.loads(capsys.readouterr().out)["nodes"]
    assert node["node"] == socket.gethostname() and node["verdict"] == "fail"
    assert "host.driver" in node["failed"]


# ----------------------------------------------------------------------------- hostile and broken reports

HOSTILE: dict[str, Any] = {
    "truncated.json": json.dumps(probe_report("cut"), indent=2)[:700],
    "empty.json": "",
    "binary.json": "\udcff",  # written as bytes below
    "nan.json": json.dumps(probe_report("nan", gemm=1.0)).replace("1.0}", "NaN}"),
    "deep.json": "[" * 200_000 + "]" * 200_000,
    "array.json": "[1, 2, 3]",
    "other-tool.json": '{"probe": "nvidia-smi", "ok": true}',
    "future.json": dict(probe_report("future"), schema=99),
    "escape.json": probe_report("evil\x1b]0;pwned\x07\nnode"),
    "gfx-type.json": probe_report("gfxtype", gpus=["gfx942; rm -rf /"]),
    "tflops-type.json": probe_report("tflops", gemm=-5.0),
    "checks-type.json": dict(probe_report("checks"), checks={"id": "x"}),
    "status.json": dict(probe_report("status"), checks=[{"id": "host.driver", "status": "\x1b[31mok"}]),
}


def test_hostile_reports_are_one_line_each_and_the_rest_is_merged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "reports"
    write(d / "good.json", probe_report("good01", gemm=600.0))
    for name, data in HOSTILE.items():
        if name == "binary.json":
            (d / name).write_bytes(b'{"probe": "rocm-env-check\xff\xfe"}')
        else:
            write(d / name, data)
    with (d / "huge.json").open("wb") as fh:  # sparse: 9 MiB of nothing
        fh.truncate(9 * 1024 * 1024)
    os.mkfifo(d / "fifo.json")  # reading it would block forever
    (d / "zero.json").symlink_to("/dev/zero")
    (d / "dir.json").mkdir()
    (d / "evil\x1b[2Jname.json").write_text("{")

    assert main(["report", str(d), "--json"]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert [n["node"] for n in report["nodes"]] == ["good01"]
    reasons = {Path(u["source"]).name: u["reason"] for u in report["unreadable"]}
    assert len(reasons) == len(HOSTILE) + 5
    assert reasons["truncated.json"].startswith("truncated (the probe or its node stopped mid-write?)")
    assert reasons["empty.json"].startswith("empty: the probe wrote no report")
    assert reasons["binary.json"] == "not UTF-8 text (byte 25)"
    assert reasons["nan.json"] == "not JSON: NaN is no JSON number"
    assert reasons["deep.json"] == "not a probe report: JSON nested too deeply"
    assert reasons["array.json"].startswith("not a probe report") and reasons["other-tool.json"].startswith("not a")
    assert reasons["future.json"] == "schema 99: this rocmlock reads schema 1 to 1 (upgrade rocmlock)"
    assert reasons["escape.json"] == "key 'hostname' must be a host name (letters, digits, . _ -)"
    assert reasons["gfx-type.json"] == "key 'host.driver.data.gfx' must be a list of gfx targets"
    assert reasons["tflops-type.json"] == "key 'bench.gemm.data.tflops' must be a non-negative number"
    assert reasons["checks-type.json"] == "key 'checks' must be a list of checks, got dict"
    assert reasons["status.json"] == "key 'checks[0].status' must be one of ok, warn, fail, skipped"
    assert reasons["huge.json"].endswith("larger than any probe report (8 MiB)")
    assert reasons["fifo.json"] == reasons["zero.json"] == reasons["dir.json"] == "not a regular file"
    assert reasons["evil\\x1b[2Jname.json"].startswith("truncated")  # escaped: no ESC reaches the terminal
    # One line per unreadable report on stderr; no escape character reaches the terminal, no traceback.
    assert len(err.splitlines()) == len(reasons) and "Traceback" not in err
    assert "\x1b" not in out + err

    assert main(["report", str(d)]) == 1
    text = capsys.readouterr().out
    assert f"{len(reasons)} report(s) not merged:" in text and "\x1b" not in text
    assert text.rstrip().endswith(f"1 node(s): 1 pass, 0 fail, 0 slow; {len(reasons)} unreadable report(s)")


@pytest.mark.parametrize(("argv", "message"), [
    (["report", "/nonexistent/reports"], "error: /nonexistent/reports: no such file or directory"),
    (["report", "EMPTY"], "error: no reports (*.json) in EMPTY"),
    (["report", "EMPTY", "--min-gemm-ratio", "0"], "error: --min-gemm-ratio 0.0: must be above 0 and at most 1"),
])
def test_bad_input_exits_2(argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path) if a == "EMPTY" else a for a in argv]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[0] == message.replace("EMPTY", str(tmp_path))


def test_numbers_too_long_or_too_large_cost_only_their_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 item 13: 5000 digits is past Python's int() limit (4300, a ValueError json.loads lets through);
    10**400 fits that limit but no float (an OverflowError in the checks). Each is one line; the rest merges."""
    d = tmp_path / "reports"
    write(d / "good.json", probe_report("good01", gemm=600.0))
    write(d / "digits.json", json.dumps(probe_report("digits01")).replace('"schema": 1', '"schema": ' + "9" * 5000))
    write(d / "overflow.json", json.dumps(probe_report("overflow01", gemm=1.0)).replace(
        '"tflops": 1.0', '"tflops": 1' + "0" * 400))
    write(d / "schema.json", json.dumps(probe_report("schema01")).replace('"schema": 1', '"schema": 1' + "0" * 400))
    # Finite, but past what a probe measures: x 1000 (a step's ms) or a median of two would be Infinity, which
    # `report --json` would print (no JSON reader takes it).
    write(d / "huge.json", json.dumps(probe_report("huge01", gemm=1.7e308)))
    assert main(["report", str(d), "--json"]) == 1  # a report not merged fails the fleet
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert [n["node"] for n in report["nodes"]] == ["good01"]
    reasons = {Path(u["source"]).name: u["reason"] for u in report["unreadable"]}
    assert reasons == {"digits.json": "not a probe report: a number of thousands of digits",
                       "overflow.json": "key 'bench.gemm.data.tflops' must be a non-negative number",
                       "schema.json": "schema of many digits: this rocmlock reads schema 1 to 1 (upgrade rocmlock)",
                       "huge.json": "key 'bench.gemm.data.tflops' is 1.7e+308, beyond any measurement (at most 1e+15)"}
    assert len(err.splitlines()) == 4 and "Traceback" not in err
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in report --json"))


@pytest.mark.parametrize(("field", "edit"), [
    ("hostname", lambda r: r.update(hostname="gpu09\n")),
    ("gfx", lambda r: r["checks"][0]["data"].update(gfx=["gfx942\n"])),
    ("rocm", lambda r: r.update(rocm="7.2.4\n")),
    ("check id", lambda r: r.update(failed=["tools.rocminfo\n"])),
])
def test_a_trailing_newline_is_no_valid_name(field: str, edit: Any, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 item 14: `re.match` with `$` accepted "gpu09\\n" (`$` matches before a final newline), which split
    the table's row; the patterns now match whole strings."""
    d = tmp_path / "reports"
    write(d / "good.json", probe_report("good01"))
    bad = probe_report("gpu09")
    edit(bad)
    write(d / "bad.json", bad)
    main(["report", str(d)])
    out = capsys.readouterr().out
    assert "1 unreadable report(s)" in out, field
    assert all(not line.startswith(("7.2", "gfx942", "tools.rocminfo")) for line in out.splitlines()), out
    # The expected arch is not a table column: one with a newline is dropped, the node still read.
    expected = probe_report("gpu10")
    expected["expected"]["arch"] = "gfx942\n"
    write(d / "bad.json", expected)
    assert main(["report", str(d), "--json"]) == 0
    node = next(n for n in json.loads(capsys.readouterr().out)["nodes"] if n["node"] == "gpu10")
    assert node.get("expected_arch") is None, node


def test_reports_of_one_hostname_are_told_apart_and_a_long_fix_is_cut_between_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 35: three VMs named "vm" were three identical rows; the fix line was cut inside a word at 200 chars.
    long_fix = " ".join(["reinstall the environment built for gfx90a"] * 30)
    for name, gpu in (("a", "gfx942"), ("b", "gfx942"), ("c", "gfx90a")):
        report = probe_report("vm", [gpu] * 8, ("tools.rocminfo",) if gpu == "gfx90a" else ())
        report["checks"][1]["fix"] = long_fix
        write(tmp_path / f"vm-{name}.json", report)
    write(tmp_path / "other.json", probe_report("gpu01"))
    assert main(["report", *(str(p) for p in sorted(tmp_path.glob("*.json")))]) == 1
    out = capsys.readouterr().out
    rows = [line.split()[0:3] for line in out.splitlines() if line.startswith(("vm", "gpu01"))]
    assert rows == [["gpu01", "gfx942", "x8"], ["vm", "(gfx942,", "vm-a.json)"], ["vm", "(gfx942,", "vm-b.json)"],
                    ["vm", "(gfx942,", "vm-c.json)"]], out
    assert "1 node(s) fail tools.rocminfo: vm (gfx942, vm-c.json)" in out
    (fix,) = [line.strip() for line in out.splitlines() if line.strip().startswith("fix:")]
    shown = fix.removeprefix("fix: ").removesuffix("...")
    assert fix.endswith("...") and 300 < len(shown) <= 600
    assert long_fix.startswith(shown) and long_fix[len(shown)] == " "  # cut where a word ends


def _rows(out: str, *names: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(names)]


def test_two_runs_reports_of_one_host_are_labelled_by_their_paths(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # issue 41: `verify --slurm` writes task-0.json per run; two runs' reports of gpu01 were both
    # `gpu01 (gfx942, task-0.json)`
    for run in ("run1", "run2"):
        write(tmp_path / run / "task-0.json", probe_report("gpu01", gemm=600.0, step_s=0.04))
    assert main(["report", str(tmp_path / "run1"), str(tmp_path / "run2")]) == 0
    rows = [line.split("  ")[0] for line in _rows(capsys.readouterr().out, "gpu01")]
    assert rows == ["gpu01 (gfx942, run1/task-0.json)", "gpu01 (gfx942, run2/task-0.json)"]
    # Under a directory whose path is longer than 200 characters: the paths were cut at 200 before they were told
    # apart, and both rows (and both --json sources) read alike.
    deep = tmp_path / ("A" * 240)
    for run in ("run1", "run2"):
        write(deep / run / "task-0.json", probe_report("gpu02", gemm=600.0, step_s=0.04))
    assert main(["report", str(deep / "run1"), str(deep / "run2"), "--json"]) == 0
    sources = [n["source"] for n in json.loads(capsys.readouterr().out)["nodes"]]
    assert sources == [str(deep / "run1/task-0.json"), str(deep / "run2/task-0.json")]
    assert main(["report", str(deep / "run1"), str(deep / "run2")]) == 0
    rows = [line.split("  ")[0] for line in _rows(capsys.readouterr().out, "gpu02")]
    assert rows == ["gpu02 (gfx942, run1/task-0.json)", "gpu02 (gfx942, run2/task-0.json)"]


def test_reports_of_one_host_for_different_targets_each_name_their_file(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # the host repeats, the environment's target does not: still a row per file, each naming it
    for name, arch in (("a", "gfx942"), ("b", "gfx90a")):
        report = probe_report("vm", [arch] * 8)
        report["expected"]["arch"] = arch
        write(tmp_path / name / "vm.json", report)
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    rows = [line.split("  ")[0] for line in _rows(capsys.readouterr().out, "vm")]
    assert rows == ["vm (gfx942, a/vm.json)", "vm (gfx90a, b/vm.json)"]


def test_a_report_given_again_counts_once_and_a_slow_node_stays_flagged(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # issue 41: the slow node's report given three times made three rows and moved the median to its figures
    d = tmp_path / "reports"
    for i in (1, 2):
        write(d / f"gpu0{i}.json", probe_report(f"gpu0{i}", gemm=600.0, step_s=0.04))
    slow = write(d / "gpu03.json", probe_report("gpu03", gemm=150.0, step_s=0.2))
    (tmp_path / "link.json").symlink_to(slow)
    again = [str(slow), str(d / ".." / "reports" / "gpu03.json"), str(tmp_path / "link.json")]
    assert main(["report", *again, str(d), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(n["node"], n["verdict"]) for n in report["nodes"]] == [("gpu01", "pass"), ("gpu02", "pass"),
                                                                     ("gpu03", "slow")]
    assert report["medians"] == {"gemm_tflops": 600.0, "step_ms": 40.0}
    assert next(n for n in report["nodes"] if n["node"] == "gpu03")["source"] == str(slow)  # where first reached
