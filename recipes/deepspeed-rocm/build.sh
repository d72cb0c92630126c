#!/usr/bin/env bash
# Build DeepSpeed with its ROCm training ops compiled for one GPU target.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_require_rocm_components deepspeed
rocmlock_max_jobs
rocmlock_ccache

: "${ROCMLOCK_WAVEFRONT_SIZE:?recipe.yaml sets ROCMLOCK_WAVEFRONT_SIZE}"
: "${ROCMLOCK_DS_BUILD_OPS:?recipe.yaml sets ROCMLOCK_DS_BUILD_OPS}"

# On a build host without a visible GPU, DeepSpeed would pick its CPU accelerator and build CPU ops.
export DS_ACCELERATOR=cuda
export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"
# Nothing but the listed ops: DS_BUILD_OPS=1 would also try ops that only build for CUDA.
export DS_BUILD_OPS=0
for var in ${ROCMLOCK_DS_BUILD_OPS}; do
    export "${var}=1"
done
export DS_BUILD_SPARSE_ATTN=0 DS_BUILD_GDS=0 DS_BUILD_EVOFORMER_ATTN=0 DS_BUILD_CUTLASS_OPS=0 DS_BUILD_FP_QUANTIZER=0
# libaio from the host prefix, for async_io's compile-and-link probe.
export CFLAGS="${CFLAGS:-} -I${PREFIX}/include"
export LDFLAGS="${LDFLAGS:-} -L${PREFIX}/lib"

echo "rocmlock build: deepspeed ${PKG_VERSION} for ${ROCMLOCK_GPU_TARGET} (wavefront ${ROCMLOCK_WAVEFRONT_SIZE}), ROCm ${ROCMLOCK_ROCM_VERSION}, MAX_JOBS=${MAX_JOBS}"
# setup.py would take the GPU target and wavefront size from rocminfo: the build host's GPU (or none:
# then wavefront 32, wrong for CDNA). setup_for_target.py pins both to this variant's target, and fails
# when a requested op was skipped (setup.py itself only warns).
python "${RECIPE_DIR}/setup_for_target.py" bdist_wheel --dist-dir rocmlock-dist
python -m pip install rocmlock-dist/deepspeed-*.whl --no-deps --no-build-isolation -vv
