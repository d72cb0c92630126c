#!/usr/bin/env bash
# Build torchaudio for one GPU target against the pytorch already in the host prefix.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
rocmlock_rocm_env
rocmlock_max_jobs
rocmlock_ccache

rocmlock_require_rocm_torch torchaudio

# Say ROCm explicitly: the defaults probe torch.backends.cuda.is_built(), which a build must not guess. Upstream
# compiles GPU kernels only for USE_CUDA builds (pytorch/audio#4180): this build is CPU kernels against the ROCm
# torch, so no host ROCm component (hipCUB, rocPRIM) is required.
export USE_ROCM=1
export USE_CUDA=0
# The CUDA CTC decoder is CUDA-only; RNN-T loss and forced alignment are built with their CPU kernels.
export BUILD_CUDA_CTC_DECODER=0
export BUILD_RNNT=1
export BUILD_ALIGN=1
export USE_OPENMP=1
export BUILD_CPP_TEST=0
export PYTORCH_ROCM_ARCH="${ROCMLOCK_GPU_TARGET}"
# The package version is the release version, not <ver>+<git sha>.
export BUILD_VERSION="${PKG_VERSION}"

echo "rocmlock build: torchaudio ${PKG_VERSION} for ${PYTORCH_ROCM_ARCH}, ROCm ${ROCMLOCK_ROCM_VERSION} at ${ROCM_PATH}, MAX_JOBS=${MAX_JOBS}"
python -m pip install . --no-deps --no-build-isolation -vv
