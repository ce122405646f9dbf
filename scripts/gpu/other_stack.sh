#!/usr/bin/env bash
# GPU tests against a Triton or NVSHMEM release the GPU machine does not have (it has no registry
# access): the release comes as a bundle carried in .gpu-cache/ (scripts/gpu/pack_bundle.sh makes
# them; the machine's own torch stays), is unpacked under /tmp once per warm machine, and put in
# front of what is installed.
#   TRITON_BUNDLE=.gpu-cache/triton-3.9.0   Triton: libtriton.so.zst + triton-rest.tar.xz
#   NVSHMEM_BUNDLE=.gpu-cache/nvshmem-3.7.2 NVSHMEM: nvshmem.tar.xz (include/ and lib/), as NVSHMEM_HOME
#                                           and preloaded
# Usage (repository root, .debs/ carried as for every GPU script):
#   TRITON_BUNDLE=... bash scripts/gpu/other_stack.sh pytest test/test_gluon.py
#   NVSHMEM_BUNDLE=... bash scripts/gpu/other_stack.sh python3 scripts/gpu/nvshmem_ring.py --world 1 2 --out DIR
# Writes stack.json (GPU, versions as the command sees them, command, exit status) into $OUT (else
# bench/results/other_stack_<UTC stamp>/) and exits with the command's status.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/results.sh
RES=$(results_dir other_stack)
source scripts/gpu/setup.sh
zstd_tool=$(command -v zstd || echo "$PWD/${TRITON_BUNDLE:-.}/zstd")  # the bundle brings one

unpack() {  # unpack BUNDLE DEST: the bundle's archives into DEST, once per bundle content
  local bundle=$1 dest=$2 stamp
  stamp=$(cat "$bundle"/* | sha1sum)
  [ "$(cat "$dest/.bundle" 2>/dev/null)" = "$stamp" ] && return
  rm -rf "$dest" && mkdir -p "$dest"
  for archive in "$bundle"/*.tar.xz; do tar -xJf "$archive" -C "$dest"; done
  for packed in "$bundle"/*.zst; do
    [ -e "$packed" ] || continue
    local name; name=$(basename "$packed" .zst)
    "$zstd_tool" -q -d "$packed" -o "$dest/triton/_C/$name"
  done
  echo "$stamp" >"$dest/.bundle"
}

if [ -n "${TRITON_BUNDLE:-}" ]; then
  unpack "$TRITON_BUNDLE" /tmp/triton-bundle
  export PYTHONPATH=/tmp/triton-bundle:$PYTHONPATH
fi
if [ -n "${NVSHMEM_BUNDLE:-}" ]; then
  unpack "$NVSHMEM_BUNDLE" /tmp/nvshmem-bundle
  # torch links its own NVSHMEM host library; preloading the bundle's makes the whole process use it,
  # as when torch itself pins that release (the host library is backward compatible within major 3).
  export NVSHMEM_HOME=/tmp/nvshmem-bundle LD_PRELOAD=/tmp/nvshmem-bundle/lib/libnvshmem_host.so.3${LD_PRELOAD:+:$LD_PRELOAD}
fi
set +e
if [ "$1" = pytest ]; then shift; python3 -m pytest -q -p no:cacheprovider -rs "$@"; else "$@"; fi
status=$?
python3 - "$RES/stack.json" "$status" "$*" <<'PY'
import datetime, json, sys
sys.path.insert(0, "scripts/gpu")
import machine
doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "gpus": machine.gpus(), "versions": machine.versions(), "command": sys.argv[3],
       "exit": int(sys.argv[2])}
json.dump(doc, open(sys.argv[1], "w"), indent=1)
print(json.dumps(doc))
PY
exit $status
