# shellcheck shell=sh
# flash-attn (Triton backend): undo the activation script.
if [ -n "${_ROCMLOCK_SET_FA_TRITON:-}" ]; then
    unset FLASH_ATTENTION_TRITON_AMD_ENABLE _ROCMLOCK_SET_FA_TRITON
fi
