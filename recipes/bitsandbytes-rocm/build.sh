#!/usr/bin/env bash
# Build bitsandbytes' HIP backend for one GPU target, then install the Python package around it.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_require_rocm_components bitsandbytes
rocmlock_max_jobs
rocmlock_ccache

# bitsandbytes picks its native library by torch.version.hip (libbitsandbytes_rocm<XY>.so); name it
# after the ROCm version of this variant, which is the one our pytorch was built with, even when the
# host's hipconfig reports a patch release.
rocm_short="${ROCMLOCK_ROCM_VERSION//./}"
echo "rocmlock build: bitsandbytes ${PKG_VERSION} (hip) for ${ROCMLOCK_GPU_TARGET}, ROCm ${ROCMLOCK_ROCM_VERSION}, MAX_JOBS=${MAX_JOBS}"
# BNB_ROCM_ARCH: one target, never the default list (which would also try to autodetect a GPU).
cmake -S . -B build -G Ninja \
    -DCOMPUTE_BACKEND=hip \
    -DBNB_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}" \
    -DROCM_VERSION="${rocm_short}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_HIP_COMPILER_ROCM_ROOT="${ROCM_PATH}" \
    -DCMAKE_PREFIX_PATH="${ROCM_PATH}"
cmake --build build --parallel "${MAX_JOBS}"
lib="bitsandbytes/libbitsandbytes_rocm${rocm_short}.so"
[ -f "${lib}" ] || rocmlock_die "CMake did not produce ${lib}"

# The native library is built; keep pip from running CMake a second time.
BNB_SKIP_CMAKE=1 python -m pip install . --no-deps --no-build-isolation -vv
