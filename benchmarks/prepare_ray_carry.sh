#!/usr/bin/env bash
# Run HERE (not on the GPU machine): packs Ray for the Ray executor (`--ray-address`) on
# the GPU machine into one ignored file small enough to carry in one device call beside
# .device-wheels (64 MiB per call in all; the ray 2.60.0 wheel is 79 MB, 32 MB of it
# ray/jars, the Java workers, which a Python-only cluster never loads):
#   .cache/ray-carry/ray-site.tgz   ray (without ray/jars) and jsonschema with its
#                                   dependencies, unpacked for the device's Python 3.12
# The GPU machine already has Ray's other dependencies (click, filelock, msgpack,
# protobuf, pyyaml, requests, attrs). There, after `source .device-wheels/device-env`:
#   mkdir -p /tmp/site && tar -xzf .cache/ray-carry/ray-site.tgz -C /tmp/site
#   python benchmarks/eval_throughput.py --n 40 --ray-address local   # and without it
#
#   bash benchmarks/prepare_ray_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.cache/ray-carry
PY=${DEVICE_PY:-3.12}
rm -rf "$CARRY" && mkdir -p "$CARRY/wheels" "$CARRY/site"
pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$CARRY/wheels" \
    ray==2.60.0 jsonschema jsonschema-specifications referencing rpds-py
for w in "$CARRY"/wheels/*.whl; do unzip -q -o "$w" -d "$CARRY/site"; done  # keeps modes
rm -rf "$CARRY/site/ray/jars"
tar -czf "$CARRY/ray-site.tgz" -C "$CARRY/site" .
rm -rf "$CARRY/wheels" "$CARRY/site"
du -sh "$CARRY/ray-site.tgz" .device-wheels
