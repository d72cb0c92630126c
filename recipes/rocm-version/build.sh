#!/usr/bin/env bash
# Install the activation scripts with this package's ROCm version filled in.
set -euo pipefail

: "${PKG_VERSION:?rattler-build sets PKG_VERSION}"
mkdir -p "${PREFIX}/etc/conda/activate.d" "${PREFIX}/etc/conda/deactivate.d"
sed "s/@ROCM_VERSION@/${PKG_VERSION}/g" "${RECIPE_DIR}/activate.sh" \
    > "${PREFIX}/etc/conda/activate.d/rocm-version_activate.sh"
cp "${RECIPE_DIR}/deactivate.sh" "${PREFIX}/etc/conda/deactivate.d/rocm-version_deactivate.sh"
