"""The commands ``rocmlock image`` prints after a build: how to run what was written, with the tools that can.

An OCI layout directory is run by podman (``oci:DIR:TAG``) and converted by apptainer (``apptainer build SIF
oci:DIR``, a layout of one image only); docker
cannot read one, so it is loaded into docker's daemon with ``skopeo copy ... docker-daemon:NAME:TAG`` first. A
pushed image is run by name. GPU device flags are printed only where this machine has the devices (``/dev/kfd``):
elsewhere ``--device=/dev/kfd`` fails before the check starts. An image without a base cannot run: the hint says so
and how to use it. tests/test_image_run.py executes every line printed here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from rocmlock.image import ociref
from rocmlock.image.builder import ImageResult
from rocmlock.image.files import CHECK, ENTRYPOINT, TOOL_DIR

# podman 4 names an image read from oci:DIR after DIR's path, which must then be a reference's path
# (distribution/reference: lowercase components, separators . _ __ -); otherwise `podman run oci:DIR` fails with
# "invalid reference format", and the layout is copied into podman's storage under a name first.
_REF_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")


def _podman_can_name(path: Path) -> bool:
    return all(_REF_COMPONENT.fullmatch(part) for part in path.parts[1:])


def _one_image(layout: Path) -> bool:
    """Whether the layout's index names one manifest: ``apptainer build SIF oci:DIR`` takes no tag (1.4.5: the
    tag is read as part of the path), so it can convert only a layout of one image (rocmlock.image.sif)."""
    try:
        return len(json.loads((layout / "index.json").read_bytes()).get("manifests") or []) == 1
    except (OSError, ValueError, AttributeError):
        return False


def run_hints(result: ImageResult, dev: Path = Path("/dev")) -> list[str]:
    """The lines to print (each command one line, runnable as printed)."""
    name = f"{result.environment}:{result.tag}"
    if not result.has_base:
        where = shlex.quote(f"oci:{result.output}:{result.tag}" if result.output else f"docker://{result.pushed}")
        note = "note: this image has no base (--no-base): no shell, no C library, it cannot run on its own; " \
            "it is a layer for an image of yours:"
        return [note,
                f"  skopeo copy {where} containers-storage:localhost/{name}",
                "  then build a Containerfile (podman build, buildah) whose FROM has /bin/sh and the lock's glibc:",
                "    FROM docker.io/library/debian:12",
                f"    COPY --from=localhost/{name} {result.prefix} {result.prefix}",
                f"    COPY --from=localhost/{name} {TOOL_DIR} {TOOL_DIR}",
                f'    ENTRYPOINT ["{ENTRYPOINT}"]',
                f'    CMD ["{CHECK}"]']
    gpu = (dev / "kfd").exists()
    podman_gpu = "--device=/dev/kfd --device=/dev/dri --group-add keep-groups " if gpu else ""
    docker_gpu = "--device=/dev/kfd --device=/dev/dri --group-add video --group-add render " if gpu else ""
    rocm = "--rocm " if gpu else ""
    sif = f"{result.environment}.sif"
    lines = ["run the check (exit 0: the environment can use the GPU the container sees), with:"]
    if result.sif is not None:
        lines.append(f"  apptainer exec {rocm}{shlex.quote(str(result.sif))} {CHECK}")
    if result.output is not None:
        layout = shlex.quote(f"oci:{result.output}:{result.tag}")
        if _podman_can_name(result.output):
            lines.append(f"  podman run --rm {podman_gpu}{layout} {CHECK}")
        else:
            lines.append(f"  skopeo copy {layout} containers-storage:localhost/{name} && "
                         f"podman run --rm {podman_gpu}localhost/{name} {CHECK}")
        lines.append(f"  skopeo copy {layout} docker-daemon:{name} && docker run --rm {docker_gpu}{name} {CHECK}")
        if result.sif is None and _one_image(result.output):
            lines.append(f"  apptainer build {sif} {shlex.quote(f'oci:{result.output}')} && "
                         f"apptainer exec {rocm}{sif} {CHECK}")
        elif result.sif is None:
            lines.append("  apptainer: build again with --sif FILE (apptainer 1.4 reads only a layout's sole image, "
                         f"and {result.output} holds several)")
    elif result.pushed is not None:
        ref = shlex.quote(str(result.pushed))
        # Pushed without TLS verification: podman must be told (--tls-verify=false), apptainer too (--nohttps);
        # docker reads 127.0.0.0/8 as insecure by itself, any other such registry only from its daemon's
        # insecure-registries (dockerd's documentation).
        podman_tls = "--tls-verify=false " if result.plain_http else ""
        nohttps = "--nohttps " if result.plain_http else ""
        lines.append(f"  podman run --rm {podman_tls}{podman_gpu}{ref} {CHECK}")
        docker = f"  docker run --rm {docker_gpu}{ref} {CHECK}"
        if result.plain_http and not ociref.parse(result.pushed, "--push").loopback:
            docker += "   (after adding the registry to dockerd's insecure-registries)"
        lines.append(docker)
        if result.sif is None:
            lines.append(f"  apptainer build {nohttps}{sif} docker://{result.pushed} && apptainer exec {rocm}{sif} "
                         f"{CHECK}")
    if not gpu:
        lines.append("  (no /dev/kfd on this machine, so no GPU flags: here the check fails at host.devices, as it "
                     "does outside a container; on a GPU node add --device=/dev/kfd --device=/dev/dri)")
    return lines
