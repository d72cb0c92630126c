# shellcheck shell=sh
# rocm-version @ROCM_VERSION@: sourced on activation (conda, mamba, pixi).
# ROCm comes from the host. Point ROCM_PATH/HIP_PATH at it when they are unset (PyTorch
# extensions fail with "hip_runtime.h not found" otherwise) and warn when the host's ROCm is
# not the version this environment was built for. Sourced into the user's shell: no exit, no set -e.
_rocmlock_rocm="${ROCM_PATH:-${HIP_PATH:-/opt/rocm}}"
if [ -z "${ROCM_PATH:-}" ]; then
    ROCM_PATH="${_rocmlock_rocm}"
    export ROCM_PATH
    _ROCMLOCK_SET_ROCM_PATH=1
    export _ROCMLOCK_SET_ROCM_PATH
fi
if [ -z "${HIP_PATH:-}" ]; then
    HIP_PATH="${_rocmlock_rocm}"
    export HIP_PATH
    _ROCMLOCK_SET_HIP_PATH=1
    export _ROCMLOCK_SET_HIP_PATH
fi
if [ -r "${_rocmlock_rocm}/.info/version" ]; then
    _rocmlock_host="$(head -n 1 "${_rocmlock_rocm}/.info/version")"
    case "${_rocmlock_host}" in
        "@ROCM_VERSION@" | "@ROCM_VERSION@".* | "@ROCM_VERSION@"-*) ;;
        *)
            echo "rocm-version: this environment was built for ROCm @ROCM_VERSION@, but ${_rocmlock_rocm}/.info/version says ${_rocmlock_host}" >&2
            echo "rocm-version: set ROCM_PATH to a ROCm @ROCM_VERSION@ install, or use the environment built for the host's ROCm" >&2
            ;;
    esac
fi
unset _rocmlock_rocm _rocmlock_host
