# shellcheck shell=sh
# rocm-version @ROCM_VERSION@: sourced on activation (conda, mamba, pixi).
# ROCm comes from the host. When ROCM_PATH/HIP_PATH are unset, point them at the host's ROCm (PyTorch
# extensions fail with "hip_runtime.h not found" otherwise): /opt/rocm (AMD's packages), else what
# `hipconfig --path` says, else /usr (a distribution's packages). Never at a path without ROCm: with none found
# nothing is exported. With ROCM_PATH set, clang looks for the device libraries in $ROCM_PATH/amdgcn/bitcode
# only; where they are elsewhere (Debian: its clang's resource directory) HIP_DEVICE_LIB_PATH is exported too.
# Warns when the host's ROCm is not the version this environment was built for. Sourced into the user's
# shell: no exit, no set -e. The same search as recipes/rocm-build-env.sh and rocmlock doctor.
_rocmlock_rocm="${ROCM_PATH:-${HIP_PATH:-}}"
if [ -z "${_rocmlock_rocm}" ]; then
    if [ -f /opt/rocm/include/hip/hip_runtime.h ]; then
        _rocmlock_rocm=/opt/rocm
    else
        _rocmlock_rocm="$(hipconfig --path 2>/dev/null || true)"
        if [ -z "${_rocmlock_rocm}" ] || [ ! -f "${_rocmlock_rocm}/include/hip/hip_runtime.h" ]; then
            _rocmlock_rocm=""
            [ -f /usr/include/hip/hip_runtime.h ] && _rocmlock_rocm=/usr
        fi
    fi
    if [ -z "${_rocmlock_rocm}" ]; then
        echo "rocm-version: no ROCm found (ROCM_PATH, HIP_PATH, /opt/rocm, hipconfig --path, /usr); this environment needs the host's ROCm @ROCM_VERSION@" >&2
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
    _rocmlock_libs=""
    for _rocmlock_d in "${_rocmlock_rocm}/lib/llvm/amdgcn/bitcode" "${_rocmlock_rocm}"/lib/llvm/lib/clang/*/amdgcn/bitcode \
        "${_rocmlock_rocm}"/lib/*-linux-gnu/amdgcn/bitcode; do
        if [ -z "${_rocmlock_libs}" ] && [ -f "${_rocmlock_d}/ocml.bc" ]; then
            _rocmlock_libs="${_rocmlock_d}"
        fi
    done
    if [ -z "${_rocmlock_libs}" ]; then
        _rocmlock_d="$(hipconfig --hipclangpath 2>/dev/null || true)"
        if [ -n "${_rocmlock_d}" ] && [ -x "${_rocmlock_d}/clang" ]; then
            _rocmlock_d="$("${_rocmlock_d}/clang" -print-resource-dir 2>/dev/null || true)/amdgcn/bitcode"
            [ -f "${_rocmlock_d}/ocml.bc" ] && _rocmlock_libs="${_rocmlock_d}"
        fi
    fi
    if [ -n "${_rocmlock_libs}" ]; then
        HIP_DEVICE_LIB_PATH="${_rocmlock_libs}"
        export HIP_DEVICE_LIB_PATH
        _ROCMLOCK_SET_HIP_DEVICE_LIB_PATH=1
        export _ROCMLOCK_SET_HIP_DEVICE_LIB_PATH
    fi
fi
# The host's version: .info/version (AMD), else rocm-core's rocm_version.h (Debian has no .info).
_rocmlock_host=""
if [ -n "${_rocmlock_rocm}" ] && [ -r "${_rocmlock_rocm}/.info/version" ]; then
    _rocmlock_host="$(head -n 1 "${_rocmlock_rocm}/.info/version")"
elif [ -n "${_rocmlock_rocm}" ] && [ -r "${_rocmlock_rocm}/include/rocm-core/rocm_version.h" ]; then
    _rocmlock_host="$(awk '/#define[ \t]+ROCM_VERSION_(MAJOR|MINOR|PATCH)[ \t]/ {v[$2] = $3}
        END {if (v["ROCM_VERSION_MAJOR"] != "") printf "%s.%s.%s\n", v["ROCM_VERSION_MAJOR"], v["ROCM_VERSION_MINOR"], v["ROCM_VERSION_PATCH"]}' \
        "${_rocmlock_rocm}/include/rocm-core/rocm_version.h")"
fi
if [ -n "${_rocmlock_host}" ]; then
    case "${_rocmlock_host}" in
        "@ROCM_VERSION@" | "@ROCM_VERSION@".* | "@ROCM_VERSION@"-*) ;;
        *)
            echo "rocm-version: this environment was built for ROCm @ROCM_VERSION@, but the ROCm at ${_rocmlock_rocm} is ${_rocmlock_host}" >&2
            echo "rocm-version: set ROCM_PATH to a ROCm @ROCM_VERSION@ install, or use the environment built for the host's ROCm" >&2
            ;;
    esac
fi
unset _rocmlock_rocm _rocmlock_host _rocmlock_libs _rocmlock_d
