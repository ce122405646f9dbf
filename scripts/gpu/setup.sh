# Sourced by scripts.gpu.suite on the GPU machine (repo root): installs the plugin into /tmp/site and
# provides clang from the Debian packages carried in .debs/ (the machine has no clang and no registry
# access). The variables every step needs besides (NVLink multicast off, ...) are set by suite.py.
set -euo pipefail
if ! command -v clang-22 >/dev/null && [ -d .debs ]; then
  root=/tmp/clang-root
  debs=$(ls .debs/*.deb | sha1sum)  # clang-22, libclang-cpp22, libllvm22, libclang-common-22-dev, libz3-4
  if [ "$(cat "$root/.debs" 2>/dev/null)" != "$debs" ]; then
    for deb in .debs/*.deb; do dpkg -x "$deb" "$root"; done
    echo "$debs" >"$root/.debs"
  fi
  cat > "$root/clang" <<WRAP
#!/bin/sh
LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/llvm-22/lib exec $root/usr/lib/llvm-22/bin/clang "\$@"
WRAP
  chmod +x "$root/clang"
  export TRITON_RAW_CLANG="$root/clang"
fi
# (Re)install when the plugin's sources differ from what /tmp/site holds: a warm machine keeps /tmp.
stamp=$(find triton_raw_ext runtime passes pyproject.toml -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \
          -o -name '*.cpp' -o -name '*.toml' -o -name '*.txt' \) -not -path '*/__pycache__/*' | sort | xargs cat | sha1sum)
if [ ! -d /tmp/site/triton_raw_ext ] || [ "$(cat /tmp/site/.trx_sources 2>/dev/null)" != "$stamp" ]; then
  rm -rf /tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site . >/tmp/pip.log 2>&1 \
    || { cat /tmp/pip.log; exit 1; }
  echo "$stamp" >/tmp/site/.trx_sources
fi
# The checkout's triton_raw_ext/ must not shadow that install, which maps passes/ and runtime/ into the
# package: no current folder on sys.path for `python3 -m`/`-c`, and the checkout's root after the install
# on PYTHONPATH, where `python3 -m` finds the repository's packages (tutorials, scripts, examples, bench).
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
export PYTHONSAFEPATH=1
