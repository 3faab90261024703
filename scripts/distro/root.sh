#!/usr/bin/env bash
# Makes (once) and prints the path of a Debian root with the distribution's
# RDMA software, for running it over softroce in a chroot:
#
#   scripts/distro/root.sh trixie      # Debian 13: rdma-core 56
#   scripts/distro/root.sh sid         # rdma-core 65
#   scripts/distro/root.sh bookworm    # Debian 12: rdma-core 44
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
# rdma-core's own test suite (pyverbs' unittest suite, run by the installed
# python3-pyverbs), from Debian's source package of the release's rdma-core:
# its tests/ only, in /opt/rdma-core-src (crates/softroce-cli/tests/distros/
# rdma_core_suite.rs runs it). patch and xz-utils unpack the source with
# Debian's patches.
case $suite in
  trixie | bookworm) suite_dir=/opt/rdma-core-src ;;
  *) suite_dir= ;;
esac
[ -z "$suite_dir" ] || packages+=(patch xz-utils)
stamp_want="$suite ${packages[*]}${suite_dir:+ source:rdma-core:tests:$suite_dir}"

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
[ -z "$suite_dir" ] || echo "deb-src $uri $suite main" >>"$root/etc/apt/sources.list"
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
if [ -n "$suite_dir" ]; then
  # The mirror may lack the .dsc (so `apt-get source` fails) while serving
  # the tarballs: take the URIs and hashes from its Sources index, fetch
  # them with apt's own checked download, unpack the upstream tarball and
  # apply Debian's patches (debian/patches/series) as dpkg-source would.
  echo "root.sh: unpacking rdma-core's test suite into $root$suite_dir" >&2
  work=/var/tmp/rdma-core-source
  rm -rf "$root$work" "$root$suite_dir"
  mkdir -p "$root$work" "$root$suite_dir"
  cat >"$root$work/unpack.sh" <<'UNPACK'
set -eu
cd "$1"
shift
"$@" source --print-uris -qq rdma-core >uris
grep -q '\.orig\.tar\.' uris || { echo "no rdma-core source in the Sources index"; cat uris; exit 1; }
grep -v '\.dsc ' uris | while read -r uri file _size hash; do
  /usr/lib/apt/apt-helper download-file "$(echo "$uri" | tr -d "'")" "$PWD/$file" "$hash"
done
mkdir src
tar -xf ./*.orig.tar.* -C src --strip-components=1
tar -xf ./*.debian.tar.* -C src
cd src
if [ -f debian/patches/series ]; then
  grep -v '^#' debian/patches/series | while read -r p _; do
    [ -z "$p" ] || patch -p1 -s <"debian/patches/$p"
  done
fi
dpkg-parsechangelog -l debian/changelog -S Version 2>/dev/null || sed -n '1s/.*(\(.*\)).*/\1/p' debian/changelog
UNPACK
  if chroot "$root" sh "$work/unpack.sh" "$work" "${apt[@]}" >"$cache/$suite.source.log" 2>&1; then
    src=$root$work/src
    [ -f "$src/tests/run_tests.py" ] || { echo "root.sh: no tests/run_tests.py in rdma-core's source" >&2; exit 1; }
    # run_tests.py imports only the tests package (args_parser, base, utils...).
    cp -a "$src/tests" "$root$suite_dir/tests"
    echo "source $(tail -n 1 "$cache/$suite.source.log")" >"$root$suite_dir/VERSION"
  else
    # Not served (the mirror has no 44.0 tarball): python3-pyverbs ships the
    # same tests/, built from that source, as documentation (gzipped).
    docs=$root/usr/share/doc/rdma-core/tests
    [ -f "$docs/run_tests.py" ] || { tail -n 20 "$cache/$suite.source.log" >&2; exit 1; }
    echo "root.sh: rdma-core's source is not served; taking python3-pyverbs' copy of its tests" >&2
    cp -a "$docs" "$root$suite_dir/tests"
    find "$root$suite_dir/tests" -name '*.gz' -exec gzip -d {} +
    echo "python3-pyverbs $(chroot "$root" dpkg-query -W -f '${Version}' python3-pyverbs)" >"$root$suite_dir/VERSION"
  fi
  rm -rf "${root:?}$work"
fi
chroot "$root" apt-get clean
echo "$stamp_want" >"$root/.softroce-stamp"
echo "$root"
