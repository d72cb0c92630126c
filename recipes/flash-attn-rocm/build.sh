#!/usr/bin/env bash
# Build flash-attention for one GPU target against the pytorch already in the host prefix.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_max_jobs
rocmlock_ccache

: "${ROCMLOCK_FLASH_ATTN_BACKEND:?recipe.yaml sets ROCMLOCK_FLASH_ATTN_BACKEND}"
# Never download a prebuilt wheel; never compile for "native" (needs a visible GPU).
export FLASH_ATTENTION_FORCE_BUILD=TRUE
export GPU_ARCHS="${ROCMLOCK_GPU_TARGET}"
export BUILD_TARGET=rocm

case "${ROCMLOCK_FLASH_ATTN_BACKEND}" in
    ck)
        # The CK extension includes torch's HIP headers, which include hipBLAS, hipBLASLt, hipSPARSE and hipSOLVER
        # headers from the host ROCm (tools/rocmlock/data/rocm_components.toml); the Triton backend compiles nothing.
        rocmlock_require_rocm_components flash-attn
        export FLASH_ATTENTION_TRITON_AMD_ENABLE=FALSE
        ;;
    triton)
        # Triton backend: no CK compile; flash_attn also reads this variable at import time,
        # so the package sets it on activation.
        export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE
        mkdir -p "${PREFIX}/etc/conda/activate.d" "${PREFIX}/etc/conda/deactivate.d"
        cp "${RECIPE_DIR}/activate-triton.sh" "${PREFIX}/etc/conda/activate.d/flash-attn_activate.sh"
        cp "${RECIPE_DIR}/deactivate-triton.sh" "${PREFIX}/etc/conda/deactivate.d/flash-attn_deactivate.sh"
        ;;
    *)
        rocmlock_die "unknown flash-attn backend '${ROCMLOCK_FLASH_ATTN_BACKEND}' (expected ck or triton)"
        ;;
esac

echo "rocmlock build: flash-attn ${PKG_VERSION} (${ROCMLOCK_FLASH_ATTN_BACKEND}) for ${GPU_ARCHS}, ROCm ${ROCMLOCK_ROCM_VERSION}, MAX_JOBS=${MAX_JOBS}"
python -m pip install . --no-deps --no-build-isolation -vv
