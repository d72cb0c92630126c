# shellcheck shell=sh
# rocm-version: undo what the activation script set (and only that).
if [ -n "${_ROCMLOCK_SET_ROCM_PATH:-}" ]; then
    unset ROCM_PATH _ROCMLOCK_SET_ROCM_PATH
fi
if [ -n "${_ROCMLOCK_SET_HIP_PATH:-}" ]; then
    unset HIP_PATH _ROCMLOCK_SET_HIP_PATH
fi
if [ -n "${_ROCMLOCK_SET_HIP_DEVICE_LIB_PATH:-}" ]; then
    unset HIP_DEVICE_LIB_PATH _ROCMLOCK_SET_HIP_DEVICE_LIB_PATH
fi
