#!/usr/bin/env bash
# Pack a Triton wheel or an NVSHMEM installation into a bundle for `python3 -m scripts.gpu.suite --triton-bundle`
# / `--nvshmem-bundle` (any suite, or `exec -- COMMAND`), small enough to carry to the GPU machine
# (64 MiB per call). Triton: without the AMD backend's libraries and headers (its Python, which Triton
# imports, stays), CUPTI, the example plugins, the instrumentation test library, the MLIR headers, the
# disassemblers and the ptxas it does not assemble sm_90 with (3.6-3.8 run `ptxas`, 3.9 `ptxas-blackwell`;
# both would not fit), its libtriton.so stripped of debug info (488 -> 192 MB, 41 MB with zstd at its
# highest level). NVSHMEM: its headers, host library, UID bootstrap, IBRC transport and the sm_90 device
# bitcode.
#   bash scripts/gpu/pack_bundle.sh triton triton-3.9.0-cp312-abi3-...whl .gpu-cache/triton-3.9.0  # the GPU machine runs Python 3.12
#   bash scripts/gpu/pack_bundle.sh nvshmem /path/to/nvidia/nvshmem .gpu-cache/nvshmem-3.7.2
set -euo pipefail
kind=$1 source=$(realpath "$2") dest=$3
mkdir -p "$dest" && dest=$(realpath "$dest")
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
case $kind in
  triton)
    (cd "$work" && unzip -q "$source")
    strip --strip-unneeded "$work/triton/_C/libtriton.so"
    zstd -q --ultra -22 -T0 -f "$work/triton/_C/libtriton.so" -o "$dest/libtriton.so.zst"
    unused=ptxas  # suite.py points the missing name at the other
    if grep -q "ptxas_blackwell if arch >= 100" "$work/triton/backends/nvidia/compiler.py"; then unused=ptxas-blackwell; fi
    (cd "$work" && tar -cJf "$dest/triton-rest.tar.xz" --exclude=triton/backends/amd/lib --exclude=triton/backends/amd/include --exclude=cupti \
      --exclude=cupti-blackwell --exclude="triton/backends/nvidia/bin/$unused" --exclude=triton/_C/libtriton.so \
      --exclude=triton/plugins --exclude=triton/instrumentation --exclude=triton/include \
      --exclude=libproton.so --exclude=cuobjdump --exclude=nvdisasm triton triton-*.dist-info)
    cp "$(command -v zstd)" "$dest/zstd"  # the GPU machine may lack one
    ;;
  nvshmem)
    tar -C "$source" -cJf "$dest/nvshmem.tar.xz" include lib/libnvshmem_device_sm_90.bc \
      lib/libnvshmem_host.so.3 lib/nvshmem_bootstrap_uid.so.3 lib/nvshmem_transport_ibrc.so.6
    ;;
  *) echo "usage: $0 triton WHEEL DEST | nvshmem NVSHMEM_DIR DEST" >&2; exit 2 ;;
esac
du -sh "$dest"
