#!/usr/bin/env bash
# Run HERE (not on the GPU machine): packs what benchmarks/profile_tvm_gpu.sh needs into two
# ignored folders, each small enough to carry in one device call beside .device-wheels
# (64 MiB per call in all; the apache-tvm wheel alone is ~100 MB):
#   .cache/tvm-carry/a/  first half of tvm-wheels.tar, SHA256SUMS, KernelBench level 1 1-20
#   .cache/tvm-carry/b/  second half of tvm-wheels.tar
# tvm-wheels.tar holds apache-tvm 0.27 (py3-none) and its two compiled dependencies for the
# device's Python 3.12 (apache-tvm-ffi, ml_dtypes); numpy and typing_extensions are there
# already. KernelBench comes from ../shared/kernelbench (KB=... to change).
#
#   bash benchmarks/prepare_tvm_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
KB=${KB:-../shared/kernelbench}
CARRY=.cache/tvm-carry
PY=${DEVICE_PY:-3.12}
rm -rf "$CARRY" && mkdir -p "$CARRY/wheels" "$CARRY/a/kernelbench/level1" "$CARRY/b"
pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" \
    --platform manylinux_2_28_x86_64 -d "$CARRY/wheels" \
    apache-tvm==0.27.0.post1 "apache-tvm-ffi>=0.1.14.post0" ml_dtypes
tar -cf "$CARRY/tvm-wheels.tar" -C "$CARRY/wheels" .
(cd "$CARRY" && sha256sum tvm-wheels.tar > a/SHA256SUMS)
# 53 MB halves: the larger one plus .device-wheels (~7 MB) stays under 64 MiB.
split -b 53M -d "$CARRY/tvm-wheels.tar" "$CARRY/part-"
mv "$CARRY/part-00" "$CARRY/a/tvm-wheels.tar.part-00"
mv "$CARRY/part-01" "$CARRY/b/tvm-wheels.tar.part-01"
if [ -e "$CARRY/part-02" ]; then
  echo "tvm-wheels.tar needs more than two 53 MB parts: carry the rest too" >&2; exit 1
fi
for i in $(seq 1 20); do cp "$KB"/level1/"${i}"_*.py "$CARRY/a/kernelbench/level1/"; done
rm -rf "$CARRY/wheels" "$CARRY/tvm-wheels.tar"
du -sh "$CARRY"/a "$CARRY"/b .device-wheels
