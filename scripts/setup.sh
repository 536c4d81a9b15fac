#!/usr/bin/env bash
# Set up a development/controller environment in ./.venv: fleetctl with its test tools, and what
# the embedded default (`fleetctl deploy --hosts local`) needs in the same venv to build and
# verify kernel_src: torch, scikit-build-core, nanobind, and PyPI's cuobjdump (+ nvdisasm, which
# `cuobjdump -sass` needs) for the SASS checks; CMake 4 for the build tests; MkDocs + mkdocstrings for
# the docs site (docs/index.md says how to build and serve it).
#
# TORCH_SPEC picks torch (default torch==2.13.0; on a GPU machine use the build matching its CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
[ -x .venv/bin/python3 ] || "$PYTHON" -m venv .venv
.venv/bin/python3 -m pip install -q --upgrade pip
.venv/bin/python3 -m pip install -q "$TORCH_SPEC" numpy "scikit-build-core>=0.10" "nanobind>=2.0" \
    nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
.venv/bin/python3 -m pip install -q -e '.[test,docs]'
# The sgl-kernel patch tests configure with a real cmake: PyPI's when the machine has none.
command -v cmake >/dev/null || [ -x .venv/bin/cmake ] || .venv/bin/python3 -m pip install -q cmake
# CMake 4 for the build tests (tests/test_build_kinds_e2e.py), beside the system's CMake, not on PATH
[ -x .venv/opt/cmake4/cmake/data/bin/cmake ] || .venv/bin/python3 -m pip install -q --target .venv/opt/cmake4 "cmake>=4,<5"
echo "ready: .venv/bin/fleetctl ($(.venv/bin/fleetctl --version))"
