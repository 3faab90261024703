#!/usr/bin/env bash
# Regenerates tests/data/golden-pcaps/tshark/*.txt: tshark's own reading of
# every RoCEv2 packet in the golden captures (frame number, BTH opcode,
# destination QP, PSN). The golden-capture tests compare softroce's parser
# against these listings, and re-run tshark to check them when it is installed.
set -euo pipefail
dir="$(cd "$(dirname "$0")/.." && pwd)/tests/data/golden-pcaps"
mkdir -p "$dir/tshark"
for f in "$dir"/*.pcap.gz; do
  name="$(basename "$f" .pcap.gz)"
  tshark -r "$f" --disable-protocol rpcordma -Y 'udp.dstport == 4791' -T fields \
    -e frame.number -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn \
    -E separator=' ' 2>/dev/null >"$dir/tshark/$name.txt"
done
