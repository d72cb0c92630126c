#!/usr/bin/env bash
# Build flash-attention for one GPU target against the pytorch already in the host prefix.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_max_jobs
rocmlock_ccache

# flash-attn's Triton backend knows RDNA GPUs by name: flash_attn_triton_amd/utils.py is_rdna() lists gfx1030,
# gfx1100-gfx1102, gfx1200 and gfx1201 (2.8.3). On another RDNA target (gfx1151) FLASH_ATTENTION_TRITON_AMD_AUTOTUNE=1
# fails at import with "Unknown Device Type" (fwd_prefill.py get_autotune_configs). The kernels themselves compile
# for it (tests/test_triton_aot.py), so the target is added to that list; the build stops if the line moved.
rocmlock_flash_attn_rdna() {
    local gfx="$1" utils="flash_attn/flash_attn_triton_amd/utils.py" line
    case "${gfx}" in gfx1[0-9]*) ;; *) return 0 ;; esac
    line="$(sed -n '/^def is_rdna():$/{n;p;}' "${utils}")"
    case "${line}" in
        *'get_arch() in ('*) ;;
        *) rocmlock_die "${utils}: is_rdna() no longer reads 'get_arch() in (...)'; review rocmlock_flash_attn_rdna in build.sh" ;;
    esac
    case "${line}" in *"\"${gfx}\""*) return 0 ;; esac
    sed -i '/^def is_rdna():$/{n;s/get_arch() in (/get_arch() in ("'"${gfx}"'", /;}' "${utils}"
    grep -q "get_arch() in (\"${gfx}\", " "${utils}" || rocmlock_die "${utils}: could not add ${gfx} to is_rdna()"
    echo "rocmlock build: added ${gfx} to flash-attn's RDNA targets (${utils} is_rdna)"
}

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
        rocmlock_flash_attn_rdna "${ROCMLOCK_GPU_TARGET}"
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
