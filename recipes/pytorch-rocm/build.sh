#!/usr/bin/env bash
# Build PyTorch from source for one ROCm version and one GPU target (recipe.yaml sets ROCMLOCK_*).
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_require_rocm_components pytorch
# MAGMA only when ROCMLOCK_MAGMA_HOME names one built for this ROCm (an absolute path: this script runs in
# rattler-build's work directory); USE_MAGMA=0 otherwise (rocm-build-env.sh).
rocmlock_magma
rocmlock_max_jobs
rocmlock_ccache

# A git source (a PyTorch pinned by commit, recipe.yaml) needs its submodules; the release asset has them. Stop here,
# naming the fix, rather than deep in CMake.
for submodule in third_party/pybind11 third_party/fmt; do
    [ -f "${submodule}/CMakeLists.txt" ] \
        || rocmlock_die "PyTorch's git submodule ${submodule} is missing: run \`git submodule update --init --recursive\` in the source, or pin the release asset (pytorch_sha256)"
done

export USE_ROCM=1
export USE_CUDA=0
export BUILD_TEST=0
export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"
# AOTriton (flash and memory-efficient SDPA) only where the target has kernels (gpu_targets.toml `aotriton`).
export USE_FLASH_ATTENTION="${ROCMLOCK_AOTRITON}"
export USE_MEM_EFF_ATTENTION="${ROCMLOCK_AOTRITON}"
# AOTriton's runtime and kernel images. PyTorch's cmake/External/aotriton.cmake downloads them from GitHub at
# configure time unless the environment names an installed AOTriton: its `if(DEFINED ENV{AOTRITON_INSTALLED_PREFIX})`
# branch installs that prefix's lib/ and include/ into torch/ and links its lib/libaotriton_v2.so, downloading
# nothing (lines 242-249 of the 0.11.2b-era file, the branch before `elseif(DEFINED ENV{AOTRITON_INSTALL_FROM_SOURCE})`).
# The recipe pins the runtime and this target's image as sources (tools/rocmlock/data/aotriton.toml, through
# variants.yaml's generated keys); they
# become that prefix here. A prefix the build host passes overrides them (the recipe then pins none).
rocmlock_aotriton_from_sources() {
    local cmake_file=cmake/External/aotriton.cmake sha image="${ROCMLOCK_AOTRITON_IMAGE:?}"
    # The pins must be what this PyTorch's own aotriton.cmake names (the release and both sha256s); the table was
    # not checked against every PyTorch release, this file is.
    grep -qF "set(__AOTRITON_VER \"${ROCMLOCK_AOTRITON_VERSION:?}\")" "${cmake_file}" \
        || rocmlock_die "PyTorch ${PKG_VERSION}'s ${cmake_file} does not set __AOTRITON_VER \"${ROCMLOCK_AOTRITON_VERSION}\": update tools/rocmlock/data/aotriton.toml from that file (version, runtime and image sha256s)"
    for sha in ${ROCMLOCK_AOTRITON_SHA256S:?}; do
        grep -qF "\"${sha}\"" "${cmake_file}" \
            || rocmlock_die "PyTorch ${PKG_VERSION}'s ${cmake_file} does not list sha256 ${sha} (AOTriton ${ROCMLOCK_AOTRITON_VERSION}, ROCm ${ROCMLOCK_ROCM_VERSION}, ${image}): update tools/rocmlock/data/aotriton.toml from that file"
    done
    [ -f aotriton/runtime/lib/libaotriton_v2.so ] \
        || rocmlock_die "the AOTriton runtime source has no lib/libaotriton_v2.so (aotriton/runtime); the release layout changed"
    [ -d "aotriton/images/lib/aotriton.images/${image}" ] \
        || rocmlock_die "the AOTriton image source has no lib/aotriton.images/${image} (aotriton/images); the release layout changed"
    # One prefix, laid out as aotriton.cmake's download branch leaves its install dir: the runtime with the
    # image under lib/aotriton.images/ (where libaotriton_v2.so looks for it).
    mkdir -p aotriton/runtime/lib/aotriton.images
    rm -rf "aotriton/runtime/lib/aotriton.images/${image}"
    mv "aotriton/images/lib/aotriton.images/${image}" aotriton/runtime/lib/aotriton.images/
    AOTRITON_INSTALLED_PREFIX="${PWD}/aotriton/runtime"
    export AOTRITON_INSTALLED_PREFIX
}
if [ "${ROCMLOCK_AOTRITON}" = 1 ] && [ -n "${AOTRITON_INSTALLED_PREFIX:-}" ]; then
    [ -f "${AOTRITON_INSTALLED_PREFIX}/lib/libaotriton_v2.so" ] \
        || rocmlock_die "AOTRITON_INSTALLED_PREFIX=${AOTRITON_INSTALLED_PREFIX} has no lib/libaotriton_v2.so; extract the AOTriton release PyTorch ${PKG_VERSION}'s cmake/External/aotriton.cmake names (runtime and the ${ROCMLOCK_GPU_TARGET} kernel image) there"
    export AOTRITON_INSTALLED_PREFIX
elif [ "${ROCMLOCK_AOTRITON}" = 1 ] && [ -n "${ROCMLOCK_AOTRITON_PINNED:-}" ]; then
    rocmlock_aotriton_from_sources
    echo "rocmlock build: AOTriton ${ROCMLOCK_AOTRITON_VERSION} (${ROCMLOCK_AOTRITON_IMAGE}) from the pinned sources" >&2
elif [ "${ROCMLOCK_AOTRITON}" = 1 ] && [ -z "${ROCMLOCK_AOTRITON_IMAGE:-}" ]; then
    # variants.yaml gives the target kernels (gpu_aotriton) but no kernel image (gpu_aotriton_image): a hand-edited
    # or stale copy (rocmlock plan refuses it; a hand-run rattler-build or conda-build gets here). Not "no prebuilt
    # runtime": that is the ROCm.
    rocmlock_die "recipes/variants.yaml: gpu_aotriton_image is empty for ${ROCMLOCK_GPU_TARGET}, but gpu_aotriton = 1 (AOTriton kernels): add the kernel image PyTorch ${PKG_VERSION}'s cmake/External/aotriton.cmake picks for it to [targets] of tools/rocmlock/data/aotriton.toml (or set aotriton = false in gpu_targets.toml), then run \`rocmlock variants --write\`; or export AOTRITON_INSTALLED_PREFIX"
elif [ "${ROCMLOCK_AOTRITON}" = 1 ]; then
    echo "rocmlock build: AOTriton will be downloaded at configure time (no prebuilt runtime pinned for ROCm ${ROCMLOCK_ROCM_VERSION}; set AOTRITON_INSTALLED_PREFIX to build offline)" >&2
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

echo "rocmlock build: pytorch ${PKG_VERSION} for ${PYTORCH_ROCM_ARCH}, ROCm ${ROCMLOCK_ROCM_VERSION} at ${ROCM_PATH}, MAX_JOBS=${MAX_JOBS}, AOTriton=${ROCMLOCK_AOTRITON}, MAGMA=${USE_MAGMA}"

# HIPIFY the CUDA sources first; without it the build fails with "cuda.h not found".
python tools/amd_build/build_amd.py
python -m pip install . --no-deps --no-build-isolation -vv
rocmlock_bundle_magma
