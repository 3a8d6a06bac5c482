#!/usr/bin/env bash
# Proves the README's set-up on a clean Debian 12 root: debootstraps a minbase
# bookworm root, copies this checkout in (the working tree's tracked and untracked
# files, uncommitted edits included; nothing git ignores, so no build outputs), and inside it,
# with chroot and as root, runs cmake/install_deps.sh, `cmake --preset release`,
# builds one small program (sha256_bench) and one test (test_base) and runs them.
#
# Why: the machine CI runs on already has every package, so a package missing
# from cmake/install_deps.sh goes unnoticed there — e.g. ocl-icd-opencl-dev,
# which libdnnl-dev's CMake package needs but Debian only recommends, broke
# configure on fresh machines. The root has no CUDA toolkit: configure is
# CPU-only there, as on any machine without nvcc.
#
#   tests/cleanroot/run.sh          # as root (debootstrap, chroot, mount)
#
# The mirror is the first Debian `deb`/`URIs:` entry for bookworm main in this
# machine's apt sources; inside the root apt uses this machine's Debian entries
# for bookworm, bookworm-updates and bookworm-security (copied, other entries
# left out) and its Acquire:: proxy and date-check settings. Environment:
#   KAIROX_CLEANROOT_DROP="pkg ..."  remove these packages from the root's copy of
#                                    install_deps.sh: the run must then fail (a
#                                    negative check, e.g. ocl-icd-opencl-dev)
#   KAIROX_CLEANROOT_MIRROR=URL      use this mirror instead of the host's
#   KAIROX_CLEANROOT_DIR=DIR         where the scratch root goes (default ${TMPDIR:-/tmp})
#   KAIROX_CLEANROOT_CACHE_DIR=DIR   pristine-root cache (default ~/.cache/kairox/cleanroot)
#   KAIROX_CLEANROOT_NO_CACHE=1      debootstrap afresh and cache nothing
#   KAIROX_CLEANROOT_KEEP=1          keep the scratch root (unmounted) after the run
# Only the pristine minbase root is cached (a tarball per mirror and ISO week);
# install_deps.sh always runs afresh, and nothing is kept from the run itself.
set -euo pipefail
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
src=$(cd "$(dirname "$0")/../.." && pwd -P)
suite=bookworm
drop=${KAIROX_CLEANROOT_DROP:-}
cache_dir=${KAIROX_CLEANROOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kairox/cleanroot}
start=$SECONDS
stage() { echo "=== cleanroot [$((SECONDS - start)) s] $*"; }
fail() { echo "=== cleanroot [$((SECONDS - start)) s] FAIL: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "needs root (debootstrap, chroot, mount): run it as root or with sudo"
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || fail "$src is not a git checkout"

# --- The host's apt sources -------------------------------------------------
# The files apt reads, in apt's order.
source_files() {
  [[ -f /etc/apt/sources.list ]] && echo /etc/apt/sources.list
  find /etc/apt/sources.list.d -maxdepth 1 -type f \( -name '*.list' -o -name '*.sources' \) \
    2>/dev/null | LC_ALL=C sort
}

# awk over one-line (*.list) and deb822 (*.sources) files. mode=mirror prints the first
# deb URI for $suite (or stable) with component main; mode=copy prints, verbatim, the
# entries whose suites are $suite, $suite-updates or $suite-security (other repositories,
# e.g. third-party ones whose keys the root lacks, are left out).
read_sources() {
  awk -v mode="$1" -v suite="$suite" '
    function has(list, word,   n, a, i) {
      n = split(list, a, /[ \t]+/)
      for (i = 1; i <= n; i++) if (a[i] == word) return 1
      return 0
    }
    function entry(types, uris, suites, comps, text,   n, a, i, u) {
      if (!has(types, "deb")) return
      n = split(suites, a, /[ \t]+/)
      split(uris, u, /[ \t]+/)
      for (i = 1; i <= n; i++) {
        if (a[i] == "") continue
        if (mode == "mirror" && !found && (a[i] == suite || a[i] == "stable") &&
            has(comps, "main") && u[1] !~ /^cdrom:/) {
          print u[1]; found = 1
        }
        if (mode == "copy" && (a[i] == suite || a[i] == suite "-updates" ||
                               a[i] == suite "-security")) {
          printf "%s\n", text; return
        }
      }
    }
    function flush() {
      if (nf && tolower(f["enabled"]) != "no")
        entry(f["types"], f["uris"], f["suites"], f["components"], stanza)
      delete f; nf = 0; stanza = ""; key = ""
    }
    FNR == 1 { if (deb822) flush(); deb822 = (FILENAME ~ /\.sources$/) }
    deb822 {
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      stanza = stanza $0 "\n"
      if ($0 ~ /^#/) next
      if ($0 ~ /^[ \t]/) { if (key != "") f[key] = f[key] " " $0; next }
      i = index($0, ":"); if (i == 0) next
      key = tolower(substr($0, 1, i - 1)); v = substr($0, i + 1)
      gsub(/^[ \t]+|[ \t]+$/, "", v); f[key] = v; nf++
      next
    }
    {
      line = $0; sub(/#.*/, "", line)
      if (line !~ /^[ \t]*deb[ \t]/) next
      sub(/\[[^]]*\]/, "", line)
      n = split(line, a, /[ \t]+/); k = (a[1] == "") ? 1 : 0
      comps = ""; for (j = 4 + k; j <= n; j++) comps = comps " " a[j]
      entry(a[1 + k], a[2 + k], a[3 + k], comps, $0)
    }
    END { if (deb822) flush() }
  ' "${@:2}"
}

mapfile -t host_sources < <(source_files)
mirror=${KAIROX_CLEANROOT_MIRROR:-}
if [[ -z $mirror && ${#host_sources[@]} -gt 0 ]]; then
  mirror=$(read_sources mirror "${host_sources[@]}")
fi
[[ -n $mirror ]] || fail "no 'deb' entry for $suite main in /etc/apt/sources.list{,.d/*.list,.d/*.sources}; set KAIROX_CLEANROOT_MIRROR"
[[ $mirror =~ ^(https?|ftp|file):/ ]] || fail "debootstrap cannot use the mirror '$mirror'; set KAIROX_CLEANROOT_MIRROR"
arch=$(dpkg --print-architecture)

# --- Scratch dir, outside the source tree; unmounted and removed on exit ------------
workbase=${KAIROX_CLEANROOT_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$workbase"
work=$(mktemp -d "$(cd "$workbase" && pwd -P)/kairox-cleanroot.XXXXXX")
case "$work/" in "$src"/*) rmdir "$work"; fail "the scratch dir must be outside the source tree ($src)";; esac
root=$work/root
mounts=()
cleanup() {
  local rc=$? i
  set +e
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}"
  done
  # Never remove a tree that still has something mounted in it (a bound /dev, say).
  if awk -v w="$work/" '{ if (index($2 "/", w) == 1) bad = 1 } END { exit !bad }' /proc/self/mounts; then
    echo "cleanroot: something is still mounted under $work; not removing it" >&2
  elif [[ ${KAIROX_CLEANROOT_KEEP:-0} == 1 ]]; then
    echo "cleanroot: kept $work" >&2
  else
    rm -rf --one-file-system "$work"
  fi
  return $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command with its output in $work/NAME.log; on failure prints the log's tail.
logged() {
  local name=$1; shift
  if ! "$@" >"$work/$name.log" 2>&1; then
    tail -n 40 "$work/$name.log" >&2
    return 1
  fi
}

# --- debootstrap (installed on the host if missing), or the cached pristine root --------
if ! command -v debootstrap >/dev/null; then
  stage "installing debootstrap on the host"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi
mkdir -p "$root"
key=$(printf '%s %s %s' "$mirror" "$suite" "$arch" | sha256sum | cut -c1-12)
tarball=$cache_dir/$suite-minbase-$arch-$key-$(date +%G-W%V).tar.gz
debootstrap_opts=(--variant=minbase "--arch=$arch")
# https mirrors: apt inside the root needs the CA certificates a net install would have.
[[ $mirror == https:* ]] && debootstrap_opts+=(--include=ca-certificates)
if [[ ${KAIROX_CLEANROOT_NO_CACHE:-0} != 1 && -f $tarball ]]; then
  stage "unpacking the cached pristine $suite minbase root ($tarball)"
  tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -xpzf "$tarball"
else
  stage "debootstrap ${debootstrap_opts[*]} $suite (mirror from the host's apt sources: $mirror)"
  logged debootstrap debootstrap "${debootstrap_opts[@]}" "$suite" "$root" "$mirror" ||
    fail "debootstrap $suite from $mirror (its last lines are above)"
  if [[ ${KAIROX_CLEANROOT_NO_CACHE:-0} != 1 ]]; then
    mkdir -p "$cache_dir"
    tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -cpzf "$tarball.tmp$$" .
    mv "$tarball.tmp$$" "$tarball"
    # Older pristine roots of the same mirror are stale.
    find "$cache_dir" -maxdepth 1 -name "$suite-minbase-$arch-$key-*.tar.gz" ! -path "$tarball" -delete
    stage "cached the pristine root as $tarball"
  fi
fi

# --- What the root takes from the host: resolver, Debian sources, Acquire:: settings ----
rm -f "$root/etc/resolv.conf"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
list_files=() deb822_files=()
for f in "${host_sources[@]}"; do
  if [[ $f == *.sources ]]; then deb822_files+=("$f"); else list_files+=("$f"); fi
done
copied=0
if ((${#list_files[@]})) && read_sources copy "${list_files[@]}" >"$work/host.list" &&
   [[ -s $work/host.list ]]; then
  cp "$work/host.list" "$root/etc/apt/sources.list.d/host-debian.list"; copied=1
fi
if ((${#deb822_files[@]})) && read_sources copy "${deb822_files[@]}" >"$work/host.sources" &&
   [[ -s $work/host.sources ]]; then
  cp "$work/host.sources" "$root/etc/apt/sources.list.d/host-debian.sources"; copied=1
fi
if ((copied)); then
  : >"$root/etc/apt/sources.list"  # debootstrap's one line, now duplicated
  # Keyrings the copied entries name (Signed-By) that the root lacks.
  grep -ohiE '(signed-by[:=] *)/[^] ,]+' "$root"/etc/apt/sources.list.d/host-debian.* |
    sed -E 's/^[^/]*//' | sort -u |
    while IFS= read -r k; do
      [[ -e $root$k || ! -f $k ]] || { mkdir -p "$root$(dirname "$k")"; cp "$k" "$root$k"; }
    done || true
fi
# Proxies and date checks, as the host's apt uses them (nothing about packages).
apt-config dump 2>/dev/null |
  grep -E '^Acquire::(Check-Valid-Until|Check-Date|(https?|ftp)::Proxy[^ ]*|Retries) ' \
  >"$root/etc/apt/apt.conf.d/99host-acquire" || rm -f "$root/etc/apt/apt.conf.d/99host-acquire"

# --- The checkout: the working tree less what git ignores ---------------------------------
# Untracked files too: a tracked file being edited may already name a new one (CMake reads
# it at configure), and the host's own build sees them as well.
stage "copying the checkout (git ls-files --cached --others --exclude-standard) into /src"
mkdir -p "$root/src"
git -C "$src" ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    if [[ -e $src/$f || -L $src/$f ]]; then printf '%s\0' "$f"; fi  # not files deleted in the tree
  done |
  tar -C "$src" --null -T - -cf - | tar -C "$root/src" -xf -
if [[ -n $drop ]]; then
  deps=$root/src/cmake/install_deps.sh
  for pkg in $drop; do
    cp "$deps" "$work/install_deps.before"
    esc=$(printf '%s' "$pkg" | sed 's/[][\.*^$+?(){}|/]/\\&/g')
    sed -E -i "/^packages=\\(/,/\\)/ s/([( ])$esc([ )]|$)/\\1\\2/" "$deps"
    cmp -s "$deps" "$work/install_deps.before" && fail "KAIROX_CLEANROOT_DROP: '$pkg' is not in cmake/install_deps.sh's list"
    stage "NEGATIVE CHECK: dropped $pkg from the root's copy of cmake/install_deps.sh"
  done
fi

# --- Inside the root -----------------------------------------------------------------------
mount -t proc proc "$root/proc"; mounts+=("$root/proc")
mount -t sysfs -o ro sysfs "$root/sys"; mounts+=("$root/sys")
if [[ ! -c $root/dev/null ]]; then  # debootstrap could not mknod: the host's /dev
  mount --bind /dev "$root/dev"; mounts+=("$root/dev")
fi
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c 'cd /src && "$@"' in_root "$@"
}

stage "cmake/install_deps.sh (as root in the clean root; apt output in its log)"
logged install_deps in_root cmake/install_deps.sh || fail "cmake/install_deps.sh (its last lines are above)"
grep -E '^install_deps:' "$work/install_deps.log" || true
echo "installed $(grep -c '^Setting up ' "$work/install_deps.log" || true) packages"

stage "configure: cmake --preset release (no CUDA toolkit in the root: CPU-only)"
in_root cmake --preset release || fail "configure (cmake --preset release) on a clean $suite root"

stage "build: sha256_bench (a program) and test_base (a test) and what they link"
in_root cmake --build --preset release --target sha256_bench test_base ||
  fail "build of sha256_bench test_base on a clean $suite root"

stage "run: ctest -R '^test_base\$', sha256_bench 1 MiB"
in_root ctest --preset release --no-tests=error -R '^test_base$' || fail "test_base on a clean $suite root"
in_root build/tests/sha256_bench 1 1 || fail "sha256_bench on a clean $suite root"

stage "PASS: install_deps.sh + configure + build + test on a clean $suite root"
