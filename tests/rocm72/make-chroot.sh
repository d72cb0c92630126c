#!/usr/bin/env bash
# Make, once, the Debian sid + experimental chroot with Debian's ROCm 7.2.4 that tests/test_rocm72*.py run in.
#
#   sudo tests/rocm72/make-chroot.sh          # .ci/run does this; ~10 GB, minutes (README, "ROCm 7.2.4 chroot")
#
# Where: $ROCMLOCK_ROCM72_CHROOT, default /var/cache/rocmlock-rocm72 (the chroot's root directory). It is
# built under <dir>.build and renamed into place when complete, so <dir> is either whole or absent; a
# fingerprint of this script, packages.txt and pyproject.toml in <dir>/etc/rocmlock-rocm72 says which recipe made it, and a
# different one redoes what changed: a changed packages.txt installs its pins into the existing chroot (apt-get
# install; a package dropped from the list stays installed until apt_recipe is bumped, which starts from debootstrap).
# A second run with the same fingerprint returns at once.
#
# What it holds:
#   - the ROCm 7.2.4 packages of packages.txt, pinned by version: when the archive no longer has one of
#     them, apt-get fails ("Version ... was not found") and so does this script;
#   - Debian's layout: ROCm in /usr, no /opt/rocm;
#   - AMD's layout as a second view of the same files: /srv/rocmlock-amd/opt/rocm-7.2.4 (bin/, include/,
#     share/, lib/ with lib/llvm, amdgcn/bitcode, .info/version) and /srv/rocmlock-amd/opt/rocm -> rocm-7.2.4. The
#     tests bind-mount /srv/rocmlock-amd/opt onto /opt in a private mount namespace for the AMD-layout cases,
#     so the Debian-layout cases see no /opt/rocm;
#   - rocmlock installed in /venv (/venv/bin/rocmlock) with its dependencies; the tests bind-mount the
#     checkout's tools/ on /mnt/rocmlock and put it first on PYTHONPATH, so they run the code under test.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
dir="${ROCMLOCK_ROCM72_CHROOT:-/var/cache/rocmlock-rocm72}"
mirror="${ROCMLOCK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rocm_version=7.2.4
stamp_rel=etc/rocmlock-rocm72
packages_rel=etc/rocmlock-rocm72-packages
base_rel=etc/rocmlock-rocm72-base
# Bump when step_base or step_apt change: that starts from debootstrap. A chroot made with the same apt_recipe keeps
# its (slow) base; a changed packages.txt only installs the new pins into it, and the quick steps after are redone.
apt_recipe=1

die() {
    echo "make-chroot: $*" >&2
    exit 1
}

# rocmlock's pyproject.toml too: its dependencies are what /venv holds.
fingerprint="$(cat "${here}/make-chroot.sh" "${here}/packages.txt" "${repo}/pyproject.toml" | sha256sum | cut -c1-16)"
apt_fp="$( (echo "${apt_recipe}"; cat "${here}/packages.txt") | sha256sum | cut -c1-16)"
base_fp="apt_recipe=${apt_recipe}"
if [ -f "${dir}/${stamp_rel}" ] && [ "$(cat "${dir}/${stamp_rel}")" = "${fingerprint}" ]; then
    echo "make-chroot: ${dir} is ready (${fingerprint})"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount); run it with sudo"
if ! command -v chroot >/dev/null || ! command -v unshare >/dev/null; then
    die "needs chroot and unshare (coreutils, util-linux)"
fi
if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "needs debootstrap (no apt-get here to install it)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

build="${dir}.build"
root="${build}/root"
mkdir -p "${build}"
exec 9>"${build}/lock"
flock 9
# Another run may have finished it while this one waited for the lock.
if [ -f "${dir}/${stamp_rel}" ] && [ "$(cat "${dir}/${stamp_rel}")" = "${fingerprint}" ]; then
    echo "make-chroot: ${dir} is ready (${fingerprint})"
    exit 0
fi

# A step is done when <build>/<step>.done holds its fingerprint ($2); a stale build directory starts over.
done_step() { [ -f "${build}/$1.done" ] && [ "$(cat "${build}/$1.done")" = "$2" ]; }
mark() { echo "$2" >"${build}/$1.done"; }
timed() {
    local start=$SECONDS
    "$@"
    echo "make-chroot: $1 took $((SECONDS - start)) s"
}

# Run a command in the chroot with /proc mounted in a private mount namespace (gone when it exits).
in_root() {
    # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
    unshare --mount --propagation private -- sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' \
        "${root}" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}

step_base() {
    rm -rf "${root}"
    debootstrap --variant=minbase --include=ca-certificates sid "${root}" "${mirror}" >"${build}/debootstrap.log" 2>&1 \
        || die "debootstrap failed; see ${build}/debootstrap.log"
}

step_apt() {
    printf 'deb %s sid main\ndeb %s experimental main\n' "${mirror}" "${mirror}" >"${root}/etc/apt/sources.list"
    # The mirror serves snapshot Release files past their Valid-Until.
    echo 'Acquire::Check-Valid-Until "false";' >"${root}/etc/apt/apt.conf.d/99rocmlock"
    local pins
    pins="$(grep -v -e '^#' -e '^$' "${here}/packages.txt" | tr '\n' ' ')"
    in_root apt-get update -qq
    # shellcheck disable=SC2086  # one word per pinned package
    in_root apt-get install -y -q --no-install-recommends -t experimental ${pins} >"${build}/apt.log" 2>&1 \
        || die "apt-get install of the pinned packages failed (has the archive moved on?); see ${build}/apt.log"
    in_root apt-get clean
}

# AMD's layout, made of symlinks into Debian's files: what /opt/rocm-X.Y.Z looks like to doctor, hipcc and
# CMake (bin/, include/, lib/, lib/llvm, amdgcn/bitcode, .info/version).
step_amd_view() {
    local opt="${root}/srv/rocmlock-amd/opt" f
    local view="${opt}/rocm-${rocm_version}"
    rm -rf "${root}/srv/rocmlock-amd"
    mkdir -p "${view}/bin" "${view}/lib" "${view}/.info" "${view}/amdgcn" "${root}/mnt/rocmlock" "${root}/mnt/work"
    echo "${rocm_version}" >"${view}/.info/version"
    ln -s /usr/include "${view}/include"
    ln -s /usr/share "${view}/share"
    ln -s /usr/lib/llvm-22 "${view}/lib/llvm"
    # Debian's hipcc (the only one here) runs <rocm>/lib/llvm-22/bin/clang++ where AMD's runs lib/llvm/bin.
    ln -s /usr/lib/llvm-22 "${view}/lib/llvm-22"
    ln -s /usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode "${view}/amdgcn/bitcode"
    ln -s /usr/lib/x86_64-linux-gnu/cmake "${view}/lib/cmake"
    # Every program and library file the ROCm packages (and what they pulled in) put in /usr/bin and the
    # multiarch lib directory; dpkg's own file lists say which.
    local rocm_pkgs
    # shellcheck disable=SC2016  # a dpkg-query format, not a shell expansion
    rocm_pkgs="$(in_root dpkg-query -W -f '${binary:Package}\n' \
        | grep -E '^(hip|libamdhip|libhip|libroc|libhsa|libamd-comgr|rocm|amd-smi)' | tr '\n' ' ')"
    # shellcheck disable=SC2086  # one word per package / file
    for f in $(in_root dpkg-query -L ${rocm_pkgs}); do
        case "${f}" in
            /usr/bin/?*) [ -f "${root}${f}" ] || [ -L "${root}${f}" ] && ln -sf "${f}" "${view}/bin/" ;;
            /usr/lib/x86_64-linux-gnu/lib*) [ -f "${root}${f}" ] || [ -L "${root}${f}" ] && ln -sf "${f}" "${view}/lib/" ;;
        esac
    done
    ln -s "rocm-${rocm_version}" "${opt}/rocm"
    # Checked inside the chroot: the links are absolute paths of the chroot.
    local in_view=/srv/rocmlock-amd/opt/rocm
    if ! in_root test -x "${in_view}/bin/hipcc" -a -f "${in_view}/include/hip/hip_runtime.h" \
        -a -d "${in_view}/amdgcn/bitcode/" -a -d "${in_view}/lib/llvm/bin"; then
        die "the AMD-layout view at ${view} is incomplete (no bin/hipcc, include/hip or amdgcn/bitcode)"
    fi
}

# rocmlock and its dependencies in /venv, from this checkout; pip reaches PyPI with the host's pip
# configuration and CA bundle, which are removed again afterwards (a pip.conf may hold credentials).
step_venv() {
    local src="${root}/tmp/rocmlock-src"
    rm -rf "${root}/venv" "${src}"
    mkdir -p "${src}"
    cp -r "${repo}/pyproject.toml" "${repo}/README.md" "${repo}/tools" "${src}/"
    # Not what the host's own installs leave in tools/ (.ci/run runs this script while it pip-installs the
    # checkout into its venv): the chroot's pip builds from the sources alone.
    find "${src}/tools" \( -name '*.egg-info' -o -name __pycache__ \) -prune -exec rm -rf {} +
    [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "${root}/etc/ssl/certs/"
    [ -f /etc/pip.conf ] && cp /etc/pip.conf "${root}/etc/pip.conf"
    in_root python3 -m venv /venv
    local rc=0
    in_root /venv/bin/python -m pip install -q --no-cache-dir /tmp/rocmlock-src >"${build}/pip.log" 2>&1 || rc=$?
    rm -rf "${root}/etc/pip.conf" "${src}"
    [ "${rc}" -eq 0 ] || die "pip install of rocmlock into ${root}/venv failed; see ${build}/pip.log"
    in_root /venv/bin/rocmlock --help >/dev/null || die "/venv/bin/rocmlock does not run in the chroot"
}

# The base a chroot was made on: its stamp, or for one made before the stamp existed (it has the packages stamp),
# apt_recipe=1, the only recipe there was then.
base_of() {
    if [ -f "$1/${base_rel}" ]; then
        cat "$1/${base_rel}"
    elif [ -f "$1/${packages_rel}" ]; then
        echo "apt_recipe=1"
    fi
}
# A chroot made by an older script or package list on the same base: keep the base (and the packages when the
# list is the same), redo the rest; step_apt then installs a changed list's pins into it.
if [ -d "${dir}" ] && [ ! -d "${root}" ] && [ "$(base_of "${dir}")" = "${base_fp}" ]; then
    mv "${dir}" "${root}"
    rm -f "${build}"/*.done
    mark base "${base_fp}"
    if [ "$(cat "${root}/${packages_rel}" 2>/dev/null)" = "${apt_fp}" ]; then
        mark apt "${apt_fp}"
    fi
fi
done_step base "${base_fp}" || { rm -f "${build}"/*.done; timed step_base; mark base "${base_fp}"; }
echo "${base_fp}" >"${root}/${base_rel}"
if ! done_step apt "${apt_fp}"; then
    timed step_apt
    echo "${apt_fp}" >"${root}/${packages_rel}"
    mark apt "${apt_fp}"
fi
done_step amd_view "${fingerprint}" || { timed step_amd_view; mark amd_view "${fingerprint}"; }
done_step venv "${fingerprint}" || { timed step_venv; mark venv "${fingerprint}"; }

echo "${fingerprint}" >"${root}/${stamp_rel}"
rm -rf "${dir}"
mv "${root}" "${dir}"
rm -f "${build}"/*.done "${build}/lock"
echo "make-chroot: ${dir} is ready (${fingerprint}, $(du -sh "${dir}" | cut -f1))"
