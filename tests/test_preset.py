"""`rocmlock preset`: every shipped environment x method gives a YAML that LLaMA-Factory's own argument
parser accepts (the real package from PyPI, on the CPU), or a refusal with the reason; the choices follow
the GPU table and the environment's packages; output is deterministic and written atomically."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rocmlock.cli.main import main
from rocmlock.errors import InputError
from rocmlock.gpu.targets import all_targets
from rocmlock.train.preset import CUTOFFS, EFFECTIVE_BATCH, PresetRequest, capabilities, make_preset, sizing
from rocmlock.workspace.manifest import load_workspace
from shipped import manifest_with_gfx908

ROOT = Path(__file__).resolve().parents[1]
WORKSPACE = load_workspace(ROOT / "pixi.toml")
GPU_ENVS = [e.name for e in WORKSPACE.environments() if e.gpu_target is not None]
METHODS = ("lora", "qlora", "full")


@pytest.fixture(scope="module")
def llamafactory_parser() -> Any:
    """LLaMA-Factory's argument parsing and checks, minus the launch/hardware ones.

    ``get_train_args`` also requires a distributed launch (``parallel_mode``) and, for DeepSpeed,
    torchrun: conditions of the run, not of the YAML. So the test calls what it calls first:
    ``_parse_train_args`` (HfArgumentParser over Model/Data/Training/Finetuning/Generating arguments,
    unknown keys rejected, every dataclass ``__post_init__`` run, the DeepSpeed JSON loaded by
    transformers), then ``_verify_model_args`` and ``_check_extra_dependencies``.
    """
    from llamafactory.hparams import parser

    return parser


@pytest.fixture
def bf16_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The presets are for GPUs with bf16 (the GPU table says so); this CPU host has none.

    transformers' TrainingArguments refuses ``bf16: true`` unless ``is_torch_bf16_gpu_available()``:
    that one hardware query answers for the target GPU. The environment variables that
    TrainingArguments/DeepSpeed set while parsing are restored afterwards.
    """
    from transformers import training_args
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    monkeypatch.setattr(training_args, "is_torch_bf16_gpu_available", lambda: True)
    saved = dict(os.environ)
    yield
    unset_hf_deepspeed_config()
    os.environ.clear()
    os.environ.update(saved)


def write(env: str, method: str, out: Path, *extra: str) -> int:
    return main(["preset", "--manifest-path", str(ROOT / "pixi.toml"), "-e", env, "--method", method,
                 "-o", str(out), *extra])


@pytest.mark.parametrize("env", GPU_ENVS)
def test_every_shipped_environment_and_method_is_accepted_by_llamafactory(
        env: str, llamafactory_parser: Any, bf16_gpu: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from llamafactory.extras.constants import AttentionFunction, QuantizationMethod

    monkeypatch.chdir(tmp_path)  # LLaMA-Factory resolves the `deepspeed:` path from the CWD
    caps = capabilities(WORKSPACE.environment(env))
    accepted = 0
    for method in METHODS:
        code = write(env, method, Path(f"presets/{env}-{method}.yaml"))
        err = capsys.readouterr().err
        if method == "qlora" and not caps.bitsandbytes:
            assert code == 2 and "has no bitsandbytes" in err and "qlora feature" in err
            assert not (tmp_path / "presets" / f"{env}-{method}.yaml").exists()
            continue
        assert code == 0, err
        settings = yaml.safe_load((tmp_path / "presets" / f"{env}-{method}.yaml").read_text())
        model, data, training, finetuning, _ = llamafactory_parser._parse_train_args(settings)
        llamafactory_parser._verify_model_args(model, data, finetuning)
        llamafactory_parser._check_extra_dependencies(model, finetuning, training)
        # parse_dict keeps unknown enum strings as they are: hold the values to LLaMA-Factory's enums.
        assert model.flash_attn in {a.value for a in AttentionFunction}
        assert training.bf16 is True and training.per_device_train_batch_size == settings["per_device_train_batch_size"]
        assert finetuning.finetuning_type == ("full" if method == "full" else "lora")
        if method == "qlora":
            assert model.quantization_bit == 4 and model.quantization_method == QuantizationMethod.BNB.value
        assert (training.deepspeed is not None) == caps.deepspeed
        if caps.deepspeed:
            config = json.loads(Path(training.deepspeed).read_text())
            assert config["zero_optimization"]["stage"] == (3 if method == "full" else 2)
        accepted += 1
    assert accepted == (3 if caps.bitsandbytes else 2)


def test_choices_follow_the_gpu_table_and_the_environment(tmp_path: Path) -> None:
    def settings(env: str, method: str) -> dict[str, Any]:
        preset = make_preset(WORKSPACE, PresetRequest(env, method, output=tmp_path / "p.yaml"), cwd=tmp_path)
        return dict(preset.settings)

    assert settings("mi300x", "lora")["flash_attn"] == "fa2"          # gfx942: CK kernels
    assert settings("mi250", "lora")["flash_attn"] == "fa2"           # gfx90a: CK kernels
    assert settings("w7900", "lora")["flash_attn"] == "sdpa"          # gfx1100: Triton backend only
    assert "deepspeed" not in settings("mi300x", "full")
    assert settings("mi300x-deepspeed", "full")["deepspeed"] == "p.ds_z3.json"
    assert settings("mi250-qlora", "qlora")["deepspeed"] == "p.ds_z2.json"
    qlora = settings("mi300x-qlora", "qlora")
    assert (qlora["quantization_bit"], qlora["quantization_method"]) == (4, "bnb")
    # More GPU memory never means fewer tokens per optimizer step.
    small, big = settings("w7900", "lora"), settings("mi300x", "lora")
    assert small["cutoff_len"] <= big["cutoff_len"]
    assert small["per_device_train_batch_size"] <= big["per_device_train_batch_size"]


def test_sizing_is_monotonic_in_memory_and_keeps_the_effective_batch() -> None:
    for method in METHODS:
        tokens = []
        for target in sorted(all_targets().values(), key=lambda t: t.memory_gib):
            size = sizing(target, method, zero3=False)
            assert size.cutoff_len in CUTOFFS
            assert size.per_device_train_batch_size * size.gradient_accumulation_steps == EFFECTIVE_BATCH
            tokens.append(size.per_device_train_batch_size * size.cutoff_len)
        assert tokens == sorted(tokens)
    gfx1100 = all_targets()["gfx1100"]
    assert not sizing(gfx1100, "full", zero3=False).fits and sizing(gfx1100, "qlora", zero3=False).fits


def test_output_is_deterministic_and_written_as_a_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert write("mi250-qlora", "qlora", Path("a/run.yaml")) == 0
    first = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    assert sorted(first) == ["run.ds_z2.json", "run.yaml"]
    assert write("mi250-qlora", "qlora", Path("a/run.yaml")) == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == first
    text = first["run.yaml"].decode()
    assert "deepspeed: a/run.ds_z2.json" in text and text.startswith("# LLaMA-Factory qlora preset")
    # A failure while writing leaves neither file changed (fsutil.write_set_atomic).
    from rocmlock.util import fs as fsutil

    real = fsutil.os.replace
    calls = []

    def flaky(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:  # the YAML went in; the JSON's move fails
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        real(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", flaky)
    capsys.readouterr()
    assert write("mi250-qlora", "full", Path("a/run.yaml")) == 1  # one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "No space left on device" in err and "Traceback" not in err
    monkeypatch.setattr(fsutil.os, "replace", real)
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == first  # no leftover either


def test_default_output_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pixi.toml"
    manifest.write_text((ROOT / "pixi.toml").read_text())
    args = ["preset", "--manifest-path", str(manifest), "-e", "mi300x-deepspeed", "--method", "lora", "--json",
            "--model", "/models/llama-3-8b", "--template", "llama3"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["yaml"] == str(tmp_path / "presets" / "mi300x-deepspeed-lora.yaml")
    assert out["command"].startswith("FORCE_TORCHRUN=1 llamafactory-cli train ")
    written = yaml.safe_load((tmp_path / "presets" / "mi300x-deepspeed-lora.yaml").read_text())
    assert (written["model_name_or_path"], written["template"]) == ("/models/llama-3-8b", "llama3")


def test_an_environment_named_after_its_method_is_not_named_twice(tmp_path: Path) -> None:
    # issue 26: `-e mi300x-qlora --method qlora` wrote presets/mi300x-qlora-qlora.yaml.
    manifest = tmp_path / "pixi.toml"
    manifest.write_text((ROOT / "pixi.toml").read_text())
    base = ["preset", "--manifest-path", str(manifest), "-e", "mi300x-qlora"]
    assert main([*base, "--method", "qlora"]) == 0
    assert main([*base, "--method", "lora"]) == 0
    assert sorted(p.name for p in (tmp_path / "presets").iterdir()) == ["mi300x-qlora-lora.yaml", "mi300x-qlora.yaml"]


@pytest.mark.parametrize(("args", "message"), [
    (["-e", "mi300x-deepspeed", "--method", "qlora"], "has no bitsandbytes"),
    (["-e", "default", "--method", "lora"], "has no GPU target"),
    (["-e", "nope", "--method", "lora"], "unknown environment 'nope'"),
    (["--method", "lora"], "the following arguments are required: -e/--environment"),
    (["-e", "mi300x", "--method", "lora", "-o", "preset.txt"], "must end in .yaml"),
])
def test_bad_requests_are_input_errors(args: list[str], message: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["preset", "--manifest-path", str(ROOT / "pixi.toml"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not any(tmp_path.rglob("*.yaml"))


def test_qlora_on_a_target_bitsandbytes_does_not_support(tmp_path: Path) -> None:
    (tmp_path / "pixi.toml").write_text(manifest_with_gfx908("mi100-qlora", ("rocm72", "gfx908", "train", "qlora")))
    with pytest.raises(InputError, match="does not support gfx908 with ROCm 7.2"):
        make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("mi100-qlora", "qlora"))
    lora = make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("mi100-qlora", "lora"))
    assert dict(lora.settings)["flash_attn"] == "sdpa"  # gfx908: no flash-attn backend


def test_the_parser_used_above_rejects_what_llamafactory_rejects(llamafactory_parser: Any, bf16_gpu: None,
                                                                 tmp_path: Path) -> None:
    preset = make_preset(WORKSPACE, PresetRequest("mi300x-qlora", "qlora", output=tmp_path / "q.yaml"), cwd=tmp_path)
    settings = dict(preset.settings)
    llamafactory_parser._parse_train_args(settings)
    with pytest.raises(ValueError, match="not used by the HfArgumentParser"):
        llamafactory_parser._parse_train_args({**settings, "quantisation_bit": 4})
    model, data, _, finetuning, _ = llamafactory_parser._parse_train_args({**settings, "finetuning_type": "full"})
    with pytest.raises(ValueError, match="only compatible with the LoRA"):
        llamafactory_parser._verify_model_args(model, data, finetuning)
    with pytest.raises(ValueError, match="deepspeed config"):
        llamafactory_parser._parse_train_args({**settings, "deepspeed": str(tmp_path / "missing.json")})


def _manifest_with(gfx: str, isa: str, environment: str, features: tuple[str, ...]) -> str:
    """The shipped pixi.toml plus a platform and feature for ``gfx``, and ``environment`` using ``features``."""
    text = (ROOT / "pixi.toml").read_text().replace(
        '    { name = "linux-64-gfx90a"',
        f'    {{ name = "linux-64-{gfx}", platform = "linux-64", glibc = "2.28", __amdgpu = "0", '
        f'__amdgpu_arch = "{isa}" }},\n    {{ name = "linux-64-gfx90a"')
    text += (f'\n[feature.{gfx}]\nplatforms = ["linux-64-{gfx}"]\n'
             f'dependencies = {{ amdgpu-target = {{ version = "*", build = "{gfx}" }} }}\n')
    listed = ", ".join(f'"{f}"' for f in features)
    return text.replace("[environments]\n", f"[environments]\n{environment} = [{listed}]\n")


@pytest.mark.parametrize(("gfx", "isa"), [("gfx1151", "11.5.1"), ("gfx1101", "11.0.1")])
def test_an_aotriton_experimental_target_trains_with_flash_attns_triton_backend(tmp_path: Path, gfx: str,
                                                                                isa: str) -> None:
    # AOTriton 0.11.2b (aotriton.toml) classes gfx1101 and gfx1151 experimental (gpu_targets.toml aotriton_tier):
    # SDPA would run the math kernel unless TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, so the preset takes
    # flash-attn's Triton backend, and says why. gfx1100 (supported in 0.11.2b) keeps SDPA (test above).
    assert all_targets()[gfx].aotriton_tier("0.11.2b") == "experimental"
    (tmp_path / "pixi.toml").write_text(_manifest_with(gfx, isa, "rdna", ("rocm72", gfx, "train")))
    preset = make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("rdna", "lora"), cwd=tmp_path)
    assert dict(preset.settings)["flash_attn"] == "fa2"
    (note,) = [n for n in preset.notes if n.startswith("flash_attn:")]
    assert f"AOTriton 0.11.2b classes {gfx} experimental" in note and "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1" in note
    assert "flash-attn's Triton backend" in note and note in preset.yaml_text.replace("# ", "")
    # Without flash-attn in the environment, SDPA is all there is: the preset warns what that costs.
    (tmp_path / "pixi.toml").write_text(_manifest_with(gfx, isa, "bare", ("rocm72", gfx)))
    bare = make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("bare", "lora"), cwd=tmp_path)
    (note,) = [n for n in bare.notes if n.startswith("flash_attn:")]
    assert dict(bare.settings)["flash_attn"] == "sdpa"
    assert "has no flash-attn; warning: AOTriton 0.11.2b" in note and "math kernel" in note


@pytest.mark.parametrize(("pytorch", "expected", "release"), [
    ("2.12.*", "fa2", "0.11.2b"), ("2.13.*", "sdpa", "0.12b"), ("2.14.*", "sdpa", "0.12b"), ("2.11.*", "fa2", "0.11.2b"),
])
def test_the_attention_follows_the_aotriton_release_of_the_environments_pytorch(
        tmp_path: Path, pytorch: str, expected: str, release: str) -> None:
    """AOTriton 0.12b (PyTorch 2.13 on, aotriton.toml [pytorch_releases]) supports gfx1151: the fused SDPA serves
    it, so the preset keeps sdpa; with 2.12 (0.11.2b) it is experimental and flash-attn's Triton backend trains."""
    from rocmlock.gpu.targets import aotriton_release_for

    assert aotriton_release_for(pytorch[:-2]) == release
    text = _manifest_with("gfx1151", "11.5.1", "halo", ("rocm72", "gfx1151", "train"))
    (tmp_path / "pixi.toml").write_text(text.replace('pytorch = "2.12.*"', f'pytorch = "{pytorch}"'))
    preset = make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("halo", "lora"), cwd=tmp_path)
    assert dict(preset.settings)["flash_attn"] == expected
    (note,) = [n for n in preset.notes if n.startswith("flash_attn:")]
    assert (f"AOTriton {release} classes gfx1151 experimental" in note) == (expected == "fa2"), note


def test_the_gpus_memory_can_be_given_and_the_assumed_one_is_said(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # issue 35: gfx1100's table size is the RX 7900 XTX's 24 GiB; a Radeon PRO W7900 has 48.
    manifest = tmp_path / "pixi.toml"
    manifest.write_text((ROOT / "pixi.toml").read_text())
    base = ["preset", "--manifest-path", str(manifest), "-e", "w7900", "--method", "lora"]
    assert main([*base, "-o", str(tmp_path / "table.yaml")]) == 0
    err = capsys.readouterr().err
    assert ("sized for a 7-8B model on 24 GiB, the GPU table's size for gfx1100 (Radeon PRO W7900, Radeon RX 7900 "
            "XTX); --gpu-memory SIZE when yours differs") in err
    assert main([*base, "--gpu-memory", "48GiB", "-o", str(tmp_path / "w7900.yaml")]) == 0
    assert "sized for a 7-8B model on 48 GiB (--gpu-memory)" in capsys.readouterr().err
    small = yaml.safe_load((tmp_path / "table.yaml").read_text())
    big = yaml.safe_load((tmp_path / "w7900.yaml").read_text())
    assert (big["cutoff_len"], big["per_device_train_batch_size"]) > (small["cutoff_len"],
                                                                      small["per_device_train_batch_size"])
    assert "48 GiB (--gpu-memory)" in (tmp_path / "w7900.yaml").read_text()  # the header says so too
    for spelling in ("48", "48G", "48gb", " 48 GiB "):
        assert main([*base, "--gpu-memory", spelling, "-o", str(tmp_path / "x.yaml")]) == 0
        assert (tmp_path / "x.yaml").read_text() == (tmp_path / "w7900.yaml").read_text()
    for bad in ("lots", "0", "-4GiB", "48TB", "1" + "0" * 400):  # the last was "inf GiB", exit 0
        assert main([*base, f"--gpu-memory={bad}", "-o", str(tmp_path / "bad.yaml")]) == 2
        assert f"error: --gpu-memory: '{bad}' is no memory size" in capsys.readouterr().err
        assert not (tmp_path / "bad.yaml").exists()


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--model", "x\nlearning_rate: 1", "holds a control character"), ("--template", "q\x1b[31m", "control character"),
    ("--dataset", "", "empty"), ("--model", "  ", "empty"),
])
def test_preset_text_options_are_one_line_of_text(flag: str, value: str, says: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A newline in --model made the YAML's value a multi-line scalar, an escape reached the YAML and the notes; an
    empty --dataset became the default without a word."""
    assert main(["preset", "--manifest-path", str(ROOT / "pixi.toml"), "-e", "mi300x", "--method", "lora", flag, value,
                 "-o", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag} ") and says in err and "\x1b" not in err, err
    assert not (tmp_path / "p.yaml").exists()


def _gfx950_manifest(tmp_path: Path, pytorch: str, flash_attn: bool) -> Path:
    """The shipped pixi.toml plus environment 'mi355' (gfx950) with ``pytorch``, and flash-attn or not."""
    extra = '\nflash-attn = "2.8.*"' if flash_attn else ""
    text = (ROOT / "pixi.toml").read_text().replace("[environments]\n", (
        f'[feature.torch.dependencies]\npytorch = "{pytorch}"{extra}\n\n'
        '[environments]\nmi355 = ["rocm72", "gfx950", "torch"]\n'))
    (tmp_path / "pixi.toml").write_text(text)
    return tmp_path / "pixi.toml"


@pytest.mark.parametrize(("pytorch", "recorded", "expected"), [
    # PyTorch 2.15's AOTriton is not recorded in aotriton.toml: the warning says "if", and how to find out.
    ("2.15.*", None, "warning: if PyTorch 2.15 bundles AOTriton 0.13b (torch/lib/libaotriton_v2.so.0.13.*"),
    # A series recorded with 0.13b: the warning is certain.
    ("2.15.*", "0.13b", "warning: AOTriton 0.13b, that of PyTorch 2.15: its flash-attention backward on gfx950"),
    ("2.12.*", None, None),  # 0.11.2b, the release the issue compares against
    ("2.13.*", None, None),  # 0.12b
])
def test_sdpa_on_gfx950_names_the_aotriton_013b_backward_regression(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytorch: str, recorded: str | None,
        expected: str | None) -> None:
    """ROCm/TheRock#7696: AOTriton 0.13b's flash-attention backward on gfx950 costs 9-25 % of training throughput;
    a gfx950 preset that trains with SDPA says so, names the issue and the way around it (flash-attn's CK kernels)."""
    from rocmlock.gpu import targets

    if recorded:
        rows = targets._pytorch_releases()
        monkeypatch.setattr(targets, "_pytorch_releases", lambda: [*rows, ((2, 15), recorded)])
    bare = make_preset(load_workspace(_gfx950_manifest(tmp_path, pytorch, flash_attn=False)),
                       PresetRequest("mi355", "lora"), cwd=tmp_path)
    assert dict(bare.settings)["flash_attn"] == "sdpa"
    issues = [n for n in bare.notes if "ROCm/TheRock#7696" in n]
    if expected is None:
        assert issues == []
        return
    (note,) = issues
    assert note.startswith(expected), note
    assert "9-25 % lower training throughput" in note
    assert "add flash-attn to environment 'mi355' (its CK kernels serve gfx950" in note
    assert f"# {note}" in bare.yaml_text
    # With flash-attn, its CK kernels train (fa2): AOTriton's backward is not on the path, and nothing is said.
    fa2 = make_preset(load_workspace(_gfx950_manifest(tmp_path, pytorch, flash_attn=True)),
                      PresetRequest("mi355", "lora"), cwd=tmp_path)
    assert dict(fa2.settings)["flash_attn"] == "fa2"
    assert not [n for n in fa2.notes if "TheRock#7696" in n]


def test_the_aotriton_013b_regression_is_gfx950s_alone(tmp_path: Path) -> None:
    # The same environment on gfx942 (MI300X, no known AOTriton issue) trains with SDPA and says nothing of it.
    text = _gfx950_manifest(tmp_path, "2.15.*", flash_attn=False).read_text()
    (tmp_path / "pixi.toml").write_text(text.replace('mi355 = ["rocm72", "gfx950"', 'mi355 = ["rocm72", "gfx942"'))
    preset = make_preset(load_workspace(tmp_path / "pixi.toml"), PresetRequest("mi355", "lora"), cwd=tmp_path)
    assert dict(preset.settings)["flash_attn"] == "sdpa" and not [n for n in preset.notes if "TheRock" in n]
