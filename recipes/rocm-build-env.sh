# shellcheck shell=bash
# Sourced by the ROCm recipes' build.sh: the environment every HIP build needs, set explicitly.
# Expects ROCMLOCK_ROCM_VERSION and ROCMLOCK_GPU_TARGET (recipe.yaml sets them per variant).

rocmlock_die() {
    echo "rocmlock build: $*" >&2
    exit 1
}

# ROCm comes from the build host: ROCM_PATH, else HIP_PATH, else /opt/rocm.
rocmlock_rocm_env() {
    : "${ROCMLOCK_ROCM_VERSION:?recipe.yaml sets ROCMLOCK_ROCM_VERSION}"
    : "${ROCMLOCK_GPU_TARGET:?recipe.yaml sets ROCMLOCK_GPU_TARGET}"
    ROCM_PATH="${ROCM_PATH:-${HIP_PATH:-/opt/rocm}}"
    [ -x "${ROCM_PATH}/bin/hipcc" ] || [ -x "${ROCM_PATH}/bin/amdclang++" ] \
        || rocmlock_die "no ROCm at ${ROCM_PATH} (no bin/hipcc); install ROCm ${ROCMLOCK_ROCM_VERSION} or set ROCM_PATH"
    local host_version=""
    if [ -r "${ROCM_PATH}/.info/version" ]; then
        host_version="$(head -n 1 "${ROCM_PATH}/.info/version")"
    fi
    case "${host_version}" in
        "${ROCMLOCK_ROCM_VERSION}" | "${ROCMLOCK_ROCM_VERSION}".* | "${ROCMLOCK_ROCM_VERSION}"-*) ;;
        *) rocmlock_die "this variant is for ROCm ${ROCMLOCK_ROCM_VERSION} but ${ROCM_PATH}/.info/version says '${host_version}'; point ROCM_PATH at a ROCm ${ROCMLOCK_ROCM_VERSION} install" ;;
    esac
    # FindHIP needs ROCM_PATH, hipcc and torch.utils.cpp_extension read ROCM_HOME, and without
    # HIP_PATH the compiler misses hip_runtime.h. Set all three to the same tree.
    export ROCM_PATH
    export ROCM_HOME="${ROCM_PATH}"
    export HIP_PATH="${HIP_PATH:-${ROCM_PATH}}"
    export HIP_PLATFORM=amd
    if [ -z "${HIP_DEVICE_LIB_PATH:-}" ] && [ -d "${ROCM_PATH}/lib/llvm/amdgcn/bitcode" ]; then
        export HIP_DEVICE_LIB_PATH="${ROCM_PATH}/lib/llvm/amdgcn/bitcode"
    fi
    export PATH="${ROCM_PATH}/bin:${PATH}"
}

# Extensions built against torch (torchvision, torchaudio) need this variant's ROCm pytorch in the host prefix.
rocmlock_require_rocm_torch() {
    python -c "import torch, sys; sys.exit(0 if torch.version.hip else 'the host pytorch is not a ROCm build')" \
        || rocmlock_die "$1 needs the ROCm pytorch of this variant in the host prefix"
}

# Parallel compile jobs: ~5 GB of memory each (HIP translation units are large); MAX_JOBS wins when set.
rocmlock_max_jobs() {
    if [ -n "${MAX_JOBS:-}" ]; then
        export MAX_JOBS
        return
    fi
    local avail_kb jobs cpus
    avail_kb="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || true)"
    jobs=$(( ${avail_kb:-5242880} / (5 * 1024 * 1024) ))
    cpus="$(nproc 2>/dev/null || echo 1)"
    [ "${jobs}" -gt "${cpus}" ] && jobs="${cpus}"
    [ "${jobs}" -lt 1 ] && jobs=1
    export MAX_JOBS="${jobs}"
}

# ccache when the build host has it: rebuilding a variant after a recipe fix then takes minutes.
# CCACHE_DIR comes from recipe.yaml (the host's, else ~/.cache/ccache) so the cache outlives the build dir.
rocmlock_ccache() {
    if command -v ccache >/dev/null 2>&1 && [ -n "${CCACHE_DIR:-}" ]; then
        export CCACHE_DIR
        export CMAKE_C_COMPILER_LAUNCHER=ccache
        export CMAKE_CXX_COMPILER_LAUNCHER=ccache
        export CMAKE_HIP_COMPILER_LAUNCHER=ccache
        export CCACHE_BASEDIR="${SRC_DIR:-$PWD}"
    fi
}
