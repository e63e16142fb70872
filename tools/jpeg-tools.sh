#!/usr/bin/env bash
# Makes sure the tools that build libjpeg-turbo (stoker's default JPEG decoder, compiled from
# the source the turbojpeg-sys crate bundles) are there: cmake from PyPI into the venv given
# as $1, and nasm (its SIMD code is assembly) from Debian's packages when it is missing.
# Without nasm the build stops: libjpeg-turbo without SIMD would be slower than zune-jpeg.
set -euo pipefail
venv=${1:?usage: jpeg-tools.sh VENV}
command -v "$venv/bin/cmake" >/dev/null || command -v cmake >/dev/null \
    || "$venv/bin/python" -m pip install --quiet "cmake>=3.16,<5"
if ! command -v nasm >/dev/null && ! command -v yasm >/dev/null; then
    echo "jpeg-tools: nasm is missing; installing Debian's nasm package"
    apt=(apt-get)
    [ "$(id -u)" = 0 ] || apt=(sudo -n apt-get)
    "${apt[@]}" install -y -q nasm >/dev/null 2>&1 \
        || { "${apt[@]}" update -q >/dev/null && "${apt[@]}" install -y -q nasm >/dev/null; } \
        || true
fi
if ! command -v nasm >/dev/null && ! command -v yasm >/dev/null; then
    echo "jpeg-tools: could not install nasm (needs root or sudo for apt-get)." >&2
    echo "  Install it (apt-get install nasm), or build the pure-Rust decoder: make ... JPEG=zune" >&2
    exit 1
fi
