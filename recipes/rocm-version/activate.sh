# shellcheck shell=sh
# rocm-version @ROCM_VERSION@: sourced on activation (conda, mamba, pixi).
# ROCm comes from the host. When ROCM_PATH/HIP_PATH are unset, point them at the host's ROCm (PyTorch
# extensions fail with "hip_runtime.h not found" otherwise): TheRock's Python packages (`rocm-sdk path --root`,
# <site-packages>/_rocm_sdk_devel), else /opt/rocm (AMD's packages), else what `hipconfig --path` says, else /usr
# (a distribution's packages); a TheRock tarball through ROCM_PATH. Never at a path without ROCm: with none found
# nothing is exported, and a ROCM_PATH or HIP_PATH that names no directory is said and not copied into the other.
# With ROCM_PATH set, clang looks for the device libraries in $ROCM_PATH/amdgcn/bitcode only; where they are
# elsewhere (Debian: its clang's resource directory) HIP_DEVICE_LIB_PATH is exported too.
# Warns when the host's ROCm is not the version this environment was built for, or cannot be told.
# Sourced into the user's shell, which may be bash, dash or zsh (conda's PosixActivator and rattler's Bash/Zsh
# source every activate.d/*.sh; tests/test_activation_shells.py): no exit, no set -e, no glob that could match
# nothing here (zsh stops the file with "no matches found"), and it must pass under set -eu.
# The same search as recipes/rocm-build-env.sh and rocmlock doctor.
_rocmlock_var=""
_rocmlock_rocm=""
if [ -n "${ROCM_PATH:-}" ]; then
    _rocmlock_var=ROCM_PATH
    _rocmlock_rocm="${ROCM_PATH}"
elif [ -n "${HIP_PATH:-}" ]; then
    _rocmlock_var=HIP_PATH
    _rocmlock_rocm="${HIP_PATH}"
fi
if [ -n "${_rocmlock_var}" ]; then
    if [ ! -d "${_rocmlock_rocm}" ]; then
        echo "rocm-version: ${_rocmlock_var}=${_rocmlock_rocm} does not exist; nothing exported: point ${_rocmlock_var} at the host's ROCm @ROCM_VERSION@, or unset it" >&2
        _rocmlock_rocm=""
    elif [ "${_rocmlock_var}" = ROCM_PATH ] && [ -n "${HIP_PATH:-}" ]; then
        # hipcc takes HIP's headers from HIP_PATH and everything else from ROCM_PATH: two installs mix.
        if [ ! -d "${HIP_PATH}" ]; then
            echo "rocm-version: HIP_PATH=${HIP_PATH} does not exist (hipcc takes HIP from it): point HIP_PATH at the ROCm in ROCM_PATH=${ROCM_PATH}, or unset it" >&2
        elif [ "$(readlink -f -- "${HIP_PATH}")" != "$(readlink -f -- "${ROCM_PATH}")" ]; then
            echo "rocm-version: HIP_PATH=${HIP_PATH} and ROCM_PATH=${ROCM_PATH} are different ROCm installs (hipcc takes HIP from HIP_PATH, the rest from ROCM_PATH): point both at one" >&2
        fi
    fi
    case "${_rocmlock_rocm}" in
        *[[:space:]]*)
            # ROCm 7.2's hipcc runs clang through `sh -c` unquoted: "sh: 1: /opt/my: not found".
            echo "rocm-version: ${_rocmlock_var}=${_rocmlock_rocm} has a space, which hipcc cannot run clang from: link it from a path without one and point ${_rocmlock_var} there" >&2
            ;;
    esac
else
    # TheRock's Python packages first (`rocm-sdk path --root`: the ROCm this environment's PyTorch runs on).
    if command -v rocm-sdk >/dev/null 2>&1; then
        _rocmlock_rocm="$(rocm-sdk path --root 2>/dev/null | tail -n 1 || true)"
        if [ -z "${_rocmlock_rocm}" ] || [ ! -f "${_rocmlock_rocm}/include/hip/hip_runtime.h" ]; then
            echo "rocm-version: rocm-sdk is on PATH but \`rocm-sdk path --root\` names no ROCm (rocm-sdk-devel missing?): pip install 'rocm[devel]', then rocm-sdk init" >&2
            _rocmlock_rocm=""
        fi
    fi
    if [ -n "${_rocmlock_rocm}" ]; then
        :
    elif [ -f /opt/rocm/include/hip/hip_runtime.h ]; then
        _rocmlock_rocm=/opt/rocm
    else
        _rocmlock_rocm="$(hipconfig --path 2>/dev/null || true)"
        if [ -z "${_rocmlock_rocm}" ] || [ ! -f "${_rocmlock_rocm}/include/hip/hip_runtime.h" ]; then
            _rocmlock_rocm=""
            if [ -f /usr/include/hip/hip_runtime.h ]; then
                _rocmlock_rocm=/usr
            fi
        fi
    fi
    if [ -z "${_rocmlock_rocm}" ]; then
        echo "rocm-version: no ROCm found (ROCM_PATH, HIP_PATH, rocm-sdk path --root, /opt/rocm, hipconfig --path, /usr); this environment needs the host's ROCm @ROCM_VERSION@" >&2
    fi
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${ROCM_PATH:-}" ]; then
    ROCM_PATH="${_rocmlock_rocm}"
    export ROCM_PATH
    _ROCMLOCK_SET_ROCM_PATH=1
    export _ROCMLOCK_SET_ROCM_PATH
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${HIP_PATH:-}" ]; then
    HIP_PATH="${_rocmlock_rocm}"
    export HIP_PATH
    _ROCMLOCK_SET_HIP_PATH=1
    export _ROCMLOCK_SET_HIP_PATH
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${HIP_DEVICE_LIB_PATH:-}" ] && [ ! -f "${ROCM_PATH}/amdgcn/bitcode/ocml.bc" ]; then
    # Search order: <rocm>/lib/llvm/amdgcn/bitcode, the resource directory of the clang hipcc drives
    # (<rocm>/lib/llvm/bin/clang, else hipconfig --hipclangpath), the newest <rocm>/lib/llvm/lib/clang/*, the
    # multiarch directory (Debian 12's 5.x). The globs run in /bin/sh, where one that matches nothing is no error.
    # shellcheck disable=SC2016
    _rocmlock_libs="$(/bin/sh -c '
        rocm=$1 clang="" found=""
        [ -f "$rocm/lib/llvm/amdgcn/bitcode/ocml.bc" ] && { echo "$rocm/lib/llvm/amdgcn/bitcode"; exit 0; }
        if [ -x "$rocm/lib/llvm/bin/clang" ]; then
            clang="$rocm/lib/llvm/bin/clang"
        else
            d="$(hipconfig --hipclangpath 2>/dev/null || true)"
            [ -n "$d" ] && [ -x "$d/clang" ] && clang="$d/clang"
        fi
        if [ -n "$clang" ]; then
            d="$("$clang" -print-resource-dir 2>/dev/null || true)/amdgcn/bitcode"
            [ -f "$d/ocml.bc" ] && { echo "$d"; exit 0; }
        fi
        for d in "$rocm"/lib/llvm/lib/clang/*/amdgcn/bitcode; do
            [ -f "$d/ocml.bc" ] && found="$d"
        done
        [ -n "$found" ] && { echo "$found"; exit 0; }
        for d in "$rocm"/lib/*-linux-gnu/amdgcn/bitcode; do
            [ -f "$d/ocml.bc" ] && { echo "$d"; exit 0; }
        done
        exit 0' sh "${_rocmlock_rocm}")"
    if [ -n "${_rocmlock_libs}" ]; then
        HIP_DEVICE_LIB_PATH="${_rocmlock_libs}"
        export HIP_DEVICE_LIB_PATH
        _ROCMLOCK_SET_HIP_DEVICE_LIB_PATH=1
        export _ROCMLOCK_SET_HIP_DEVICE_LIB_PATH
    fi
fi
# The host's version: .info/version (AMD; its first word, less a -<build> suffix, CRs and blank lines aside),
# else rocm-core's rocm_version.h (Debian has no .info), else `hipconfig --version`, as rocm-build-env.sh reads it.
_rocmlock_host=""
if [ -n "${_rocmlock_rocm}" ] && [ -r "${_rocmlock_rocm}/.info/version" ]; then
    _rocmlock_host="$(awk '{sub(/\r$/, "")} NF {v = $1; sub(/-.*/, "", v); print v; exit}' "${_rocmlock_rocm}/.info/version")"
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${_rocmlock_host}" ] && [ -r "${_rocmlock_rocm}/include/rocm-core/rocm_version.h" ]; then
    _rocmlock_host="$(awk '/#define[ \t]+ROCM_VERSION_(MAJOR|MINOR|PATCH)[ \t]/ {v[$2] = $3}
        END {if (v["ROCM_VERSION_MAJOR"] != "") printf "%s.%s.%s\n", v["ROCM_VERSION_MAJOR"], v["ROCM_VERSION_MINOR"], v["ROCM_VERSION_PATCH"]}' \
        "${_rocmlock_rocm}/include/rocm-core/rocm_version.h")"
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${_rocmlock_host}" ]; then
    # major.minor only: HIP's third number is a build number (Debian 12's and Ubuntu 24.04's 5.x have no rocm-core).
    if [ -x "${_rocmlock_rocm}/bin/hipconfig" ]; then
        _rocmlock_host="$("${_rocmlock_rocm}/bin/hipconfig" --version 2>/dev/null || true)"
    elif command -v hipconfig >/dev/null 2>&1; then
        _rocmlock_host="$(hipconfig --version 2>/dev/null || true)"
    fi
    _rocmlock_host="$(echo "${_rocmlock_host}" | sed -n 's/^\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | tail -n 1)"
fi
if [ -n "${_rocmlock_rocm}" ] && [ -z "${_rocmlock_host}" ]; then
    echo "rocm-version: cannot tell which ROCm is at ${_rocmlock_rocm} (no .info/version, include/rocm-core/rocm_version.h or hipconfig); this environment needs ROCm @ROCM_VERSION@" >&2
fi
if [ -n "${_rocmlock_host}" ]; then
    case "${_rocmlock_host}" in
        "@ROCM_VERSION@" | "@ROCM_VERSION@".*) ;;
        *)
            echo "rocm-version: this environment was built for ROCm @ROCM_VERSION@, but the ROCm at ${_rocmlock_rocm} is ${_rocmlock_host}" >&2
            echo "rocm-version: set ROCM_PATH to a ROCm @ROCM_VERSION@ install, or use the environment built for the host's ROCm" >&2
            ;;
    esac
fi
unset _rocmlock_var _rocmlock_rocm _rocmlock_host _rocmlock_libs
