"""``rocmlock preset``: a LLaMA-Factory training YAML tuned to one environment of the workspace.

What the environment holds (bitsandbytes, DeepSpeed, flash-attn) comes from its pixi.toml
dependencies; what the GPU can do (bf16, flash-attn CK kernels, memory) comes from the GPU table.
The YAML and, when the environment has DeepSpeed, the ZeRO config JSON beside it are rendered as
text first and written together atomically; the same inputs give the same bytes.

Batch size, gradient accumulation and ``cutoff_len`` are sized for a 7-8B model (the default
model) from the table's ``memory_gib``: what is left after the model state (:data:`STATE_GIB`) and
a reserve is spent on tokens of activations at :data:`MIB_PER_TOKEN` each (gradient checkpointing,
which LLaMA-Factory enables by default, plus fp32 logits of a ~150k vocabulary).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from rocmlock.errors import InputError
from rocmlock.gpu.targets import (
    AOTRITON_EXPERIMENTAL_VAR,
    GpuTarget,
    aotriton_known_issue,
    aotriton_release_for,
    aotriton_tier_for,
    minor_version,
)
from rocmlock.util.fs import relative_path, write_set_atomic
from rocmlock.workspace.model import Environment, Workspace

Method = Literal["lora", "qlora", "full"]
METHODS: tuple[Method, ...] = ("lora", "qlora", "full")
DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"
DEFAULT_TEMPLATE = "qwen"
# One of LLaMA-Factory's demo datasets (its data/dataset_info.json; dataset_dir defaults to ./data).
DEFAULT_DATASET = "alpaca_en_demo"

# GiB of model state per GPU for a 7-8B model: bf16 weights (LoRA), 4-bit weights (QLoRA), and
# for full fine-tuning bf16 weights + gradients + fp32 Adam state (16 bytes per parameter).
STATE_GIB: dict[Method, float] = {"lora": 16.0, "qlora": 6.0, "full": 112.0}
# ZeRO-3 shards the full fine-tuning state over the GPUs of a node.
ZERO3_GPUS = 8
RESERVE_GIB = 4.0
MIB_PER_TOKEN = 1.0
# Sequences per GPU per optimizer step (batch x accumulation); LLaMA-Factory's examples use 8-16.
EFFECTIVE_BATCH = 16
CUTOFFS = (1024, 2048, 4096, 8192)
LEARNING_RATE: dict[Method, float] = {"lora": 1.0e-4, "qlora": 1.0e-4, "full": 1.0e-5}


@dataclass(frozen=True)
class Capabilities:
    """What an environment brings to training: its GPU and the optional packages it installs."""

    environment: str
    target: GpuTarget
    rocm_version: str | None
    bitsandbytes: bool
    deepspeed: bool
    flash_attn: bool
    # The PyTorch series the environment asks (its `pytorch` spec), for the AOTriton release its SDPA runs.
    pytorch_series: str | None = None


@dataclass(frozen=True)
class Sizing:
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    cutoff_len: int
    fits: bool


@dataclass(frozen=True)
class Preset:
    """A rendered preset: the YAML, the optional DeepSpeed JSON, and why each choice was made."""

    environment: str
    method: Method
    yaml_path: Path
    yaml_text: str
    deepspeed_path: Path | None
    deepspeed_text: str | None
    settings: tuple[tuple[str, Any], ...]
    notes: tuple[str, ...]

    def files(self) -> dict[Path, str]:
        out = {self.yaml_path: self.yaml_text}
        if self.deepspeed_path is not None and self.deepspeed_text is not None:
            out[self.deepspeed_path] = self.deepspeed_text
        return out

    def train_command(self) -> str:
        # LLaMA-Factory refuses DeepSpeed training unless launched through torchrun.
        prefix = "FORCE_TORCHRUN=1 " if self.deepspeed_path else ""
        return f"{prefix}llamafactory-cli train {relative_path(self.yaml_path, Path.cwd())}"

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "method": self.method,
            "yaml": str(self.yaml_path),
            "deepspeed": str(self.deepspeed_path) if self.deepspeed_path else None,
            "settings": dict(self.settings),
            "notes": list(self.notes),
            "command": self.train_command(),
        }


# ----------------------------------------------------------------------------- decisions


def capabilities(env: Environment) -> Capabilities:
    """The GPU target and the training packages of ``env``; an environment without a GPU is an error."""
    if env.gpu_target is None:
        raise InputError(f"environment '{env.name}' has no GPU target",
                         hint="pick an environment with an amdgpu-target feature (e.g. mi300x)")
    names = {d.name for plat in env.platforms for d in env.dependencies_for(plat)}
    rocm = env.dependency("rocm-version")
    rocm_version = minor_version(rocm.version) if rocm else None
    torch = env.dependency("pytorch")
    series = minor_version(torch.version) if torch else None
    return Capabilities(env.name, env.gpu_target, rocm_version or None, "bitsandbytes" in names,
                        "deepspeed" in names, "flash-attn" in names, series or None)


def attention(caps: Capabilities) -> tuple[str, str]:
    """LLaMA-Factory's ``flash_attn`` value and why: a fused kernel that PyTorch or flash-attn runs as supported."""
    gfx = caps.target.gfx
    if caps.flash_attn and caps.target.flash_attn_ck:
        return "fa2", f"flash-attn's CK kernels support {gfx} (flash_attn_ck)"
    # The AOTriton release of the environment's PyTorch (aotriton.toml [pytorch_releases]): from 2.13 on (0.12b)
    # gfx1151 is supported, so SDPA is fused there; with the pinned 2.12 (0.11.2b) it is experimental.
    release = aotriton_release_for(caps.pytorch_series)
    tier = aotriton_tier_for(caps.target, release)
    gate = (f"AOTriton {release} classes {gfx} experimental, so PyTorch SDPA runs its math kernel "
            f"(unfused; on an H200 27x slower, 20x the memory at sequence 4096) unless {AOTRITON_EXPERIMENTAL_VAR}=1")
    if caps.flash_attn and caps.target.flash_attn_triton:
        if tier == "experimental":
            # The flash-attn package's activation script exports FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE, which its
            # Triton backend needs in every training process; its kernels are AOT-compiled for the target in CI.
            return "fa2", f"{gate}; flash-attn's Triton backend is fused and not experimental there"
        # fa2 would run flash-attn's Triton backend, which needs FLASH_ATTENTION_TRITON_AMD_ENABLE in
        # every training process; PyTorch's SDPA has AOTriton kernels for these targets built in.
        return "sdpa", f"flash-attn has only its Triton backend on {gfx}; PyTorch SDPA (AOTriton) is used instead"
    missing = (f"environment '{caps.environment}' has no flash-attn" if not caps.flash_attn
               else f"flash-attn has no backend for {gfx}")
    if tier == "experimental":
        return "sdpa", (f"{missing}; warning: {gate}, which risks wrong results (docs/recipes.md, "
                        "\"AOTriton's experimental targets\"): add flash-attn to the environment")
    return "sdpa", missing


def _aotriton_issue(caps: Capabilities) -> list[str]:
    """A known defect of the AOTriton that SDPA runs on this GPU (gfx950 with 0.13b: ROCm/TheRock#7696), and the
    way around it: flash-attn's own kernels, where it has a backend for the GPU."""
    issue = aotriton_known_issue(caps.target, caps.pytorch_series)
    if issue is None:
        return []
    ck, triton = caps.target.flash_attn_ck, caps.target.flash_attn_triton
    if ck or triton:
        backend = "CK" if ck else "Triton"
        issue += (f"; add flash-attn to environment '{caps.environment}' (its {backend} kernels serve "
                  f"{caps.target.gfx}; the preset then sets flash_attn: fa2), or use a PyTorch built with AOTriton "
                  "0.11.2b (the issue's workaround)")
    return [issue]


def check_method(caps: Capabilities, method: str) -> Method:
    """``method`` validated against the environment: QLoRA needs bitsandbytes built for the GPU."""
    if method not in METHODS:
        raise InputError(f"unknown method '{method}'", hint=f"use one of: {', '.join(METHODS)}")
    if method == "qlora":
        gfx = caps.target.gfx
        if not caps.bitsandbytes:
            raise InputError(
                f"environment '{caps.environment}' has no bitsandbytes: QLoRA quantizes the model to 4 bits "
                "with bitsandbytes",
                hint="use an environment with the qlora feature (e.g. mi300x-qlora), or add the feature "
                     "'qlora' to this environment in pixi.toml")
        if caps.rocm_version and not caps.target.supports_bitsandbytes(caps.rocm_version):
            first = caps.target.bnb_first_rocm or "no ROCm release"
            raise InputError(
                f"environment '{caps.environment}': bitsandbytes' ROCm backend does not support {gfx} with "
                f"ROCm {caps.rocm_version} (bnb_first_rocm: {first})",
                hint="use --method lora, or a GPU target that bitsandbytes supports")
    return method


def parse_gpu_memory(text: str) -> float:
    """``--gpu-memory``: GiB, written ``48``, ``48G``, ``48GB`` or ``48GiB`` (a GPU's "48 GB" is 48 GiB of memory)."""
    match = re.fullmatch(r"\s*(\d{1,6}(?:\.\d{1,6})?)\s*(?:g|gb|gib)?\s*", text, re.IGNORECASE)
    if match is None or float(match.group(1)) <= 0:  # at most 999999 GiB: a 400-digit number was "inf GiB"
        raise InputError(f"--gpu-memory: '{text}' is no memory size", hint="give the GPU's memory, e.g. --gpu-memory 48GiB")
    return float(match.group(1))


def sizing(target: GpuTarget, method: Method, zero3: bool, memory_gib: float | None = None) -> Sizing:
    """Batch, accumulation and cutoff for a 7-8B model on ``memory_gib`` (default: ``target``'s smallest product)."""
    state = STATE_GIB[method] / (ZERO3_GPUS if zero3 else 1)
    free_gib = (memory_gib or target.memory_gib) - state - RESERVE_GIB
    tokens = max(0.0, free_gib) * 1024 / MIB_PER_TOKEN
    # The longest cutoff that leaves room for two sequences, then as many sequences as fit.
    cutoff = max([c for c in CUTOFFS if 2 * c <= tokens], default=CUTOFFS[0])
    batch = 1
    while batch * 2 <= min(EFFECTIVE_BATCH, tokens / cutoff):
        batch *= 2
    return Sizing(batch, max(1, EFFECTIVE_BATCH // batch), cutoff, fits=tokens >= cutoff)


def deepspeed_config(stage: int) -> dict[str, Any]:
    """A ZeRO config whose batch/precision fields LLaMA-Factory's Trainer fills in (``"auto"``)."""
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": False, "contiguous_gradients": True}
    if stage == 2:
        zero.update({"allgather_partitions": True, "allgather_bucket_size": 500_000_000, "reduce_scatter": True,
                     "reduce_bucket_size": 500_000_000, "round_robin_gradients": True})
    else:
        zero.update({"sub_group_size": 1_000_000_000, "reduce_bucket_size": "auto",
                     "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                     "stage3_max_live_parameters": 1_000_000_000, "stage3_max_reuse_distance": 1_000_000_000,
                     "stage3_gather_16bit_weights_on_model_save": True})
    return {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                 "hysteresis": 2, "min_loss_scale": 1},
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
    }


# ----------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class PresetRequest:
    """What the user asked for; paths are resolved against ``cwd``."""

    environment: str
    method: str
    model: str = DEFAULT_MODEL
    template: str = DEFAULT_TEMPLATE
    dataset: str = DEFAULT_DATASET
    output: Path | None = None
    # The GPU's memory (--gpu-memory); None: the table's memory_gib, that of the target's smallest product.
    memory_gib: float | None = None


def _memory_note(target: GpuTarget, memory_gib: float | None) -> str:
    if memory_gib is not None:
        return f"{memory_gib:g} GiB (--gpu-memory)"
    return (f"{target.memory_gib} GiB, the GPU table's size for {target.gfx} ({', '.join(target.products)}); "
            "--gpu-memory SIZE when yours differs")


def make_preset(workspace: Workspace, request: PresetRequest, cwd: Path | None = None) -> Preset:
    """Render the preset for ``request``; nothing is written (see :func:`write_preset`)."""
    cwd = cwd or Path.cwd()
    caps = capabilities(workspace.environment(request.environment))
    method = check_method(caps, request.method)
    flash_attn, flash_reason = attention(caps)
    stage = (3 if method == "full" else 2) if caps.deepspeed else None
    size = sizing(caps.target, method, zero3=stage == 3, memory_gib=request.memory_gib)
    memory = request.memory_gib or caps.target.memory_gib
    yaml_path = _output_path(workspace, request, cwd)
    ds_path = yaml_path.with_name(f"{yaml_path.stem}.ds_z{stage}.json") if stage else None
    settings = _settings(caps, method, request, flash_attn, size, ds_path, cwd)
    notes = [f"flash_attn: {flash_attn} ({flash_reason})",
             f"{'bf16' if caps.target.bf16 else 'fp16'} mixed precision (GPU table: bf16 = {caps.target.bf16})",
             (f"batch {size.per_device_train_batch_size} x accumulation {size.gradient_accumulation_steps}, "
             f"cutoff_len {size.cutoff_len}: sized for a 7-8B model on "
             f"{_memory_note(caps.target, request.memory_gib)}")]
    if flash_attn == "sdpa":
        notes += _aotriton_issue(caps)
    if ds_path is not None:
        notes.append(f"DeepSpeed ZeRO-{stage} config: {relative_path(ds_path, cwd)}")
    if request.dataset == DEFAULT_DATASET:
        notes.append(f"dataset {DEFAULT_DATASET}: a demo of LLaMA-Factory's, looked up in ./data (dataset_dir: its "
                     "repository's data/): train from a checkout of LLaMA-Factory, or pass --dataset with an entry "
                     "of your own data/dataset_info.json")
    if not size.fits:
        notes.append(f"warning: {memory:g} GiB is below what {method} of a 7-8B model needs "
                     f"(~{STATE_GIB[method]:.0f} GiB of model state); use a smaller model or ZeRO-3 sharding")
    ds_text = json.dumps(deepspeed_config(stage), indent=2) + "\n" if stage else None
    return Preset(caps.environment, method, yaml_path, render_yaml(settings, _header(caps, method, notes)),
                  ds_path, ds_text, tuple(settings), tuple(notes))


def write_preset(preset: Preset) -> None:
    """Write the YAML and its DeepSpeed JSON together: both files change, or neither."""
    write_set_atomic(preset.files())


def _output_path(workspace: Workspace, request: PresetRequest, cwd: Path) -> Path:
    if request.output is None:
        # mi300x-qlora with --method qlora is presets/mi300x-qlora.yaml, not mi300x-qlora-qlora.yaml.
        stem = request.environment
        if not stem.endswith(f"-{request.method}"):
            stem = f"{stem}-{request.method}"
        return workspace.root / "presets" / f"{stem}.yaml"
    out = request.output if request.output.is_absolute() else cwd / request.output
    if out.suffix not in (".yaml", ".yml"):
        raise InputError(f"output '{request.output}' must end in .yaml or .yml",
                         hint="llamafactory-cli train recognises a config file by that suffix")
    return out


def _settings(caps: Capabilities, method: Method, request: PresetRequest, flash_attn: str, size: Sizing,
              ds_path: Path | None, cwd: Path) -> list[tuple[str, Any]]:
    """The YAML's keys in LLaMA-Factory's example order (model, method, dataset, output, train)."""
    out: list[tuple[str, Any]] = [("model_name_or_path", request.model), ("trust_remote_code", True)]
    if method == "qlora":
        # "bnb" is LLaMA-Factory's QuantizationMethod value for bitsandbytes.
        out += [("quantization_bit", 4), ("quantization_method", "bnb"), ("upcast_layernorm", True)]
    out += [("flash_attn", flash_attn),
            ("stage", "sft"), ("do_train", True), ("finetuning_type", "full" if method == "full" else "lora")]
    if method != "full":
        out += [("lora_rank", 8), ("lora_target", "all")]
    if ds_path is not None:
        # LLaMA-Factory resolves paths from the CWD: relative to it when the file lies below it.
        out.append(("deepspeed", relative_path(ds_path, cwd)))
    out += [("dataset", request.dataset), ("template", request.template), ("cutoff_len", size.cutoff_len),
            ("max_samples", 1000), ("preprocessing_num_workers", 16), ("dataloader_num_workers", 4),
            ("output_dir", f"saves/{caps.environment}/{method}/sft"), ("logging_steps", 10), ("save_steps", 500),
            ("plot_loss", True), ("overwrite_output_dir", True), ("save_only_model", False), ("report_to", "none"),
            ("per_device_train_batch_size", size.per_device_train_batch_size),
            ("gradient_accumulation_steps", size.gradient_accumulation_steps),
            ("learning_rate", LEARNING_RATE[method]), ("num_train_epochs", 3.0), ("lr_scheduler_type", "cosine"),
            ("warmup_ratio", 0.1), ("bf16" if caps.target.bf16 else "fp16", True), ("ddp_timeout", 180000000)]
    return out


SECTIONS = (("model", "model_name_or_path"), ("method", "stage"), ("dataset", "dataset"),
            ("output", "output_dir"), ("train", "per_device_train_batch_size"))


def render_yaml(settings: list[tuple[str, Any]], header: list[str]) -> str:
    """The settings as LLaMA-Factory-style YAML: a comment header, then ``### section`` blocks."""
    starts = {key: name for name, key in SECTIONS}
    lines = [f"# {h}" if h else "#" for h in header]
    for key, value in settings:
        if key in starts:
            lines += ["", f"### {starts[key]}"]
        lines.append(yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _header(caps: Capabilities, method: Method, notes: list[str]) -> list[str]:
    rocm = f"ROCm {caps.rocm_version}, " if caps.rocm_version else ""
    return [(f"LLaMA-Factory {method} preset for environment '{caps.environment}' "
            f"({rocm}{caps.target.gfx}: {', '.join(caps.target.products)})."),
            "Written by `rocmlock preset`; regenerate rather than edit, or edit dataset/template freely.",
            *notes]
