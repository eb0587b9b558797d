#!/usr/bin/env bash
# Builds llama.cpp's llama-bench from the llama-cpp-python sdist on PyPI (which vendors
# llama.cpp), outside the repository, for side-by-side measurements (docs/perf.md). Never commit
# the result. Prints the path of the llama-bench binary on its last line.
#
#   tools/build_llama_bench.sh [WORK_DIR]      (default /tmp/fp4serve-llama)
#
# Environment: LLAMA_CPP_PYTHON_VERSION pins the sdist (default: the newest), JOBS (default 2).
set -euo pipefail

work=${1:-/tmp/fp4serve-llama}
jobs=${JOBS:-2}
mkdir -p "$work"
cd "$work"

sdist=$(ls llama_cpp_python-*.tar.gz 2>/dev/null | head -n1 || true)
if [[ -z "$sdist" ]]; then
  spec=llama-cpp-python${LLAMA_CPP_PYTHON_VERSION:+==$LLAMA_CPP_PYTHON_VERSION}
  python3 -m pip download --no-binary :all: --no-deps "$spec" -d . >&2
  sdist=$(ls llama_cpp_python-*.tar.gz | head -n1)
fi
src=${sdist%.tar.gz}
[[ -d "$src" ]] || tar xzf "$sdist"
llama="$work/$src/vendor/llama.cpp"
[[ -f "$llama/CMakeLists.txt" ]] || { echo "error: $llama has no CMakeLists.txt (sdist layout changed?)" >&2; exit 1; }

# The NVFP4 type must exist in this llama.cpp, or the comparison is meaningless.
if ! grep -q "GGML_TYPE_NVFP4" "$llama/ggml/include/ggml.h"; then
  echo "error: $src vendors a llama.cpp without GGML_TYPE_NVFP4; pick a newer LLAMA_CPP_PYTHON_VERSION" >&2
  exit 1
fi

# Native build (this CPU's AVX2/AVX-512/AMX paths), no network, no GPU backends.
cmake -S "$llama" -B "$llama/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DBUILD_SHARED_LIBS=OFF >&2
nice -n 5 cmake --build "$llama/build-bench" -j "$jobs" --target llama-bench >&2
echo "$llama/build-bench/bin/llama-bench"
