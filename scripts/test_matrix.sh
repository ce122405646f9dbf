#!/usr/bin/env bash
# The CPU suite (lit and pytest) against other Triton releases, each in its own virtual environment
# under .venv-matrix/ that sees this Python's other packages (torch, llvmlite, the test tools) and
# holds that Triton and the NVSHMEM wheel triton_raw_ext/stack.py pairs it with:
#   bash scripts/test_matrix.sh            every tested Triton except the one installed here
#   bash scripts/test_matrix.sh 3.8.0      just these
# Run scripts/install.sh first (scripts/test.sh does). Extra pytest arguments: PYTEST_ARGS. Every
# triton_raw_ext.nvshmem call is compiled once, by scripts/test.sh; here the representative kernels
# do (the exhaustive compile takes 10 minutes more with per-SM NVSHMEM on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
declare -A nvshmem
while read -r triton wheel; do nvshmem[$triton]=$wheel; done < <($PY triton_raw_ext/stack.py matrix)
if [ "$#" -gt 0 ]; then
  versions=("$@")
else
  installed=$($PY -c "from importlib.metadata import version; print(version('triton'))")
  mapfile -t versions < <(printf '%s\n' "${!nvshmem[@]}" | sort -V | grep -vx "$installed")
fi
failed=()
for v in "${versions[@]}"; do
  venv=.venv-matrix/triton-$v
  [ -n "${nvshmem[$v]:-}" ] || { echo "test_matrix: $v is not a tested Triton (${!nvshmem[*]})"; exit 2; }
  echo "== triton $v, ${nvshmem[$v]} ($venv)"
  [ -x "$venv/bin/python" ] || $PY -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install -q "triton==$v" "${nvshmem[$v]}"
  "$venv/bin/python" -m pip install -q --no-deps -e .
  # lit and pytest both run, so that one report shows every failure of this release
  (export PATH="$PWD/$venv/bin:$PATH"
   lit_ok=0; python -c 'import sys; from lit.main import main; sys.argv[0] = "lit"; main()' -q lit_tests || lit_ok=1
   python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-auto}" --deselect \
     test/test_nvshmem_library.py::test_every_call_compiles ${PYTEST_ARGS:-} && exit "$lit_ok") ||
    failed+=("$v")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "test_matrix: failed on triton ${failed[*]}"
  exit 1
fi
echo "test_matrix: passed on triton ${versions[*]}"
