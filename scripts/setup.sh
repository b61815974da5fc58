#!/usr/bin/env bash
# Everything the test suite needs on a fresh Debian or Ubuntu machine, idempotent (a rerun
# changes nothing and takes seconds). README's second command runs it; .ci/run runs that command.
#   1. the distribution's packages: podman, runc and debootstrap (the container tests and the
#      stand-in builder image), chromium (the HTML report test), qemu-user-static,
#      binfmt-support, libc6-arm64-cross and g++-aarch64-linux-gnu (aarch64 rows, emulated);
#   2. binfmt_misc mounted on /proc/sys/fs/binfmt_misc and qemu-aarch64 registered there;
#   3. wheelwright's .venv (scripts/bootstrap.sh);
#   4. the stand-in builder images for CUDA 13.0 (scripts/make_builder_image.py), so the container
#      tests build wheels with cibuildwheel for real; podman runs with builder/containers.conf
#      (CONTAINERS_CONF; the machine's own configuration is not touched). Cached by their recipe
#      hash: the tag holds the hash and the root filesystem's tarball is kept under the
#      wheelwright cache (<cache>/builder-images/); about 4.5 minutes cold, seconds warm. On an
#      x86_64 machine the arm64 stand-in (aarch64 rows built in a container under emulation) is
#      made at the same time, in the background, its output in a log file: about 10 minutes cold.
# Steps 1, 2 and making the image (debootstrap, chroot) need root: it runs them as root or through
# passwordless sudo. With neither, it changes nothing it cannot and exits 3 before any test runs,
# printing the apt-get line (or the command) that a root shell must run first.
#
#   scripts/setup.sh              set up (as above)
#   scripts/setup.sh --packages   print the distribution packages it installs, one a line
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(podman runc debootstrap chromium qemu-user-static binfmt-support libc6-arm64-cross g++-aarch64-linux-gnu)
BINFMT=/proc/sys/fs/binfmt_misc

if [[ ${1:-} == --packages ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
elif (($#)); then
  echo "usage: scripts/setup.sh [--packages]" >&2
  exit 2
fi

say() { echo "==> $*" >&2; }
refuse() { # what a root shell must run, then exit 3 (a tool is missing), before any test runs
  echo "error: $1" >&2
  shift
  printf '  %s\n' "$@" >&2
  echo "then run scripts/setup.sh again" >&2
  exit 3
}

started=$(date +%s)
SUDO=()
as_root=yes
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n) # GitHub's runners: passwordless sudo
  else
    as_root=no
  fi
fi

# 1. The distribution's packages
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  refuse "scripts/setup.sh installs with apt-get (Debian, Ubuntu); this machine has none. Install these packages' equivalents:" \
    "${PACKAGES[*]}"
fi
missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  if [[ $as_root == no ]]; then
    refuse "missing distribution packages: ${missing[*]}; installing them needs root (or passwordless sudo). As root:" \
      "apt-get update && apt-get install -y ${missing[*]}"
  fi
  say "installing ${missing[*]} from the distribution's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=600 -y -q) # waits for another apt or dpkg run
  if ! "${apt[@]}" install "${missing[@]}"; then
    "${apt[@]}" update
    "${apt[@]}" install "${missing[@]}"
  fi
fi

# 2. qemu-aarch64 registered with the kernel's binfmt_misc
if ! mountpoint -q "$BINFMT"; then
  [[ $as_root == yes ]] || refuse "binfmt_misc is not mounted on $BINFMT. As root:" \
    "mount -t binfmt_misc binfmt_misc $BINFMT && update-binfmts --enable qemu-aarch64"
  say "mounting binfmt_misc on $BINFMT"
  "${SUDO[@]}" mount -t binfmt_misc binfmt_misc "$BINFMT" ||
    refuse "cannot mount binfmt_misc on $BINFMT (a container without the privilege to?). On the host, as root:" \
      "mount -t binfmt_misc binfmt_misc $BINFMT && update-binfmts --enable qemu-aarch64"
fi
registered() { [[ -f $BINFMT/qemu-aarch64 ]] && head -n 1 "$BINFMT/qemu-aarch64" | grep -qx enabled; }
if ! registered; then
  [[ $as_root == yes ]] || refuse "qemu-aarch64 is not registered in $BINFMT. As root:" \
    "update-binfmts --enable qemu-aarch64"
  say "registering qemu-aarch64 in $BINFMT"
  "${SUDO[@]}" update-binfmts --enable qemu-aarch64 || true
  registered || refuse "qemu-aarch64 is still not registered in $BINFMT after update-binfmts --enable qemu-aarch64; see:" \
    "update-binfmts --display qemu-aarch64"
fi
say "qemu-aarch64 registered: $(sed -n 's/^interpreter //p' "$BINFMT/qemu-aarch64")"

# 3. wheelwright's .venv
./scripts/bootstrap.sh

# 4. The stand-in builder image. Making it needs root (debootstrap, chroot); reusing or importing
# it does not. PATH and HOME stay the caller's so the same Pythons and the same cache are found
# as in the tests.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/builder/containers.conf}"
image_started=$(date +%s)
make_image() {
  "${SUDO[@]}" env "PATH=$PATH" "HOME=$HOME" "CONTAINERS_CONF=$CONTAINERS_CONF" \
    ${WHEELWRIGHT_CACHE:+"WHEELWRIGHT_CACHE=$WHEELWRIGHT_CACHE"} \
    .venv/bin/python scripts/make_builder_image.py --train 13.0 "$@"
}
arm64_pid=""
if [[ $(uname -m) == x86_64 ]]; then
  arm64_log=$(mktemp "${TMPDIR:-/tmp}/wheelwright-arm64-standin.XXXXXX.log")
  make_image --arch aarch64 >"$arm64_log" 2>&1 &
  arm64_pid=$!
  say "making the arm64 stand-in at the same time, under emulation (log: $arm64_log)"
fi
if ! make_image; then
  [[ -z $arm64_pid ]] || kill "$arm64_pid" 2>/dev/null || true
  [[ $as_root == yes ]] || refuse "the stand-in builder image could not be made without root (above). As root, from $PWD:" \
    "env PATH=$(printf %q "$PATH") HOME=$(printf %q "$HOME") .venv/bin/python scripts/make_builder_image.py --train 13.0"
  exit 4
fi
say "the stand-in builder image is ready after $(($(date +%s) - image_started)) s"
if [[ -n $arm64_pid ]]; then
  if ! wait "$arm64_pid"; then
    tail -n 40 "$arm64_log" >&2
    [[ $as_root == yes ]] || refuse "the arm64 stand-in could not be made without root (above). As root, from $PWD:" \
      "env PATH=$(printf %q "$PATH") HOME=$(printf %q "$HOME") .venv/bin/python scripts/make_builder_image.py --train 13.0 --arch aarch64"
    echo "error: the arm64 stand-in builder image could not be made (its log: $arm64_log)" >&2
    exit 4
  fi
  say "the arm64 stand-in builder image is ready after $(($(date +%s) - image_started)) s ($(tail -n 1 "$arm64_log"))"
  rm -f "$arm64_log"
fi
say "set up in $(($(date +%s) - started)) s"
