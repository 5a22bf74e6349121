#!/usr/bin/env bash
# Installs everything hetdpt_mm needs into the Python environment of $PYTHON.
# Idempotent: every step first checks whether it is already satisfied.
#
#   PYTHON              interpreter to install into (required)
#   HETDPT_WHEELHOUSE   directory with a prebuilt mmcv-2.1.0 wheel (optional)
#   HETDPT_CACHE        where a locally built mmcv wheel is kept
#                       (default: ~/.cache/hetdpt_mm)
set -euo pipefail

: "${PYTHON:?set PYTHON to the interpreter to install into}"
# Absolute, without resolving the venv's symlink: the build runs elsewhere.
case "$PYTHON" in */*) PYTHON="$(realpath -s "$PYTHON")" ;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${HETDPT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hetdpt_mm}"
MMCV_VERSION=2.1.0
TORCH_VERSION=2.14.1

say() { echo "[install] $*"; }
pip() { "$PYTHON" -m pip "$@"; }
py_ok() { "$PYTHON" -c "$1" >/dev/null 2>&1; }

# 1. Build tools. mmcv's setup.py and mmengine's `mmdet::` config lookup
#    import pkg_resources, which setuptools 80 removed.
if py_ok "import setuptools, wheel, sys; sys.exit(int(setuptools.__version__.split('.')[0]) >= 80)"; then
  say "setuptools<80 and wheel: present"
else
  say "installing setuptools<80 and wheel"
  pip install -q 'setuptools<80' wheel
fi

# 2. torch + torchvision. A torch of the supported minor version (any build:
#    CPU or CUDA) is kept so that GPU users keep their CUDA wheels.
if py_ok "import torch, torchvision; assert torch.__version__.startswith('${TORCH_VERSION%.*}')"; then
  say "torch: keeping $("$PYTHON" -c 'import torch; print(torch.__version__)')"
else
  say "installing torch==${TORCH_VERSION} torchvision (a few minutes)"
  # torch asks for any setuptools >= 77: keep the one of step 1, which a
  # source build of mmcv (step 3) still needs.
  pip install -r "$ROOT/requirements/torch.txt" 'setuptools<80'
fi
TORCH_INSTALLED="$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')"
PY_TAG="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"

# 3. mmcv with compiled ops.
find_wheel() {  # $1 = directory; prints the first matching mmcv wheel
  [ -d "$1" ] || return 0
  ls "$1"/mmcv-${MMCV_VERSION}-${PY_TAG}-${PY_TAG}-linux_*.whl 2>/dev/null | head -n 1
}
check_sums() {  # $1 = wheel; verifies it against SHA256SUMS beside it, if any
  local dir sums
  dir="$(dirname "$1")"; sums="$dir/SHA256SUMS"
  [ -f "$sums" ] || return 0
  (cd "$dir" && grep " $(basename "$1")\$" SHA256SUMS | sha256sum -c --quiet -) ||
    { echo "[install] checksum mismatch for $1" >&2; exit 1; }
}
build_mmcv_from_source() {  # $1 = output directory
  local work
  work="$(mktemp -d)"
  say "no mmcv ${MMCV_VERSION} wheel for torch ${TORCH_INSTALLED}: building it from source"
  say "this compiles the CPU ops once per machine (8 minutes measured on 2 idle cores, much longer on busy ones)"
  pip install -q -r "$ROOT/requirements/build.txt"
  pip download -q --no-deps --no-build-isolation --no-binary :all: \
    -d "$work" "mmcv==${MMCV_VERSION}"
  tar -xzf "$work"/mmcv-${MMCV_VERSION}.tar.gz -C "$work"
  # torch >= 2.10 headers need C++20; this is the only change to mmcv.
  sed -i 's/-std=c++17/-std=c++20/g' "$work/mmcv-${MMCV_VERSION}/setup.py"
  local started=$SECONDS
  # Python's own CFLAGS (and the caller's) plus -g0: their -g (debug info for
  # every torch header each file includes) was 60 % of the compile time; the
  # code is the same. setuptools' distutils uses these instead of Python's, the
  # old one appends them: -g0 comes last either way.
  local cflags
  cflags="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("CFLAGS"))')"
  cflags="$cflags${CFLAGS:+ $CFLAGS} -g0"
  # ninja is found on PATH: the venv's bin, which a venv run by path lacks.
  ( cd "$work/mmcv-${MMCV_VERSION}" &&
    PATH="$(dirname "$PYTHON"):$PATH" CFLAGS="$cflags" \
    MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS="$(nproc)" \
      "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" -v . 2>&1 |
      while IFS= read -r line; do
        case "$line" in
          *"building '"*|*"Building wheel"*|*"Created wheel"*|*error*|*Error*) say "  $line" ;;
          *.cpp*) printf '.' ;;
        esac
      done; echo )
  mkdir -p "$1"
  local built
  built="$(ls "$work"/dist/mmcv-${MMCV_VERSION}-*.whl)"
  cp "$built" "$1.tmp.$$" && mv "$1.tmp.$$" "$1/$(basename "$built")"
  rm -rf "$work"
  say "built $(basename "$built") in $((SECONDS - started)) s, cached in $1"
}

if py_ok "import mmcv, mmcv.ops; assert mmcv.__version__ == '${MMCV_VERSION}'"; then
  say "mmcv ${MMCV_VERSION} with ops: present"
else
  WHEEL=""
  if [ -n "${HETDPT_WHEELHOUSE:-}" ]; then
    if [ "$TORCH_INSTALLED" = "$TORCH_VERSION" ]; then
      WHEEL="$(find_wheel "$HETDPT_WHEELHOUSE")"
      [ -n "$WHEEL" ] && check_sums "$WHEEL"
    fi
    [ -n "$WHEEL" ] || say "HETDPT_WHEELHOUSE=$HETDPT_WHEELHOUSE has no mmcv ${MMCV_VERSION} ${PY_TAG} wheel for torch ${TORCH_INSTALLED}"
  fi
  BUILD_CACHE="$CACHE/wheels/torch-${TORCH_INSTALLED}"
  [ -n "$WHEEL" ] || WHEEL="$(find_wheel "$BUILD_CACHE")"
  if [ -z "$WHEEL" ]; then
    build_mmcv_from_source "$BUILD_CACHE"
    WHEEL="$(find_wheel "$BUILD_CACHE")"
  fi
  say "installing $WHEEL"
  pip install -q "$WHEEL"
fi

# 4. The OpenMMLab toolboxes, timm and the rest (with the deploy, width,
#    vis and docs extras: the tests export to ONNX, width-prune, log to
#    TensorBoard and build the docs), then hetdpt_mm itself.
if "$PYTHON" - "$ROOT" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
from pathlib import Path
from pip._vendor.packaging.requirements import Requirement
root = Path(sys.argv[1])
version('hetdpt_mm')
for name in ('runtime.txt', 'tests.txt', 'deploy.txt', 'width.txt',
             'vis.txt', 'docs.txt'):
    for line in (root / 'requirements' / name).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            req = Requirement(line)
            assert req.specifier.contains(version(req.name), prereleases=True), line
EOF
then
  say "python requirements and hetdpt_mm: present"
else
  say "installing python requirements and hetdpt_mm (editable)"
  pip install -q -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
    -r "$ROOT/requirements/deploy.txt" -r "$ROOT/requirements/width.txt" \
    -r "$ROOT/requirements/vis.txt" -r "$ROOT/requirements/docs.txt"
  pip install -q --no-build-isolation --no-deps -e "$ROOT"
fi
say "done"
