"""The software switch across network namespaces joined by a veth pair (docs/switch.md,
"Network namespaces"): the switch process in one namespace, the 4 hosts in another, every
address still in 127.0.0.0/8 (`route_localnet` lets 127/8 cross the veth inside these private
namespaces), nothing reaching the machine's own network. Needs `unshare -rn` (a user and network
namespace), `nsenter` and `ip`; skipped with the reason where the machine does not allow them."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from helpers import REPO

SCRIPT = r"""
set -e
BIN=$1; S=$2
unshare -n sleep 60 & PID=$!          # the hosts' namespace (a child of this one)
trap 'kill $PID ${SW:-} 2>/dev/null || true' EXIT
sleep 0.2
ip link add vsw type veth peer name vh
ip link set vh netns $PID
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
echo 1 > /proc/sys/net/ipv4/conf/vsw/route_localnet
ip addr add 127.70.0.5/32 dev vsw
ip link set vsw up
ip route add 127.70.0.0/24 dev vsw
nsenter -t $PID -n sh -c 'set -e; echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
  echo 1 > /proc/sys/net/ipv4/conf/vh/route_localnet
  for i in 1 2 3 4; do ip addr add 127.70.0.$i/32 dev vh; done
  ip link set vh up; ip route add 127.70.0.0/24 dev vh'
$BIN switch --scenario $S --node 4 --ip-base 127.70.0.1 > sw.out &
SW=$!
sleep 0.3
rc=0
nsenter -t $PID -n timeout 30 $BIN hosts --scenario $S --ip-base 127.70.0.1 --timeout-s 20 > hosts.out || rc=$?
kill $SW; wait $SW || true
echo "hosts_exit $rc"
# /proc/net/dev is this namespace's (sysfs still shows the machine's)
sed 's/:/ /' /proc/net/dev | awk '$1 == "vsw" { print "veth_rx_packets", $3; print "veth_tx_packets", $11 }'
"""


def _why_not() -> str | None:
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    probe = subprocess.run(
        ["unshare", "-rn", "sh", "-c", "ip link add vsw type veth peer name vh && echo 1 > "
         "/proc/sys/net/ipv4/conf/all/route_localnet && unshare -n true"],
        capture_output=True, text=True, timeout=20,
    )
    if probe.returncode != 0:
        return f"network namespaces with veth pairs are not allowed here: {probe.stderr.strip()[:200]}"
    return None


def test_a_switch_and_its_hosts_in_two_namespaces_joined_by_veth_reduce_exactly(tmp_path) -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    from reducelab import swswitch

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    (tmp_path / "ns.sh").write_text(SCRIPT)
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "ns.sh", str(swswitch.find_binary()), str(scenario)],
        cwd=tmp_path, capture_output=True, text=True, timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert facts["hosts_exit"] == "0", (tmp_path / "hosts.out").read_text()[-2000:] + proc.stderr[-2000:]
    hosts = json.loads((tmp_path / "hosts.out").read_text())
    assert [h["host"] for h in hosts] == [0, 1, 2, 3]
    assert all(c["verified"] and c["stats"]["bad_blocks"] == 0 for h in hosts for c in h["collectives"])
    sw_lines = (tmp_path / "sw.out").read_text().splitlines()
    assert sw_lines[0] == "ready 4"
    d = json.loads(sw_lines[1])["data_plane"]
    # 256 blocks x (3 contributions + the leader's broadcast) + completion notices, and every
    # one of them crossed the veth pair (in both directions), not the loopback device
    assert d["rx_packets"] >= 1024 and d["foreign"] == 0 and d["malformed"] == 0, d
    assert int(facts["veth_rx_packets"]) >= d["rx_packets"] and int(facts["veth_tx_packets"]) >= d["tx_packets"], facts
