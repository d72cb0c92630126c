#!/usr/bin/env bash
# Build LLVM (the commit Triton pins), then Triton, offline.
set -euo pipefail

# shellcheck source=../rocm-build-env.sh
. "${RECIPE_DIR}/../rocm-build-env.sh"
: "${ROCMLOCK_ROCM_VERSION:?recipe.yaml sets ROCMLOCK_ROCM_VERSION}"
rocmlock_max_jobs
rocmlock_ccache

# Triton's setup.py always builds both in-tree backends (`backends = [*BackendInstaller.copy(["nvidia",
# "amd"]), ...]`, passed to CMake as -DTRITON_CODEGEN_BACKENDS; no environment variable selects them), and its
# core links NVPTX: LLVM is built for host, NVPTX and AMDGPU, as conda-forge's triton does. The nvidia backend
# stays inert here (no ptxas: download_and_copy() returns early in an offline build).
# Never download LLVM, pybind11 or nlohmann_json: every input is a pinned source or a host package.
export TRITON_OFFLINE_BUILD=1
# Proton (the profiler) needs roctracer/rocprofiler headers at build time; training does not use it.
export TRITON_BUILD_PROTON=0
# The C++ unit tests fetch googletest at configure time, which an offline build cannot.
export TRITON_BUILD_UT=0
export TRITON_PARALLEL_LINK_JOBS=2
export JSON_SYSPATH="${PREFIX}"
# The pybind11 package directory (include/ and share/cmake/ below it), from the host prefix.
PYBIND11_SYSPATH="$(python -c 'import os, pybind11; print(os.path.dirname(pybind11.__file__))')"
export PYBIND11_SYSPATH
# The package version is the release version (the recipe test checks it), no local suffix.
export TRITON_WHEEL_VERSION_SUFFIX=""

echo "rocmlock build: triton ${PKG_VERSION} (amd and nvidia backends) for ROCm ${ROCMLOCK_ROCM_VERSION}, MAX_JOBS=${MAX_JOBS}"

# Triton's CMakeLists adds -Werror to CMAKE_CXX_FLAGS; with another compiler than upstream CI's, new warnings
# fail the build (conda-forge's triton-feedstock carries a patch removing it for this reason). Removed here, and
# the build stops if the line is not found, so an upstream change is noticed.
grep -q 'CMAKE_CXX_FLAGS.*-Werror ' CMakeLists.txt \
    || rocmlock_die "triton's CMakeLists.txt no longer sets -Werror in CMAKE_CXX_FLAGS; review build.sh"
sed -i '/CMAKE_CXX_FLAGS/s/ -Werror / /' CMakeLists.txt

# Triton builds only against the LLVM commit it pins: cmake/llvm-info.json's "llvm_hash" since
# triton-lang/triton#10358 (2026-05-29, which removed cmake/llvm-hash.txt), the one-line cmake/llvm-hash.txt before.
# variants.yaml pins the two side by side (triton_git_rev, triton_llvm_rev), so a Triton pin moved without its
# LLVM stops here, not deep in the compile.
if [ -f cmake/llvm-info.json ]; then
    llvm_file=cmake/llvm-info.json
    llvm_hash="$(python -c 'import json, sys; v = json.load(open(sys.argv[1])).get("llvm_hash"); print(v if isinstance(v, str) else "")' "${llvm_file}")" \
        || rocmlock_die "triton's ${llvm_file} is not a JSON object; review build.sh"
elif [ -f cmake/llvm-hash.txt ]; then
    llvm_file=cmake/llvm-hash.txt
    llvm_hash="$(tr -d '[:space:]' < "${llvm_file}")"
else
    rocmlock_die "triton has neither cmake/llvm-info.json nor cmake/llvm-hash.txt: its LLVM pin moved; review build.sh"
fi
[ "${llvm_hash}" = "${ROCMLOCK_TRITON_LLVM_REV:?recipe.yaml sets ROCMLOCK_TRITON_LLVM_REV}" ] \
    || rocmlock_die "triton's ${llvm_file} names LLVM ${llvm_hash:-nothing}, variants.yaml pins triton_llvm_rev ${ROCMLOCK_TRITON_LLVM_REV}: move both together ('rocmlock bump triton=VERSION --rev triton=COMMIT' reads the LLVM commit from that file)"

# LLVM with MLIR and LLD, for the host CPU, NVPTX and AMDGPU.
cmake -G Ninja -S llvm-project/llvm -B llvm-project/build \
    -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_ENABLE_PROJECTS="mlir;lld" \
    -DLLVM_TARGETS_TO_BUILD="host;NVPTX;AMDGPU" \
    -DLLVM_BUILD_UTILS=ON \
    -DLLVM_BUILD_TOOLS=OFF \
    -DLLD_BUILD_TOOLS=OFF \
    -DLLVM_INCLUDE_TESTS=OFF \
    -DMLIR_INCLUDE_TESTS=OFF \
    -DLLVM_ENABLE_TERMINFO=OFF \
    -DLLVM_ENABLE_ASSERTIONS=OFF \
    -DLLVM_PARALLEL_LINK_JOBS=2 \
    ${CMAKE_C_COMPILER_LAUNCHER:+-DLLVM_CCACHE_BUILD=ON}
cmake --build llvm-project/build -j "${MAX_JOBS}"

export LLVM_SYSPATH="${PWD}/llvm-project/build"
export LLVM_INCLUDE_DIRS="${LLVM_SYSPATH}/include"
export LLVM_LIBRARY_DIR="${LLVM_SYSPATH}/lib"

python -m pip install . --no-deps --no-build-isolation -vv
