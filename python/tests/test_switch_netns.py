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


FABRIC = r"""
set -e
BIN=$1; S=$2
P=127.71.0
# this namespace: the two spines (nodes 10, 11); A: leaf 0 (node 0) and hosts 0-3 (nodes 1-4);
# B: leaf 1 (node 5) and hosts 4-7 (nodes 6-9). Each leaf reaches the spines over a veth pair.
unshare -n sleep 60 & A=$!
unshare -n sleep 60 & B=$!
trap 'kill $A $B ${PIDS:-} 2>/dev/null || true' EXIT
sleep 0.2
echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet
for side in a b; do
  ip link add r$side type veth peer name v$side
  echo 1 > /proc/sys/net/ipv4/conf/r$side/route_localnet
  ip link set r$side up
done
ip link set va netns $A
ip link set vb netns $B
ip addr add $P.11/32 dev ra
ip addr add $P.12/32 dev ra
for i in 1 2 3 4 5; do ip route add $P.$i/32 dev ra; done
for i in 6 7 8 9 10; do ip route add $P.$i/32 dev rb; done
# inside a leaf's namespace: its own addresses on the veth end, `lo` up (the leaf and its
# hosts talk through it) but without 127.0.0.1/8, so the spines' addresses leave by the veth
setup='set -e; echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet; echo 1 > /proc/sys/net/ipv4/conf/$1/route_localnet
  for i in $2; do ip addr add '$P'.$i/32 dev $1; done
  ip link set $1 up; ip link set lo up; ip addr del 127.0.0.1/8 dev lo
  ip route add '$P'.11/32 dev $1; ip route add '$P'.12/32 dev $1'
nsenter -t $A -n sh -c "$setup" - va "1 2 3 4 5"
nsenter -t $B -n sh -c "$setup" - vb "6 7 8 9 10"
PIDS=
$BIN switch --scenario $S --node 10 --ip-base $P.1 > sw10.out & PIDS="$PIDS $!"
$BIN switch --scenario $S --node 11 --ip-base $P.1 > sw11.out & PIDS="$PIDS $!"
nsenter -t $A -n $BIN switch --scenario $S --node 0 --ip-base $P.1 > sw0.out & PIDS="$PIDS $!"
nsenter -t $B -n $BIN switch --scenario $S --node 5 --ip-base $P.1 > sw5.out & PIDS="$PIDS $!"
sleep 0.5
nsenter -t $A -n timeout 40 $BIN hosts --scenario $S --hosts 0,1,2,3 --ip-base $P.1 --timeout-s 30 > hostsA.out & HA=$!
nsenter -t $B -n timeout 40 $BIN hosts --scenario $S --hosts 4,5,6,7 --ip-base $P.1 --timeout-s 30 > hostsB.out & HB=$!
ra=0; rb=0
wait $HA || ra=$?
wait $HB || rb=$?
kill $PIDS; wait $PIDS || true
PIDS=
echo "hosts_exit $ra $rb"
sed 's/:/ /' /proc/net/dev | awk '$1 == "ra" || $1 == "rb" { print $1 "_rx_packets", $3; print $1 "_tx_packets", $11 }'
"""


def test_a_fat_tree_of_four_switch_processes_in_three_namespaces_reduces_exactly(tmp_path) -> None:
    """The 2-level fat tree (scenarios/switch/fat_tree_canary.toml: 2 leaves, 2 spines, 8 hosts)
    with each leaf and its 4 hosts in a namespace of its own and both spines in a third, the
    leaves joined to the spines by veth pairs: every host verified, and the spines' traffic
    crossed the veth pairs."""
    why = _why_not()
    if why:
        pytest.skip(why)
    from reducelab import swswitch

    scenario = REPO / "scenarios/switch/fat_tree_canary.toml"
    (tmp_path / "fabric.sh").write_text(FABRIC)
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "fabric.sh", str(swswitch.find_binary()), str(scenario)],
        cwd=tmp_path, capture_output=True, text=True, timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    outs = [(tmp_path / f).read_text() for f in ("hostsA.out", "hostsB.out")]
    assert facts["hosts_exit"] == "0 0", "".join(o[-1500:] for o in outs) + proc.stderr[-2000:]
    hosts = json.loads(outs[0]) + json.loads(outs[1])
    assert sorted(h["host"] for h in hosts) == list(range(8))
    assert all(c["verified"] and c["stats"]["bad_blocks"] == 0 for h in hosts for c in h["collectives"])
    spines_rx = spines_tx = 0
    for node in (0, 5, 10, 11):
        lines = (tmp_path / f"sw{node}.out").read_text().splitlines()
        assert lines[0] == f"ready {node}", lines
        d = json.loads(lines[1])["data_plane"]
        assert d["foreign"] == 0 and d["malformed"] == 0, (node, d)
        if node >= 10:
            spines_rx += d["rx_packets"]
            spines_tx += d["tx_packets"]
    # half the blocks are led in the other leaf: their contributions and results cross a spine,
    # and everything a spine received or sent crossed a veth pair
    assert spines_rx >= 256, spines_rx
    assert sum(int(facts[f"r{s}_rx_packets"]) for s in "ab") >= spines_rx, facts
    assert sum(int(facts[f"r{s}_tx_packets"]) for s in "ab") >= spines_tx, facts
    # the coordinator (host 0) answered the other namespace's completion notices for its
    # protocol's linger (8 retransmission timeouts of 200 ms) after completing
    h0 = next(h for h in hosts if h["host"] == 0)
    assert h0["elapsed_s"] >= h0["collectives"][0]["completed_s"] + 1.5, h0


REMOTE = r"""
set -e
BIN=$1; S=$2
# Not loopback: the switch at 10.77.0.5 in this namespace, the hosts at 10.77.0.1-4 in a child
# namespace, on either end of a veth pair, placed by an endpoints file (docs/switch.md,
# "Across machines"). These private namespaces reach no real network.
unshare -n sleep 60 & PID=$!
trap 'kill $PID ${SW:-} 2>/dev/null || true' EXIT
sleep 0.2
ip link add vsw type veth peer name vh
ip link set vh netns $PID
ip addr add 10.77.0.5/24 dev vsw
ip link set vsw up
nsenter -t $PID -n sh -c 'set -e; for i in 1 2 3 4; do ip addr add 10.77.0.$i/24 dev vh; done; ip link set vh up'
printf '4 10.77.0.5:47000\n0 10.77.0.1:47000\n1 10.77.0.2:47000\n2 10.77.0.3:47000\n3 10.77.0.4:47000\n' > ep.txt
$BIN switch --scenario $S --node 4 --endpoints ep.txt > sw.out &
SW=$!
sleep 0.3
rc=0
nsenter -t $PID -n timeout 30 $BIN hosts --scenario $S --endpoints ep.txt --timeout-s 20 > hosts.out || rc=$?
kill $SW; wait $SW || true
echo "hosts_exit $rc"
sed 's/:/ /' /proc/net/dev | awk '$1 == "vsw" { print "veth_rx_packets", $3; print "veth_tx_packets", $11 }'
"""


def test_a_switch_and_hosts_at_non_loopback_addresses_from_an_endpoints_file_reduce_exactly(tmp_path) -> None:
    """The multi-machine layout: every node at an address of its own outside 127/8 (private
    10.77.0.0/24 addresses in two namespaces joined by a veth pair), given by `--endpoints`."""
    why = _why_not()
    if why:
        pytest.skip(why)
    from reducelab import swswitch

    scenario = REPO / "scenarios/switch/star4_canary.toml"
    (tmp_path / "remote.sh").write_text(REMOTE)
    proc = subprocess.run(
        ["unshare", "-rn", "bash", "remote.sh", str(swswitch.find_binary()), str(scenario)],
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
    assert d["rx_packets"] >= 1024 and d["foreign"] == 0 and d["malformed"] == 0, d
    assert int(facts["veth_rx_packets"]) >= d["rx_packets"] and int(facts["veth_tx_packets"]) >= d["tx_packets"], facts
