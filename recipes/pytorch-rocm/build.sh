#!/usr/bin/env bash
# Build PyTorch from source for one ROCm version and one GPU target (recipe.yaml sets ROCMLOCK_*).
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_require_rocm_components pytorch
rocmlock_max_jobs
rocmlock_ccache

export USE_ROCM=1
export USE_CUDA=0
export BUILD_TEST=0
export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"
# AOTriton (flash and memory-efficient SDPA) only where the target has kernels (gpu_targets.toml `aotriton`).
export USE_FLASH_ATTENTION="${ROCMLOCK_AOTRITON}"
export USE_MEM_EFF_ATTENTION="${ROCMLOCK_AOTRITON}"
# AOTriton's runtime and kernel images: PyTorch's cmake/External/aotriton.cmake downloads them from GitHub at
# configure time (hash-checked against its own list). For an offline build, extract that release on a
# connected machine and pass its directory: AOTRITON_INSTALLED_PREFIX (aotriton.cmake then installs from it).
if [ "${ROCMLOCK_AOTRITON}" = 1 ] && [ -n "${AOTRITON_INSTALLED_PREFIX:-}" ]; then
    [ -f "${AOTRITON_INSTALLED_PREFIX}/lib/libaotriton_v2.so" ] \
        || rocmlock_die "AOTRITON_INSTALLED_PREFIX=${AOTRITON_INSTALLED_PREFIX} has no lib/libaotriton_v2.so; extract the AOTriton release PyTorch ${PKG_VERSION}'s cmake/External/aotriton.cmake names (runtime and the ${ROCMLOCK_GPU_TARGET} kernel image) there"
    export AOTRITON_INSTALLED_PREFIX
elif [ "${ROCMLOCK_AOTRITON}" = 1 ]; then
    echo "rocmlock build: AOTriton will be downloaded at configure time (set AOTRITON_INSTALLED_PREFIX to build offline)" >&2
fi
export USE_NCCL=1          # RCCL from the host ROCm
export USE_DISTRIBUTED=1
export USE_MKLDNN=1
export BLAS=OpenBLAS
export USE_KINETO=1
export CMAKE_PREFIX_PATH="${PREFIX}"
# The package version is the release version, not 2.x.ya0+git<sha>.
export PYTORCH_BUILD_VERSION="${PKG_VERSION}"
export PYTORCH_BUILD_NUMBER=0
# GCC 12 turns these warnings into errors in third_party code (seen by TheRock's builds).
export CFLAGS="${CFLAGS:-} -Wno-error=maybe-uninitialized -Wno-error=uninitialized -Wno-error=restrict"
export CXXFLAGS="${CXXFLAGS:-} -Wno-error=maybe-uninitialized -Wno-error=uninitialized -Wno-error=restrict"

echo "rocmlock build: pytorch ${PKG_VERSION} for ${PYTORCH_ROCM_ARCH}, ROCm ${ROCMLOCK_ROCM_VERSION} at ${ROCM_PATH}, MAX_JOBS=${MAX_JOBS}, AOTriton=${ROCMLOCK_AOTRITON}"

# HIPIFY the CUDA sources first; without it the build fails with "cuda.h not found".
python tools/amd_build/build_amd.py
python -m pip install . --no-deps --no-build-isolation -vv
