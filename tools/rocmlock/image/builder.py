"""``rocmlock image``: an OCI image whose top layer is one locked environment, installed exactly from the lock.

The environment is installed by rattler (hashes verified, as ``rocmlock install``) into a staging directory with
``alternative_target_prefix=/opt/env`` (py-rattler's ``install``: files are written under the stage, the prefix
written into them is /opt/env), its conda-meta cleaned of host paths, and written as one reproducible layer
(:func:`rocmlock.image.oci.write_layer`) on top of the base image's layers. The layout is written to a scratch
directory and renamed into place; a push hands it to skopeo (``skopeo copy --preserve-digests``), which reads
registry credentials from the usual auth files itself (containers-auth.json(5), docker's config.json): rocmlock
never sees, writes or prints them. A base from a registry is fetched the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rocmlock import __version__
from rocmlock.errors import InputError, OperationError, RocmlockError
from rocmlock.image import oci, ociref, sbom
from rocmlock.image.activation import ActivationInputs
from rocmlock.image.files import (
    CHECK,
    DEFAULT_PREFIX,
    ENTRYPOINT,
    SBOM,
    ToolFiles,
    add_tool_files,
    check_prefix,
)
from rocmlock.image.sif import build_sif, check_sif_path, require_apptainer
from rocmlock.prefix.fetch import fetch_each
from rocmlock.prefix.install import Selected, read_selected
from rocmlock.prefix.pkgcheck import check_packages
from rocmlock.prefix.records import settle_records
from rocmlock.util.credentials import client_for_urls, one_line, redact_text, split_url
from rocmlock.util.pgzip import LEVEL
from rocmlock.util.scratch import scratch_dir
from rocmlock.util.text import escape

_ARCH = {"linux-64": "amd64", "linux-aarch64": "arm64", "linux-ppc64le": "ppc64le"}
DEFAULT_GLIBC = (2, 28)
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # the distribution spec's tag


@dataclass(frozen=True)
class ImageResult:
    digest: str
    tag: str
    environment: str
    platform: str
    packages: int
    layer_size: int
    created: int
    labels: dict[str, str]
    output: Path | None
    pushed: str | None
    left_out: tuple[str, ...]
    prefix: str = DEFAULT_PREFIX
    has_base: bool = True
    sif: Path | None = None
    plain_http: bool = False  # pushed without TLS verification (a loopback registry, or --insecure)

    def to_dict(self) -> dict[str, object]:
        return {"digest": self.digest, "tag": self.tag, "environment": self.environment, "platform": self.platform,
                "packages": self.packages, "layer_size": self.layer_size, "created": self.created,
                "labels": self.labels, "output": str(self.output) if self.output else None, "pushed": self.pushed,
                "left_out": list(self.left_out), "prefix": self.prefix, "base": self.has_base,
                "sif": str(self.sif) if self.sif else None}


def _skopeo(args: Sequence[str], what: str, cwd: Path, secrets: Sequence[str] = ()) -> None:
    """skopeo ``args`` run in ``cwd``: a layout there is named by a relative path, since containers/image reads
    ``oci:PATH:TAG`` up to the first ':' and no absolute path with one (a TMPDIR or -o holding ':') could be named."""
    if shutil.which("skopeo") is None:
        raise OperationError(f"{what}: skopeo is not installed", hint="install it (apt-get install skopeo)")
    proc = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, cwd=cwd)
    if proc.returncode != 0:
        text = proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}"
        # skopeo logs as logrus does: time="..." level=fatal msg="what went wrong" (quotes escaped)
        fatal = re.search(r'level=fatal msg="((?:[^"\\]|\\.)*)"', text)
        if fatal:
            text = fatal.group(1).replace('\\"', '"')
        text = redact_text(one_line(text), secrets)
        raise OperationError(f"{what}: {text}", hint="check the reference, that the registry is reachable, and "
                             "its credentials (skopeo login, or the auth file of REGISTRY_AUTH_FILE)")


def _base(ref: str, work: Path, arch: str, insecure: bool) -> oci.BaseImage:
    if ref.startswith(ociref.DEBOOTSTRAP):
        # here: an image without that base does not import it (its cost)
        from rocmlock.image import debianbase

        return oci.read_layout(debianbase.debian_base(ref, arch), debianbase.TAG, arch, f"--base {ref}")
    if ref.startswith("oci:"):
        path, _, tag = ref[4:].partition(":")
        return oci.read_layout(Path(path), tag or None, arch, f"--base {ref}")
    parsed = ociref.parse(ref, "--base")
    bare = str(parsed)
    copy = ["copy", "--quiet", "--override-os", "linux", "--override-arch", arch]
    if insecure or parsed.loopback:
        copy.append("--src-tls-verify=false")
    _skopeo([*copy, f"docker://{bare}", "oci:base:base"], f"fetching the base image {bare}", work)
    return oci.read_layout(work / "base", "base", arch, f"--base {bare}")


def _required_glibc(selected: Selected) -> tuple[int, int]:
    """The lock platform's ``__glibc``, else pixi's default system requirement for linux (``libc = { family =
    "glibc", version = "2.28" }``, pixi.prefix.dev workspace/system_requirements): conda's linux packages all
    need a glibc."""
    for vp in selected.platform.virtual_packages:
        name, _, version = vp.partition("=")
        if name == "__glibc":
            parts = version.split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return int(parts[0]), int(parts[1])
    return DEFAULT_GLIBC


def _check_glibc(facts: oci.RootfsFacts, selected: Selected, label: str) -> None:
    need = _required_glibc(selected)
    have = facts.glibc
    if have is None:
        raise InputError(f"--base {label}: no glibc (libc.so.6) found in the image, the lock's platform "
                         f"'{selected.platform.name}' needs glibc >= {need[0]}.{need[1]}",
                         hint="choose a glibc-based base image (Debian, Ubuntu, RHEL), not musl or distroless-static")
    if have < need:
        raise InputError(f"--base {label}: its glibc is {have[0]}.{have[1]}, the lock's platform "
                         f"'{selected.platform.name}' needs glibc >= {need[0]}.{need[1]}",
                         hint="choose a newer base image")


def _admit(selected: Selected, lock_path: Path, work: Path, client: Any) -> dict[str, str]:
    """Every locked package fetched into ``work`` (its size and sha256 checked against the lock) and admitted as
    ``unpack`` admits a bundle's (:func:`rocmlock.prefix.pkgcheck.check_packages`: no path of it leaves the
    prefix), before rattler links anything; the records then point at the checked files. The lock's URL of
    each file name, for conda-meta."""
    records = selected.records
    (work / "pkgs").mkdir()
    files = [work / "pkgs" / f"{i}{'.conda' if r.file_name.endswith('.conda') else '.tar.bz2'}"
             for i, r in enumerate(records)]
    fetch_each(records, files, lock_path.parent, client)
    check_packages({r.file_name: f for r, f in zip(records, files, strict=True)}, lock_path,
                   hint="a locked package would write outside the environment: do not build it; find out where "
                        "it came from")
    urls = {r.file_name: r.url for r in records}
    for record, file in zip(records, files, strict=True):
        record.url = file.as_uri()
    return urls


def _install(selected: Selected, stage: Path, target: str, channels: Sequence[str], cache_dir: Path | None,
             lock_path: Path, work: Path) -> Path:
    from rattler import install

    _, client = client_for_urls(channels)
    prefix = stage / target.lstrip("/")
    secrets = [s for c in channels for s in split_url(c).secrets]
    urls = {r.file_name: r.url for r in selected.records}
    try:
        urls = _admit(selected, lock_path, work, client)
        asyncio.run(install(selected.records, prefix, cache_dir=cache_dir, show_progress=False, client=client,
                            alternative_target_prefix=target, execute_link_scripts=False))
    except RocmlockError:
        raise
    except Exception as exc:  # noqa: BLE001 - rattler's download/link errors; the message names the file
        raise OperationError(f"installing the environment for the image failed: "
                             f"{one_line(redact_text(str(exc), secrets))}",
                             hint="check the channel is reachable and RATTLER_AUTH_FILE holds its credentials") from None
    finally:
        for record in selected.records:
            record.url = urls[record.file_name]
    settle_records(prefix, urls)  # the lock's URLs, not the checked copies'; no host path
    return prefix


def default_epoch(selected: Selected) -> int:
    """``SOURCE_DATE_EPOCH`` unless set: the newest build timestamp among the locked packages (0 without any), so
    the image's dates come from the lock alone."""
    stamps = [int(r.timestamp.timestamp()) for r in selected.records if r.timestamp is not None]
    return max(stamps, default=0)


def _epoch(selected: Selected) -> int:
    given = os.environ.get("SOURCE_DATE_EPOCH")
    if given is None:
        return default_epoch(selected)
    # reproducible-builds.org/specs/source-date-epoch: ASCII digits only; the image's RFC 3339 dates end in 9999.
    if not re.fullmatch(r"[0-9]{1,12}", given, re.ASCII) or int(given) > MAX_EPOCH:
        raise InputError(f"SOURCE_DATE_EPOCH={escape(given[:40])}{'...' if len(given) > 40 else ''}: not a Unix time "
                         f"(ASCII digits, at most {MAX_EPOCH}, 9999-12-31)",
                         hint="unset it, or set it to a Unix time such as $(git log -1 --format=%ct)")
    return int(given)


def _labels(environment: str, selected: Selected, lock_sha256: str, base: oci.BaseImage | None,
            base_ref: str | None, created: str, prefix: str, tools: ToolFiles, level: int) -> dict[str, str]:
    gfx = next((str(r.build) for r in selected.records if r.name.normalized == "amdgpu-target"), "")
    rocm = next((str(r.version) for r in selected.records if r.name.normalized == "rocm-version"), "")
    labels = {"org.opencontainers.image.title": f"rocmlock environment {environment}",
              "org.opencontainers.image.created": created,
              "org.opencontainers.image.description": f"the locked environment '{environment}' "
                                                      f"[{selected.platform.name}] at {prefix}",
              "io.rocmlock.lock.sha256": lock_sha256, "io.rocmlock.environment": environment,
              "io.rocmlock.platform": selected.platform.name, "io.rocmlock.gpu-target": gfx,
              "io.rocmlock.rocm-version": rocm, "io.rocmlock.prefix": prefix, "io.rocmlock.check": CHECK,
              "io.rocmlock.probe": tools.probe, "io.rocmlock.activation.sha256": tools.activation_sha256,
              "io.rocmlock.sbom": SBOM, "io.rocmlock.sbom.sha256": tools.sbom_sha256,
              "io.rocmlock.layer.gzip-level": str(level)}  # its digest again needs the same level
    if base is not None:
        labels["org.opencontainers.image.base.digest"] = base.manifest_digest
        if base_ref and not base_ref.startswith(("oci:", ociref.DEBOOTSTRAP)):  # a registry name, not a path
            labels["org.opencontainers.image.base.name"] = base_ref.removeprefix("docker://")
    return {k: v for k, v in labels.items() if v}


def _config(base: oci.BaseImage | None, arch: str, diff_id: str, labels: dict[str, str], created: str,
            environment: str, facts: oci.RootfsFacts | None, prefix: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(base.config)) if base else {"architecture": arch, "os": "linux"}
    inner = config.setdefault("config", {}) or {}
    config["config"] = inner
    env = [e for e in inner.get("Env") or [] if isinstance(e, str)]
    path = next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    # The activation's first steps, for what starts without the entrypoint (apptainer exec, a Kubernetes command:).
    values = {"PATH": f"{prefix}/bin:{path}", "CONDA_PREFIX": prefix}
    # rocm-version's activation (recipes/rocm-version/activate.sh): ROCM_PATH/HIP_PATH at the ROCm that is there,
    # /opt/rocm first, never at a path without ROCm; a base without ROCm gets neither (the host's is not visible).
    if facts is not None and facts.rocm:
        values.update({"ROCM_PATH": "/opt/rocm", "HIP_PATH": "/opt/rocm"})
    inner["Env"] = [e for e in env if e.split("=", 1)[0] not in values] + [f"{k}={v}" for k, v in values.items()]
    inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
    # The entrypoint activates, then runs the command: a shell of the base's, or (no base) the check.
    inner["Entrypoint"] = [ENTRYPOINT]
    inner["Cmd"] = [facts.shell] if facts is not None and facts.shell else [CHECK]
    # Docker's image config carries a health check (the OCI config has no such field; runtimes ignore it): the probe,
    # run once a day at most, which is what a check that may take a minute should cost.
    inner["Healthcheck"] = {"Test": ["CMD", CHECK], "Interval": 86400 * 10**9, "Timeout": 600 * 10**9,
                            "StartPeriod": 0, "Retries": 1}
    config["created"] = created
    rootfs = config.setdefault("rootfs", {"type": "layers", "diff_ids": []})
    rootfs["diff_ids"] = [*(rootfs.get("diff_ids") or []), diff_id]
    config["history"] = [*(config.get("history") or []),
                         {"created": created, "created_by": f"rocmlock image -e {environment}",
                          "comment": f"the locked environment at {prefix}"}]
    return config


def check_output(output: Path) -> Path:
    """``output`` (-o) checked before the build, absolute. A symbolic link to nothing is refused, as GNU cp refuses
    to write through one ("not writing through dangling symlink"): the layout would land wherever it points,
    its directories made on the way; a link to a layout or an empty directory is followed."""
    if output.is_symlink() and not output.exists():
        raise InputError(f"{output}: -o is a symbolic link to nothing ({escape(os.readlink(output))}); not written "
                         "through", hint="point -o at a new path or an existing layout, or remove the link")
    output = output.resolve()
    if ":" in str(output):
        # containers/image (skopeo, podman) and apptainer read oci:PATH:TAG up to the first ':'.
        raise InputError(f"{escape(str(output))}: -o holds a ':', and skopeo, podman and apptainer read a layout's "
                         "name (oci:PATH:TAG) only up to the first one", hint="choose a directory without ':'")
    if output.exists() and not (output / "oci-layout").is_file() and not (output.is_dir() and
                                                                          not any(output.iterdir())):
        raise InputError(f"{output}: -o exists and is not an OCI image layout",
                         hint="choose a new directory (it is created), or an image layout to add the image to")
    if (output / "oci-layout").is_file():
        oci.read_index(output, f"-o {output}")  # a layout to add to: refused before the build when damaged
    return output


def _activation_inputs(manifest: Path | None, lock_path: Path, environment: str, selected: Selected,
                       staged: Path, prefix: str) -> ActivationInputs:
    """The activation's inputs: the workspace's ``[activation]`` of this environment (none without a manifest)."""
    from rocmlock.workspace.activation import EnvironmentActivation, environment_activation
    from rocmlock.workspace.manifest import load_workspace

    if manifest is None:
        return ActivationInputs(staged, prefix, environment, environment, (selected.platform.name,),
                                lock_path.parent, EnvironmentActivation())
    ws = load_workspace(manifest)
    platforms = tuple(p.name for p in ws.environment(environment).platforms)
    return ActivationInputs(staged, prefix, environment, ws.name, platforms, ws.root,
                            environment_activation(ws, environment, selected.platform.name))


def _declared(manifest: Path | None, environment: str, platform: str) -> dict[str, list[str]]:
    """The conda packages the manifest declares for ``environment`` on ``platform`` (its merged dependencies),
    each with the features whose tables name it (a target's too), sorted by name as pixi-sbom 1.15 lists them
    (``pixi:direct``/``pixi:declared-in``: ``abc,default``); nothing without a manifest."""
    from rocmlock.workspace.manifest import load_workspace

    if manifest is None:
        return {}
    ws = load_workspace(manifest)
    env = ws.environment(environment)
    plat = next((p for p in env.platforms if p.name == platform), None)
    direct = {d.name.lower() for d in env.dependencies_for(plat)} if plat is not None else set()
    out: dict[str, list[str]] = {}
    for name in sorted(env.features):
        feature = ws.features[name]
        tables = [feature.dependencies, *(deps for _, deps in feature.target_dependencies)]
        for dep in sorted({d.name.lower() for deps in tables for d in deps} & direct):
            out.setdefault(dep, []).append(name)
    return out


def _check_base_choice(base_ref: str | None, no_base: bool) -> None:
    if base_ref is None and not no_base:
        raise InputError("rocmlock image: no --base: the image would hold the environment alone, without a system "
                         "(no shell, no C library), and could not run on its own",
                         hint="pass --base REF (docker.io/library/debian:12, oci:DIR:TAG), or --no-base for a layer "
                              "to COPY --from in a Dockerfile of your own")
    if base_ref is not None and no_base:
        raise InputError("rocmlock image: --base and --no-base together", hint="pass one of them")
    if base_ref is not None and not base_ref.strip():  # an unset shell variable: not a silent --no-base
        raise InputError("rocmlock image: --base '' names no image",
                         hint="pass --base REF (docker.io/library/debian:12, oci:DIR:TAG), or --no-base")


def _check_shell(facts: oci.RootfsFacts, label: str) -> None:
    if facts.shell is None:
        raise InputError(f"--base {label}: no /bin/sh in the image, which the entrypoint needs to activate the "
                         "environment (its activate.d scripts and [activation] are shell)",
                         hint="choose a base with a shell (Debian, Ubuntu, RHEL, rocm/dev-*)")


def build_image(lock_path: Path, environment: str, *, platform: str | None = None, base_ref: str | None = None,
                output: Path | None = None, push: str | None = None, tag: str | None = None,
                channels: Sequence[str] = (), insecure: bool = False, cache_dir: Path | None = None,
                prefix: str = DEFAULT_PREFIX, manifest: Path | None = None, no_base: bool = False,
                sif: Path | None = None, level: int | None = None) -> ImageResult:
    """Build the image of ``environment`` (see the module); write it to ``output`` and/or push it to ``push``;
    its layer gzip'd at ``level`` (None: :data:`rocmlock.util.pgzip.LEVEL`).

    Without ``base_ref`` the image holds the environment alone, which runs nowhere by itself: ``no_base`` must
    say that this is wanted (an image to ``COPY --from``)."""
    _check_base_choice(base_ref, no_base)
    prefix = check_prefix(prefix)
    # One read of pixi.lock: the records, what is left out and the lock sha256 of the labels (issue 43).
    selected, lock_sha256 = read_selected(lock_path, environment, platform, "image")
    arch = _ARCH.get(selected.platform.subdir)
    if arch is None:
        raise InputError(f"{lock_path}: environment '{environment}' is for {selected.platform.subdir}, "
                         "not a Linux platform an image can run", hint="pick a linux platform with -p")
    pushed = ociref.parse(push, "--push") if push else None
    if pushed is not None and pushed.tag is None:
        raise InputError(f"--push {pushed}: no tag", hint="name one: REGISTRY/REPO:TAG")
    dest = str(pushed) if pushed else None
    plain_http = pushed is not None and (insecure or pushed.loopback)  # skopeo pushes it without TLS verification
    if tag is not None and not tag:
        raise InputError("--tag '': not an image tag", hint="letters, digits, '_', '.', '-' (at most 128), or leave "
                                                             "--tag out for --push's tag, else the environment's name")
    tag = tag or (pushed.tag if pushed and pushed.tag else environment)
    if not _TAG.fullmatch(tag):
        raise InputError(f"--tag {tag[:140]!r}: not an image tag", hint="letters, digits, '_', '.', '-' (at most 128)")
    if output is not None:
        output = check_output(output)
    if sif is not None:
        check_sif_path(sif)
        require_apptainer("--sif")
        if base_ref is None:
            raise InputError("--sif with --no-base: a SIF of the environment alone could not run",
                             hint="pass --base REF (a system with /bin/sh) for a SIF")
    epoch = _epoch(selected)
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # Beside -o, so that the finished layout is renamed into place; a killed run's leftover is swept by the next.
    parent = output.parent if output is not None else Path(tempfile.gettempdir())
    with scratch_dir(parent, ".rocmlock-image-") as work:
        base = _base(base_ref, work, arch, insecure) if base_ref else None
        facts = oci.rootfs_facts(base) if base is not None else None
        if facts is not None:
            _check_glibc(facts, selected, base_ref or "")
            _check_shell(facts, base_ref or "")
        stage = work / "rootfs"
        staged = _install(selected, stage, prefix, channels, cache_dir, lock_path, work)
        inputs = _activation_inputs(manifest, lock_path, environment, selected, staged, prefix)
        document = sbom.document(selected.records, root_name=inputs.project, environment=environment,
                                 platform=selected.platform.name, lock_name=lock_path.name,
                                 lock_sha256=lock_sha256, prefix=prefix, created=created, tool_version=__version__,
                                 declared=_declared(manifest, environment, selected.platform.name))
        tools = add_tool_files(stage, prefix, inputs, document)
        layout = work / "layout"
        blobs = oci.start_layout(layout)
        level = LEVEL if level is None else level
        diff_id, digest, size = oci.write_layer(stage, blobs / "layer.tmp", epoch, level)
        (blobs / "layer.tmp").rename(blobs / "sha256" / digest.split(":")[1])
        for layer in base.layers if base else ():
            oci.copy_blob(base.blobs, str(layer["digest"]), blobs)  # type: ignore[union-attr]
        labels = _labels(environment, selected, lock_sha256, base, base_ref, created, prefix, tools, level)
        config = _config(base, arch, diff_id, labels, created, environment, facts, prefix)
        ours = {"mediaType": oci.LAYER_GZIP, "digest": digest, "size": size}
        image_manifest = {"schemaVersion": 2, "mediaType": oci.MANIFEST,
                          "config": oci.put_json(blobs, config, oci.CONFIG),
                          "layers": [*(base.layers if base else ()), ours]}
        image_digest = oci.finish_layout(layout, image_manifest, tag)
        if dest is not None:
            copy = ["copy", "--quiet", "--preserve-digests"]
            if plain_http:
                copy.append("--dest-tls-verify=false")
            _skopeo([*copy, f"oci:{layout.name}:{tag}", f"docker://{dest}"], f"pushing the image to {dest}",
                    layout.parent)
        if sif is not None:
            build_sif(layout, sif)
        if output is not None:
            oci.place_layout(layout, output)
    return ImageResult(image_digest, tag, environment, selected.platform.name, len(selected.records), size, epoch,
                       labels, output, dest, selected.left_out, prefix,
                       base is not None, sif, plain_http)
