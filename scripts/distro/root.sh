#!/usr/bin/env bash
# Makes (once) and prints the path of a Debian root with the distribution's
# RDMA software, for running it over softroce in a chroot:
#
#   scripts/distro/root.sh trixie      # Debian 13: rdma-core 56
#   scripts/distro/root.sh sid         # rdma-core 65
#
# The root is built with debootstrap from the machine's own Debian mirror
# (the URI of its apt sources) and kept under $SOFTROCE_DISTRO_CACHE
# (default /var/cache/softroce/distros), so later runs, and CI on the same
# machine, reuse it. A stamp records the package list it was built with: a
# changed list installs what is new. Needs root (debootstrap, chroot).
set -euo pipefail

suite=${1:?usage: root.sh SUITE (trixie, sid)}
cache=${SOFTROCE_DISTRO_CACHE:-/var/cache/softroce/distros}
root=$cache/$suite

# What the distribution tests run: rdma-core's tools and pyverbs, perftest,
# qperf, UCX, Open MPI, MPICH, libfabric, and a compiler for the header probes
# and MPI programs.
packages=(
  ibverbs-utils rdmacm-utils ibverbs-providers python3-pyverbs libibverbs-dev librdmacm-dev
  perftest qperf ucx-utils libfabric-bin
  openmpi-bin libopenmpi-dev mpich libmpich-dev
  gcc libc6-dev iproute2 procps python3
)
stamp_want="$suite ${packages[*]}"

if [ -f "$root/.softroce-stamp" ] && [ "$(cat "$root/.softroce-stamp")" = "$stamp_want" ]; then
  echo "$root"
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "root.sh: making a Debian root needs root (debootstrap)" >&2; exit 1; }

mirror() {
  # The first main Debian archive among the machine's apt sources (deb822 or
  # one-line format); its host is never written into the repository.
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
  fi
  [ -n "$uri" ] || { echo "root.sh: no Debian mirror in /etc/apt sources" >&2; exit 1; }
  echo "$uri"
}

if ! command -v debootstrap >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

uri=$(mirror)
if [ ! -x "$root/usr/bin/apt-get" ]; then
  rm -rf "$root.partial"
  mkdir -p "$cache"
  echo "root.sh: debootstrap $suite into $root (about a minute)" >&2
  debootstrap --variant=minbase "$suite" "$root.partial" "$uri" >"$cache/$suite.debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/$suite.debootstrap.log" >&2; exit 1; }
  mv "$root.partial" "$root"
fi

echo "deb $uri $suite main" >"$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
for m in proc dev; do
  mountpoint -q "$root/$m" || mount --bind "/$m" "$root/$m"
done
trap 'umount "$root/proc" "$root/dev" 2>/dev/null || true' EXIT
echo "root.sh: installing the RDMA packages into $root (a few minutes)" >&2
# The mirror may serve a frozen snapshot whose sid Release is past its
# Valid-Until: the packages are still the ones wanted.
apt=(apt-get -o Acquire::Check-Valid-Until=false)
chroot "$root" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" update -qq
chroot "$root" env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${packages[@]}" \
  >"$cache/$suite.apt.log" 2>&1 || { tail -n 20 "$cache/$suite.apt.log" >&2; exit 1; }
chroot "$root" apt-get clean
echo "$stamp_want" >"$root/.softroce-stamp"
echo "$root"
