#!/usr/bin/env bash
# Two test "hosts" joined through the roce-netem impairment relay.
#
#   setup.sh NAME_PREFIX        (as root; undo with teardown.sh NAME_PREFIX)
#
#   netns ${P}a                     root netns                      netns ${P}b
#   10.233.0.1/24, fd00:233::1/64   roce-netem relay (pid file)     10.233.0.2/24, fd00:233::2/64
#   TUN ${P}ta  <---- fd ---->   [drop dup reorder delay corrupt]   <---- fd ---->  TUN ${P}tb
#
# The relay creates both TUN devices in the root namespace; they are then moved into the namespaces
# (the relay's file descriptors keep working across the move) and configured there.
#
# Environment:
#   NETEM_ARGS        options for `roce-netem relay` (word-split), e.g. "--seed 7 --dup 0.05 --corrupt 1%"
#   NFT_DROP_PERCENT  N in 0..100: nftables in each namespace drops N% of UDP packets to port 4791
#                     arriving there (so both directions); needs the `nft` command
#   ROCE_NETEM_BIN    the roce-netem binary (default: `cargo build -p roce-netem` and use target/debug)
#   NETNS_STATE_DIR   where relay.pid and relay.log go (default /run/roce-netem/NAME_PREFIX)
#   NETNS_MTU         MTU of the TUN links (default 9000; the TUN maximum is 65535)
#   NETNS_IPV6        0 to disable IPv6 on the TUN links (default 1: the fd00:233::/64 addresses)
set -euo pipefail

die() { echo "setup.sh: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: setup.sh NAME_PREFIX"
P=$1
# Interface names are at most 15 bytes and get "ta"/"tb" appended.
[[ $P =~ ^[A-Za-z0-9_-]{1,13}$ ]] || die "NAME_PREFIX must be 1 to 13 characters of [A-Za-z0-9_-]"

NS_A=${P}a NS_B=${P}b TUN_A=${P}ta TUN_B=${P}tb
ADDR_A=10.233.0.1 ADDR_B=10.233.0.2
ADDR6_A=fd00:233::1 ADDR6_B=fd00:233::2
MTU=${NETNS_MTU:-9000}
IPV6=${NETNS_IPV6:-1}
STATE_DIR=${NETNS_STATE_DIR:-/run/roce-netem/$P}
NFT_DROP_PERCENT=${NFT_DROP_PERCENT:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces and TUN devices)"
command -v ip >/dev/null || die "the ip command (iproute2) is missing"
[ -c /dev/net/tun ] || die "/dev/net/tun is missing (modprobe tun)"
if [ -n "$NFT_DROP_PERCENT" ]; then
    if ! [[ $NFT_DROP_PERCENT =~ ^[0-9]+$ ]] || [ "$NFT_DROP_PERCENT" -gt 100 ]; then
        die "NFT_DROP_PERCENT must be an integer 0..100"
    fi
    command -v nft >/dev/null || die "NFT_DROP_PERCENT needs the nft command (Debian package nftables)"
fi
for ns in "$NS_A" "$NS_B"; do
    [ ! -e "/run/netns/$ns" ] || die "namespace $ns already exists: run teardown.sh $P first"
done
for dev in "$TUN_A" "$TUN_B"; do
    ! ip link show dev "$dev" >/dev/null 2>&1 || die "interface $dev already exists in the root namespace"
done

if [ -z "${ROCE_NETEM_BIN:-}" ]; then
    cargo build --quiet --manifest-path "$REPO/Cargo.toml" -p roce-netem
    ROCE_NETEM_BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug/roce-netem
fi
[ -x "$ROCE_NETEM_BIN" ] || die "roce-netem binary not found at $ROCE_NETEM_BIN"

mkdir -p "$STATE_DIR"
PID_FILE=$STATE_DIR/relay.pid
LOG_FILE=$STATE_DIR/relay.log

ok=0
cleanup() {
    if [ "$ok" -eq 0 ]; then
        echo "setup.sh: failed; tearing down (the relay's log follows)" >&2
        NETNS_STATE_DIR=$STATE_DIR "$HERE/teardown.sh" "$P" >&2 || true
    fi
}
trap cleanup EXIT

ip netns add "$NS_A"
ip netns add "$NS_B"

# shellcheck disable=SC2086 # NETEM_ARGS is a list of options
"$ROCE_NETEM_BIN" relay --a "$TUN_A" --b "$TUN_B" ${NETEM_ARGS:-} >"$LOG_FILE" 2>&1 </dev/null &
RELAY_PID=$!
echo "$RELAY_PID" >"$PID_FILE"

# The relay creates the TUN devices (after installing its signal handlers): wait for both.
for _ in $(seq 200); do
    kill -0 "$RELAY_PID" 2>/dev/null || die "the relay exited early (bad NETEM_ARGS?)"
    if ip link show dev "$TUN_A" >/dev/null 2>&1 && ip link show dev "$TUN_B" >/dev/null 2>&1; then
        break
    fi
    sleep 0.05
done
ip link show dev "$TUN_B" >/dev/null 2>&1 || die "the relay did not create $TUN_A and $TUN_B within 10 s"

ip link set dev "$TUN_A" netns "$NS_A"
ip link set dev "$TUN_B" netns "$NS_B"

# Links first, addresses after: once both links are up, nothing the kernels send at address time
# (IPv6 MLD reports) meets a link that is still down (a write to a down TUN fails with EIO).
link_up() { # NS TUN
    ip -n "$1" link set dev lo up
    if [ "$IPV6" = 0 ]; then
        ip netns exec "$1" sysctl -q -w "net.ipv6.conf.$2.disable_ipv6=1"
    else
        # No link-local address: no router solicitations from the TUN link.
        ip -n "$1" link set dev "$2" addrgenmode none
    fi
    ip -n "$1" link set dev "$2" mtu "$MTU" up
}
add_addresses() { # NS TUN IPV4 IPV6
    ip -n "$1" addr add "$3/24" dev "$2"
    if [ "$IPV6" != 0 ]; then
        ip -n "$1" -6 addr add "$4/64" dev "$2" nodad
    fi
}
link_up "$NS_A" "$TUN_A"
link_up "$NS_B" "$TUN_B"
add_addresses "$NS_A" "$TUN_A" "$ADDR_A" "$ADDR6_A"
add_addresses "$NS_B" "$TUN_B" "$ADDR_B" "$ADDR6_B"

if [ -n "$NFT_DROP_PERCENT" ] && [ "$NFT_DROP_PERCENT" -gt 0 ]; then
    for ns in "$NS_A" "$NS_B"; do
        ip netns exec "$ns" nft -f - <<EOF
table inet roce_netem {
    chain input {
        type filter hook input priority filter; policy accept;
        udp dport 4791 numgen random mod 100 < $NFT_DROP_PERCENT counter drop
    }
}
EOF
    done
fi

ok=1
echo "netns $NS_A ($ADDR_A, $TUN_A) <-> roce-netem relay pid $RELAY_PID <-> netns $NS_B ($ADDR_B, $TUN_B)"
echo "relay: ${NETEM_ARGS:-no impairment}${NFT_DROP_PERCENT:+; nftables drops $NFT_DROP_PERCENT% of udp dport 4791}"
echo "pid file $PID_FILE, log $LOG_FILE; stop with: $HERE/teardown.sh $P"
