# shellcheck shell=bash
# Sourced by the ROCm recipes' build.sh: the environment every HIP build needs, set explicitly.
# Expects ROCMLOCK_ROCM_VERSION and ROCMLOCK_GPU_TARGET (recipe.yaml sets them per variant).

rocmlock_die() {
    echo "rocmlock build: $*" >&2
    exit 1
}

# Where the build host's ROCm is: ROCM_PATH, else HIP_PATH, else TheRock's Python packages (`rocm-sdk path --root`:
# <site-packages>/_rocm_sdk_devel, the ROCm the build environment's own PyTorch runs on), else /opt/rocm (AMD's
# packages), else what `hipconfig --path` says, else /usr (a distribution's packages: Debian's ROCm 7.2.4 lives there).
# A TheRock tarball is used through ROCM_PATH. The same search as rocmlock doctor (tools/rocmlock/host/rocm.py).
rocmlock_find_rocm() {
    local p
    for p in "${ROCM_PATH:-}" "${HIP_PATH:-}"; do
        [ -n "${p}" ] && { echo "${p}"; return; }
    done
    if command -v rocm-sdk >/dev/null 2>&1; then
        # Its last line: the first call also unpacks the devel tarball, which may print before it.
        p="$(rocm-sdk path --root 2>/dev/null | tail -n 1 || true)"
        if [ -n "${p}" ] && [ -f "${p}/include/hip/hip_runtime.h" ]; then
            echo "${p}"
            return
        fi
        echo "rocm-build-env: rocm-sdk is on PATH but \`rocm-sdk path --root\` names no ROCm (rocm-sdk-devel missing?): pip install 'rocm[devel]', then rocm-sdk init" >&2
    fi
    if [ -f /opt/rocm/include/hip/hip_runtime.h ]; then
        echo /opt/rocm
        return
    fi
    p="$(hipconfig --path 2>/dev/null || true)"
    if [ -n "${p}" ] && [ -f "${p}/include/hip/hip_runtime.h" ]; then
        echo "${p}"
    elif [ -f /usr/include/hip/hip_runtime.h ]; then
        echo /usr
    fi
}

# The ROCm version of a prefix: .info/version (AMD; its first word less a -<build> suffix, CRs and blank lines
# aside: AMD writes e.g. 7.2.4-123), else rocm-core's rocm_version.h (Debian has no .info), else
# `hipconfig --version` (major.minor only: HIP's third number is a build number). Empty when none says.
rocmlock_rocm_version_of() {
    local rocm="$1" header="$1/include/rocm-core/rocm_version.h" v=""
    if [ -r "${rocm}/.info/version" ]; then
        v="$(awk '{sub(/\r$/, "")} NF {v = $1; sub(/-.*/, "", v); print v; exit}' "${rocm}/.info/version")"
    fi
    if [ -z "${v}" ] && [ -r "${header}" ]; then
        v="$(awk '/#define[ \t]+ROCM_VERSION_(MAJOR|MINOR|PATCH)[ \t]/ {v[$2] = $3}
             END {if (v["ROCM_VERSION_MAJOR"] != "") printf "%s.%s.%s\n", v["ROCM_VERSION_MAJOR"], v["ROCM_VERSION_MINOR"], v["ROCM_VERSION_PATCH"]}' "${header}")"
    fi
    if [ -z "${v}" ] && { [ -x "${rocm}/bin/hipconfig" ] || command -v hipconfig >/dev/null 2>&1; }; then
        v="$("${rocm}/bin/hipconfig" --version 2>/dev/null || hipconfig --version 2>/dev/null || true)"
        v="$(echo "${v}" | sed -n 's/^\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | tail -n 1)"
    fi
    echo "${v}"
}

# The directory holding ROCm's device libraries (ocml.bc ...) for a prefix: HIP_DEVICE_LIB_PATH, else
# <rocm>/amdgcn/bitcode, <rocm>/lib/llvm/amdgcn/bitcode, the resource directory of the clang hipcc drives
# (<rocm>/lib/llvm/bin/clang, else `hipconfig --hipclangpath`; Debian's 7.2.4: /usr/lib/llvm-22/lib/clang/22/amdgcn/bitcode),
# the newest <rocm>/lib/llvm/lib/clang/*/amdgcn/bitcode, <rocm>/lib/<multiarch>/amdgcn/bitcode (Debian 12's 5.x).
# The clang is asked before the glob: a stale resource directory beside the real one would otherwise win.
rocmlock_device_libs_of() {
    local rocm="$1" d clang="" found=""
    if [ -n "${HIP_DEVICE_LIB_PATH:-}" ]; then
        echo "${HIP_DEVICE_LIB_PATH}"
        return
    fi
    for d in "${rocm}/amdgcn/bitcode" "${rocm}/lib/llvm/amdgcn/bitcode"; do
        [ -f "${d}/ocml.bc" ] && { echo "${d}"; return; }
    done
    if [ -x "${rocm}/lib/llvm/bin/clang" ]; then
        clang="${rocm}/lib/llvm/bin/clang"
    else
        d="$(hipconfig --hipclangpath 2>/dev/null || true)"
        [ -n "${d}" ] && [ -x "${d}/clang" ] && clang="${d}/clang"
    fi
    if [ -n "${clang}" ]; then
        d="$("${clang}" -print-resource-dir 2>/dev/null || true)/amdgcn/bitcode"
        [ -f "${d}/ocml.bc" ] && { echo "${d}"; return; }
    fi
    for d in "${rocm}"/lib/llvm/lib/clang/*/amdgcn/bitcode; do
        [ -f "${d}/ocml.bc" ] && found="${d}"
    done
    [ -n "${found}" ] && { echo "${found}"; return; }
    for d in "${rocm}"/lib/*-linux-gnu/amdgcn/bitcode; do
        [ -f "${d}/ocml.bc" ] && { echo "${d}"; return; }
    done
    return 0
}

rocmlock_rocm_env() {
    : "${ROCMLOCK_ROCM_VERSION:?recipe.yaml sets ROCMLOCK_ROCM_VERSION}"
    : "${ROCMLOCK_GPU_TARGET:?recipe.yaml sets ROCMLOCK_GPU_TARGET}"
    local from="" given="" host_version
    if [ -n "${ROCM_PATH:-}" ]; then
        from=ROCM_PATH given="${ROCM_PATH}"
    elif [ -n "${HIP_PATH:-}" ]; then
        from=HIP_PATH given="${HIP_PATH}"
    fi
    ROCM_PATH="$(rocmlock_find_rocm)"
    [ "${ROCM_PATH}" = / ] || ROCM_PATH="${ROCM_PATH%/}"  # /usr/ is /usr: no // in the paths built from it
    [ -n "${ROCM_PATH}" ] || rocmlock_die "no ROCm found (ROCM_PATH, HIP_PATH, rocm-sdk path --root, /opt/rocm, hipconfig --path, /usr); install ROCm ${ROCMLOCK_ROCM_VERSION} or set ROCM_PATH"
    [ -z "${from}" ] || [ -d "${given}" ] \
        || rocmlock_die "${from}=${given} does not exist; point it at a ROCm ${ROCMLOCK_ROCM_VERSION} install, or unset it to use /opt/rocm or /usr"
    case "${ROCM_PATH}" in
        # ROCm 7.2's hipcc runs clang through `sh -c` unquoted: every compile would end in "sh: 1: /opt/my: not found".
        *[[:space:]]*) rocmlock_die "${from:-ROCM_PATH}=${ROCM_PATH} has a space, which hipcc cannot run clang from; link it from a path without one (ln -s '${ROCM_PATH}' /opt/rocm-${ROCMLOCK_ROCM_VERSION}) and point ROCM_PATH there" ;;
    esac
    [ -x "${ROCM_PATH}/bin/hipcc" ] || [ -x "${ROCM_PATH}/bin/amdclang++" ] \
        || rocmlock_die "no ROCm at ${ROCM_PATH} (no bin/hipcc); install ROCm ${ROCMLOCK_ROCM_VERSION} or set ROCM_PATH"
    # hipcc takes HIP's headers from HIP_PATH and everything else from ROCM_PATH: one install, or the build mixes two.
    if [ -n "${HIP_PATH:-}" ] && [ "$(readlink -f -- "${HIP_PATH}" || true)" != "$(readlink -f -- "${ROCM_PATH}")" ]; then
        rocmlock_die "HIP_PATH=${HIP_PATH} is not the ROCm at ROCM_PATH=${ROCM_PATH} (hipcc would take HIP from one and the rest from the other); unset HIP_PATH or set it to ${ROCM_PATH}"
    fi
    host_version="$(rocmlock_rocm_version_of "${ROCM_PATH}")"
    [ -n "${host_version}" ] \
        || rocmlock_die "cannot tell which ROCm is at ${ROCM_PATH} (no .info/version, include/rocm-core/rocm_version.h or hipconfig); point ROCM_PATH at a ROCm ${ROCMLOCK_ROCM_VERSION} install"
    case "${host_version}" in
        "${ROCMLOCK_ROCM_VERSION}" | "${ROCMLOCK_ROCM_VERSION}".*) ;;
        *) rocmlock_die "this variant is for ROCm ${ROCMLOCK_ROCM_VERSION} but the ROCm at ${ROCM_PATH} is '${host_version}' (.info/version, include/rocm-core/rocm_version.h, hipconfig --version); point ROCM_PATH at a ROCm ${ROCMLOCK_ROCM_VERSION} install" ;;
    esac
    if [ -n "${HIP_DEVICE_LIB_PATH:-}" ] && [ ! -f "${HIP_DEVICE_LIB_PATH}/ocml.bc" ]; then
        rocmlock_die "HIP_DEVICE_LIB_PATH=${HIP_DEVICE_LIB_PATH} holds no ocml.bc (ROCm's device libraries); point it at ROCm's amdgcn/bitcode directory, or unset it"
    fi
    # FindHIP needs ROCM_PATH, hipcc and torch.utils.cpp_extension read ROCM_HOME, and without
    # HIP_PATH the compiler misses hip_runtime.h. Set all three to the same tree.
    export ROCM_PATH
    export ROCM_HOME="${ROCM_PATH}"
    export HIP_PATH="${HIP_PATH:-${ROCM_PATH}}"
    export HIP_PLATFORM=amd
    # With ROCM_PATH set, clang looks for the device libraries in $ROCM_PATH/amdgcn/bitcode only; a
    # distribution keeps them in its clang's resource directory. Say where they are, always.
    HIP_DEVICE_LIB_PATH="$(rocmlock_device_libs_of "${ROCM_PATH}")"
    [ -n "${HIP_DEVICE_LIB_PATH}" ] || rocmlock_die "no ROCm device libraries (ocml.bc) for ${ROCM_PATH}; install rocm-device-libs or set HIP_DEVICE_LIB_PATH"
    export HIP_DEVICE_LIB_PATH
    export PATH="${ROCM_PATH}/bin:${PATH}"
    echo "rocmlock build: ROCm ${host_version} at ${ROCM_PATH}, device libraries in ${HIP_DEVICE_LIB_PATH}" >&2
}

# The host-ROCm components package $1 compiles against (tools/rocmlock/data/rocm_components.toml, which
# `rocmlock doctor --build` reads too): all present under $ROCM_PATH/include, or stop naming every missing one
# with the packages that provide it. Call after rocmlock_rocm_env.
rocmlock_require_rocm_components() {
    local table="${RECIPE_DIR}/../../tools/rocmlock/data/rocm_components.toml" missing
    [ -r "${table}" ] || rocmlock_die "no component table at ${table}"
    missing="$(python - "${table}" "$1" "${ROCM_PATH}" <<'PY'
import pathlib, sys, tomllib
# rocmlock plan/build validate this table first (tools/rocmlock/host/rocm.py); a hand-run rattler-build does not,
# so a malformed table is one line here too, not a traceback.
try:
    table = tomllib.loads(pathlib.Path(sys.argv[1]).read_text())
    include = pathlib.Path(sys.argv[3]) / "include"
    missing = [table["components"][key] for key in table["packages"].get(sys.argv[2], [])]
    print("; ".join(f"{c['name']} (include/{c['header']}; Debian/Ubuntu: {c['debian']}, AMD: {c['amd']})"
                    for c in missing if not (include / c["header"]).is_file()))
except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
    sys.exit(f"{type(exc).__name__}: {exc}")
PY
)" || rocmlock_die "cannot read ${table} (malformed; \`rocmlock plan\` names the key)"
    [ -z "${missing}" ] || rocmlock_die "$1 needs these ROCm components, missing under ${ROCM_PATH}: ${missing}"
    echo "rocmlock build: host ROCm components for $1 found under ${ROCM_PATH}/include" >&2
}

# MAGMA (the GPU LAPACK PyTorch runs torch.linalg.eig and a few other ops on) from the build host, only when
# ROCMLOCK_MAGMA_HOME names it. PyTorch's USE_MAGMA defaults to ON (CMakeLists.txt) and its cmake/Modules/FindMAGMA.cmake
# looks in $MAGMA_HOME, /usr/local/magma and CMake's system prefixes, so without USE_MAGMA=0 whatever MAGMA the host
# happens to have (Debian's libmagma-rocm-dev puts libmagma.so in /usr) would be linked without anyone choosing it.
# The MAGMA must link this ROCm's HIP runtime (tools/rocmlock/host/magma.py says why; doctor checks the same).
# Call after rocmlock_rocm_env; rocmlock_bundle_magma after the install.
rocmlock_magma() {
    local home="${ROCMLOCK_MAGMA_HOME:-}" lib="" hip="" f
    local elf="${RECIPE_DIR}/../../tools/rocmlock/gpu/elf.py"
    unset MAGMA_HOME
    if [ -z "${home}" ]; then
        export USE_MAGMA=0
        echo "rocmlock build: MAGMA off (ROCMLOCK_MAGMA_HOME unset; docs/recipes.md, MAGMA)" >&2
        return 0
    fi
    # This script runs in rattler-build's work directory, not where the key was set: a relative path would name
    # another directory here (rocmlock build and doctor refuse one too: tools/rocmlock/host/magma.py).
    case "${home}" in
        /*) ;;
        *) rocmlock_die "ROCMLOCK_MAGMA_HOME=${home} is a relative path and build.sh runs in rattler-build's work directory ${PWD}; give the absolute path of the MAGMA install, or unset it to build without MAGMA" ;;
    esac
    [ -e "${home}" ] || rocmlock_die "ROCMLOCK_MAGMA_HOME=${home} does not exist; point it at a MAGMA built for ROCm ${ROCMLOCK_ROCM_VERSION}, or unset it to build without MAGMA"
    [ -d "${home}" ] || rocmlock_die "ROCMLOCK_MAGMA_HOME=${home} is not a directory; point it at a MAGMA install's prefix, or unset it to build without MAGMA"
    [ -f "${home}/include/magma.h" ] \
        || rocmlock_die "ROCMLOCK_MAGMA_HOME=${home} has no include/magma.h; point it at a MAGMA built for ROCm ${ROCMLOCK_ROCM_VERSION}, or unset it to build without MAGMA"
    for f in "${home}/lib/libmagma.so" "${home}"/lib/*-linux-gnu/libmagma.so; do
        [ -f "${f}" ] && { lib="${f}"; break; }
    done
    [ -n "${lib}" ] || rocmlock_die "ROCMLOCK_MAGMA_HOME=${home} has no lib/libmagma.so; point it at a MAGMA built for ROCm ${ROCMLOCK_ROCM_VERSION}, or unset it"
    local info linked
    for f in "${ROCM_PATH}/lib/libamdhip64.so" "${ROCM_PATH}"/lib/*-linux-gnu/libamdhip64.so; do
        [ -f "${f}" ] || continue
        info="$(python "${elf}" "${f}")" || rocmlock_die "cannot read ${f} with ${elf}"
        hip="$(echo "${info}" | sed -n 's/^soname //p')"
        break
    done
    info="$(python "${elf}" "${lib}")" || rocmlock_die "cannot read ${lib} with ${elf}"
    linked="$(echo "${info}" | sed -n 's/^needed \(libamdhip64\.so.*\)/\1/p')"
    if [ -z "${hip}" ] || [ "${linked}" != "${hip}" ]; then
        rocmlock_die "MAGMA at ${home} (${lib}) links ${linked:-no HIP runtime} but the ROCm at ${ROCM_PATH} is ${hip:-unknown}: it was built for another ROCm; build MAGMA against ROCm ${ROCMLOCK_ROCM_VERSION} (PyTorch's .ci/docker/common/install_rocm_magma.sh) or unset ROCMLOCK_MAGMA_HOME"
    fi
    export USE_MAGMA=1 MAGMA_HOME="${home}" ROCMLOCK_MAGMA_LIB="${lib}"
    echo "rocmlock build: MAGMA from ${lib} (links ${linked}; the package carries it)" >&2
}

# The package carries the MAGMA it was linked against, as PyTorch's ROCm wheels carry libmagma.so: a node's ROCm
# has no MAGMA, and the library must be the one torch was built with. Copied under the name torch's libraries
# ask for (its SONAME), into $PREFIX/lib; the recipe test's `import torch` fails if torch cannot load it from there.
rocmlock_bundle_magma() {
    [ "${USE_MAGMA:-0}" = 1 ] || return 0
    local elf="${RECIPE_DIR}/../../tools/rocmlock/gpu/elf.py" info name
    info="$(python "${elf}" "${ROCMLOCK_MAGMA_LIB}")" || rocmlock_die "cannot read ${ROCMLOCK_MAGMA_LIB} with ${elf}"
    name="$(echo "${info}" | sed -n 's/^soname //p')"
    mkdir -p "${PREFIX}/lib"
    cp -L "${ROCMLOCK_MAGMA_LIB}" "${PREFIX}/lib/${name:-libmagma.so}"
    echo "rocmlock build: carries ${ROCMLOCK_MAGMA_LIB} as lib/${name:-libmagma.so} ($(sha256sum "${ROCMLOCK_MAGMA_LIB}" | cut -c1-16))" >&2
}

# Extensions built against torch (torchvision, torchaudio) need this variant's ROCm pytorch in the host prefix.
rocmlock_require_rocm_torch() {
    python -c "import torch, sys; sys.exit(0 if torch.version.hip else 'the host pytorch is not a ROCm build')" \
        || rocmlock_die "$1 needs the ROCm pytorch of this variant in the host prefix"
}

# Parallel compile jobs: ~5 GB of memory each (HIP translation units are large); MAX_JOBS wins when set.
rocmlock_max_jobs() {
    # A positive whole number only (rocmlock doctor reads it the same way): MAX_JOBS=0 or "abc" reached ninja
    # and setup.py as it was.
    case "${MAX_JOBS:-}" in
        [1-9] | [1-9][0-9] | [1-9][0-9][0-9])
            export MAX_JOBS
            return ;;
        "") ;;
        *) echo "rocmlock: MAX_JOBS='${MAX_JOBS}' is not a positive whole number: computing it" >&2 ;;
    esac
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
