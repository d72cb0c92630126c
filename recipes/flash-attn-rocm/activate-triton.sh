# shellcheck shell=sh
# flash-attn (Triton backend): flash_attn picks its AMD Triton backend at import time from this variable.
if [ -z "${FLASH_ATTENTION_TRITON_AMD_ENABLE:-}" ]; then
    FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE
    export FLASH_ATTENTION_TRITON_AMD_ENABLE
    _ROCMLOCK_SET_FA_TRITON=1
    export _ROCMLOCK_SET_FA_TRITON
fi
