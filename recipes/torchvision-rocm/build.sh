#!/usr/bin/env bash
# Build torchvision (HIP ops) for one GPU target against the pytorch already in the host prefix.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_require_rocm_components torchvision
rocmlock_max_jobs
rocmlock_ccache

rocmlock_require_rocm_torch torchvision

# A build host has no visible GPU: without FORCE_CUDA=1 setup.py builds the CPU ops only.
export FORCE_CUDA=1
# torch.utils.cpp_extension passes --offload-arch from this list (else: every arch torch was built for).
export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"
# GPU JPEG decoding: nvJPEG is CUDA-only, and rocJPEG is an optional ROCm component not every host
# has; LLaMA-Factory decodes images with Pillow. Neither is linked, so the package needs neither.
export TORCHVISION_USE_NVJPEG=0
export TORCHVISION_USE_ROCJPEG=0
# Video decoding through ffmpeg (video_reader) stays off: LLaMA-Factory reads video with PyAV.
export TORCHVISION_USE_FFMPEG=0
export TORCHVISION_USE_VIDEO_CODEC=0
export TORCHVISION_INCLUDE="${PREFIX}/include"
export TORCHVISION_LIBRARY="${PREFIX}/lib"
# The package version is the release version, not <ver>+<git sha>.
export BUILD_VERSION="${PKG_VERSION}"

echo "rocmlock build: torchvision ${PKG_VERSION} for ${PYTORCH_ROCM_ARCH}, ROCm ${ROCMLOCK_ROCM_VERSION} at ${ROCM_PATH}, MAX_JOBS=${MAX_JOBS}"
python -m pip install . --no-deps --no-build-isolation -vv
