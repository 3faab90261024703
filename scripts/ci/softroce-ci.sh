#!/bin/sh
# Runs a project's RDMA tests over softroce on a stock Debian or Ubuntu CI
# runner: no kernel module, no RDMA hardware, and no root beyond installing
# packages.
#
#   softroce-ci.sh [--packages "PKG..."] -- COMMAND [ARGS...]
#
# 1. installs rdma-core's user space (ibverbs-utils, rdmacm-utils and the
#    -dev headers) and any --packages the tests need, with apt-get (through
#    sudo unless root; already installed packages are left alone);
# 2. builds softroce's command and libibverbs.so.1/librdmacm.so.1 from the
#    source tree this script is in (cargo 1.89 or newer on PATH, e.g. from
#    rustup; SOFTROCE_TARGET_DIR chooses cargo's target directory);
# 3. runs COMMAND under `softroce run`, which puts softroce's libraries and
#    its `rdma` first and shows its devices in /sys/class/infiniband, as
#    kernel rxe would; COMMAND's exit status is the script's.
#
# Every process COMMAND starts shares the host's softroce devices (the first
# is the runner's network interface, softroce_lo is 127.0.0.1), so a test
# that starts a server and a client, or mpirun's ranks, just works.
set -eu

packages=""
while [ $# -gt 0 ]; do
  case "$1" in
    --packages) packages="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "softroce-ci.sh: no command given (softroce-ci.sh -- COMMAND...)" >&2; exit 2; }

src=$(cd "$(dirname "$0")/../.." && pwd)

# 1. Packages.
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
need=""
for p in ibverbs-utils rdmacm-utils libibverbs-dev librdmacm-dev $packages; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    need="$need $p"
  fi
done
if [ -n "$need" ]; then
  echo "softroce-ci.sh: installing$need" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # shellcheck disable=SC2086 # one word a package
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

# 2. softroce.
command -v cargo >/dev/null 2>&1 || { echo "softroce-ci.sh: cargo (1.89 or newer) is not on PATH" >&2; exit 2; }
target=${SOFTROCE_TARGET_DIR:-$src/target}
(cd "$src" && CARGO_TARGET_DIR="$target" cargo build --release --quiet -p softroce-cli -p softroce-ibverbs)

# 3. The tests.
exec "$target/release/softroce" run -- "$@"
