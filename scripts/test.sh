#!/usr/bin/env bash
# The test command: installs dependencies, builds twice (Release, and
# AddressSanitizer+UBSan), and runs the whole test suite in both.
# Exhaustive tests (all 2^32 fp32 inputs) run on demand: ctest -L exhaustive.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
bash scripts/pyenv.sh >/dev/null
bash scripts/data.sh >/dev/null   # real Fashion-MNIST / corpus checks need the data
JOBS=$(nproc)
# Each stage header carries the seconds since the start, so a slow stage shows.
stage() { echo "== $* [${SECONDS} s]"; }
# The builds below (Release, ASan+UBSan, fuzz targets, Python extension) write
# about 2 GB under the checkout; say so up front rather than fail in a link.
free_mb=$(( $(df -Pk "$ROOT" | awk 'NR==2 {print $4}') / 1024 ))
stage "Disk: ${free_mb} MB free in $ROOT (this command writes about 2 GB there)"
if ((free_mb < 2500)); then echo "test.sh: warning: under 2.5 GB free in $ROOT; a build may run out of space" >&2; fi
# ctest runs tests side by side, each with OpenMP threads: spinning waits would
# oversubscribe the cores, so idle threads sleep.
export OMP_WAIT_POLICY=passive
stage "Release build"
bash scripts/build.sh build
(cd build && ctest --output-on-failure -j "$JOBS" -LE exhaustive)
stage "Installed library used from another project (examples/)"
cmake --install build --prefix build/install >/dev/null
cmake -S examples -B build/examples -DCMAKE_PREFIX_PATH="$ROOT/build/install" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/examples -j "$JOBS" >/dev/null
./build/examples/amp_example bf16-amp | tail -1
stage "Benchmark smoke (must run; no timing is checked)"
./build/bench/bench_train --threads 2 --recipe fp32,bf16-amp,fp16-amp --layers 1 --d-model 64 --heads 2 --seq-len 32 --batch 2 --steps 2 --warmup 1 | tail -3
./build/bench/bench_checkpoint --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 2 --steps 1 --warmup 1 >/dev/null
MANTISSA_BENCH_REPS=1 ./build/bench/bench_matmul --benchmark_filter=attnproj >/dev/null
./build/bench/bench_convert --benchmark_filter='/32768|fp8_cast' --benchmark_min_time=0.01 >/dev/null
bash bench/run_all.sh --quick --build-dir build --out build/bench-results >/dev/null
head -n 5 build/bench-results/summary.md
if command -v mpirun >/dev/null; then  # data parallel over 2 local ranks (the dist tests above run them too)
  bash bench/run_dist_scaling.sh --steps 3 --out build/bench-results \
    --model-args "--layers 1 --d-model 32 --heads 2 --seq-len 16 --batch-size 4" | tail -1
fi
stage "Python package: pip install . into the venv, then pytest"
PIP_ARGS=(-q --disable-pip-version-check --no-build-isolation -C cmake.define.MANTISSA_WERROR=ON)
command -v ccache >/dev/null && PIP_ARGS+=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
VENV=$(bash scripts/pyenv.sh)
"$VENV/bin/pip" install "${PIP_ARGS[@]}" .
rc=0; MANTISSA_CLI="$ROOT/build/mantissa" "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/python || rc=$?
if ((rc == 5)); then echo "test.sh: pytest collected no tests in tests/python" >&2; fi
if ((rc != 0)); then exit "$rc"; fi
stage "AddressSanitizer + UBSan build"
# One shared library and line tables only (-g1, enough for symbolised
# reports): the build stays well under a gigabyte on disk.
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DBUILD_SHARED_LIBS=ON -DMANTISSA_SANITIZE=ON -DMANTISSA_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$JOBS" -LE "exhaustive|oracle|slow")
stage "Fuzzing (libFuzzer, clang ASan+UBSan; 10 s a target, seed ${MANTISSA_FUZZ_SEED:-1}; longer: bash scripts/fuzz.sh SECONDS)"
MANTISSA_FUZZ_SEED=${MANTISSA_FUZZ_SEED:-1} bash scripts/fuzz.sh "${MANTISSA_FUZZ_SECONDS:-10}"
MANTISSA_FUZZ_SEED=${MANTISSA_FUZZ_SEED:-1} bash scripts/fuzz_python.sh "${MANTISSA_FUZZ_SECONDS:-10}"
stage "All passed"
