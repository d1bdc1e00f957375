#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Memory under the shipped unit (docs/EVALUATION-SPOOF.md): the daemon and
# the probe in a memory cgroup with the unit's MemoryMax=1536M, on a veth
# pair in two namespaces of their own (twm-tx, twm-rx), under the testbed
# lock. BPF maps are charged to the cgroup that creates them, so each run
# starts without pinned state for twm-b and the cgroup holds maps and heap.
#   scripts/memory-under-unit.sh restart     500,000 bans: start, clean restart, SIGKILL and start
#   scripts/memory-under-unit.sh syn daemon  a 60 s spoofed SYN flood at the generator's full rate
#   scripts/memory-under-unit.sh syn probe   the same against deploy/probe.yaml
# The cgroup is a v1 memory cgroup (the hierarchy of the machine measured:
# memory.limit_in_bytes, memory.max_usage_in_bytes, memory.failcnt); on a
# v2 host the same figures are memory.max, memory.peak and memory.events.
# Peak RSS is the process's VmHWM, sampled every 100 ms with the cgroup's
# usage less its page cache.
[ "${TWM_LOCKED:-}" ] || TWM_LOCKED=1 exec flock /run/tierwall-testbed.lock "$0" "$@"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TW=$ROOT/bin/tierwall
LAB=$ROOT/bin/tierwall-lab
NSTX=twm-tx NSRX=twm-rx IFTX=twm-a IFRX=twm-b
RX4=10.201.0.2
CG=/sys/fs/cgroup/memory/tierwall-measure
LIMIT=$((1536<<20))   # deploy/tierwall.service.in: MemoryMax=1536M

pair_up() {
  ip netns del $NSTX 2>/dev/null || true; ip netns del $NSRX 2>/dev/null || true
  ip netns add $NSTX; ip netns add $NSRX
  ip link add $IFTX netns $NSTX type veth peer name $IFRX netns $NSRX
  ip -n $NSRX addr add $RX4/24 dev $IFRX
  for a in "$NSTX $IFTX" "$NSRX $IFRX" "$NSTX lo" "$NSRX lo"; do set -- $a; ip -n $1 link set $2 up; done
  ip netns exec $NSRX sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.$IFRX.rp_filter=0
}
pair_down() {
  $TW -n $NSRX --direct detach -i $IFRX >/dev/null 2>&1 || true
  ip netns del $NSTX 2>/dev/null || true; ip netns del $NSRX 2>/dev/null || true
}
cg_new() {
  [ -d $CG ] && rmdir $CG 2>/dev/null || true
  mkdir -p $CG
  echo $LIMIT > $CG/memory.limit_in_bytes
}
cg_reset_peak() { echo 0 > $CG/memory.max_usage_in_bytes; }
cg_report() {
  echo "cgroup: limit $(( $(cat $CG/memory.limit_in_bytes) >> 20 )) MiB, usage now $(( $(cat $CG/memory.usage_in_bytes) >> 20 )) MiB, peak (memory.max_usage_in_bytes) $(( $(cat $CG/memory.max_usage_in_bytes) >> 20 )) MiB, failcnt $(cat $CG/memory.failcnt), $(grep oom_kill $CG/memory.oom_control | tr '\n' ' ')"
}
# start_in_cg LOG CMD...: runs CMD inside the cgroup, prints its pid
start_in_cg() {
  local log=$1; shift
  bash -c 'echo $$ > '$CG'/cgroup.procs; exec "$@"' _ "$@" >"$log" 2>&1 &
  echo $!
}
# sample PID OUT: every 100 ms, the process's RSS and the cgroup's usage, until PID exits
sample() {
  local pid=$1 out=$2
  ( while kill -0 $pid 2>/dev/null; do
      h=$(awk '/VmHWM/{print $2}' /proc/$pid/status 2>/dev/null)
      [ -n "$h" ] && echo "$(date +%s.%N) $h $(cat $CG/memory.usage_in_bytes) $(awk '$1=="total_rss"{r=$2} $1=="total_cache"{c=$2} END{print r, c}' $CG/memory.stat) $(cat $CG/memory.kmem.usage_in_bytes)"
      sleep 0.1
    done ) > "$out" &
}
sample_report() {
  awk '{ if ($2>h) h=$2; if ($3>u) u=$3; if ($3-$5>n) n=$3-$5; if ($4>a) a=$4; if ($6>k) k=$6 } END { printf "sampled every 100 ms: peak RSS (VmHWM) %.0f MiB, peak cgroup usage %.0f MiB, peak usage less page cache %.0f MiB (anonymous peak %.0f MiB, kernel memory incl. BPF maps peak %.0f MiB)\n", h/1024, u/1048576, n/1048576, a/1048576, k/1048576 }' "$1"
}

trap pair_down EXIT

# mkstate FILE N: N automatic bans as the daemon's state file writes them
# (a version 2 snapshot, no journal): /32s counted up from 100.64.0.0,
# expiring in an hour.
mkstate() {
  python3 - "$@" <<'PY'
# 500,000 automatic bans as the daemon's state file writes them (version 2
# snapshot, no journal): /32s counted up from 100.64.0.0, expiring in 1 h.
import json, sys, datetime, ipaddress
n = int(sys.argv[2])
now = datetime.datetime.now(datetime.timezone.utc)
f = lambda t: t.strftime('%Y-%m-%dT%H:%M:%S.%fZ')
base = int(ipaddress.IPv4Address('100.64.0.0'))
bans = [{"prefix": f"{ipaddress.IPv4Address(base+i)}/32", "detector": "rate", "reason": "5000 pps > 1000",
         "first_seen": f(now), "last_seen": f(now), "rate_pps": 5000, "peak_rate_pps": 5000, "tier": "xdp",
         "expires": f(now + datetime.timedelta(hours=1))} for i in range(n)]
json.dump({"version": 2, "saved": f(now), "generation": 1, "bans": bans}, open(sys.argv[1], "w"))
PY
}

restart() {
N=${N:-500000}
pair_up; cg_new
D=${TMPDIR:-/tmp}/twm-restart; rm -rf $D; mkdir -p $D/state
sed -e "s|^interface: .*|interface: $IFRX|" -e "s|^state_file: .*|state_file: $D/state/state.json|" \
    -e "s|  socket: /run/tierwall/api.sock.*|  socket: $D/api.sock|" -e "s|^  hold: 30s|  hold: ${HOLD:-30s}|" $ROOT/deploy/tierwall.yaml > $D/tierwall.yaml
mkstate $D/state/state.json $N
ls -l $D/state/state.json
run_once() {
  local name=$1 t0=$(date +%s.%N)
  pid=$(start_in_cg $D/$name.log $TW -n $NSRX run --config $D/tierwall.yaml)
  sample $pid $D/$name.samples
  for i in $(seq 600); do grep -q "tierwall running" $D/$name.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  echo "$name: running after $(echo "$(date +%s.%N) - $t0" | bc) s"
  sleep 15   # fifteen intervals with every ban measured
  kill -TERM $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done; echo "$name: stopped"
  sleep 0.3
  { grep -E "memory budget|tierwall running|tierwall stopped|level=(WARN|ERROR)" $D/$name.log | grep -v -e "restored" -e "kernel feature missing" | cut -c1-400 | head -8; } || true
  sample_report $D/$name.samples; cg_report
}
run_once start
cg_reset_peak
run_once restart
cg_reset_peak
# A crash: SIGKILL mid-run, then the start systemd's Restart= makes.
pid=$(start_in_cg $D/crash.log $TW -n $NSRX run --config $D/tierwall.yaml)
for i in $(seq 600); do grep -q "tierwall running" $D/crash.log && break; sleep 0.5; done
sleep 5; kill -KILL $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done
cg_reset_peak
run_once after-kill
pair_down

}

syn() {
pair_up; cg_new
D=${TMPDIR:-/tmp}/twm-syn-$WHO; rm -rf $D; mkdir -p $D/state
if [ $WHO = daemon ]; then
  sed -e "s|^interface: .*|interface: $IFRX|" -e "s|^state_file: .*|state_file: $D/state/state.json|" \
      -e "s|  socket: /run/tierwall/api.sock.*|  socket: $D/api.sock|" $ROOT/deploy/tierwall.yaml > $D/cfg.yaml
else
  sed -e "s|^interface: .*|interface: $IFRX        |" -e "s|^state_file: .*|state_file: $D/state/state.json|" \
      -e "s|  socket: /run/tierwall/api.sock|  socket: $D/api.sock|" $ROOT/deploy/probe.yaml > $D/cfg.yaml
fi
grep -nE "^interface|^state_file|socket:" $D/cfg.yaml
# The victim: a listener on port 80.
ip netns exec $NSRX python3 -m http.server 80 --bind $RX4 >/dev/null 2>&1 & web=$!
t0=$(date +%s.%N)
pid=$(start_in_cg $D/run.log $TW -n $NSRX run --config $D/cfg.yaml)
sample $pid $D/samples
for i in $(seq 600); do [ -S $D/api.sock ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.5; done
echo "$WHO: API up after $(echo "$(date +%s.%N) - $t0" | bc) s"
sleep 5
MAC=$(ip -n $NSRX -j link show $IFRX | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["address"])')
$LAB -n $NSTX gen $IFTX --dst $RX4 --dst-mac $MAC --duration 60s --syn --spoof 10.128.0.0/9 --port 80 > $D/gen.out 2>&1 || true
tail -4 $D/gen.out
sleep 5
kill -0 $pid 2>/dev/null && echo "$WHO: alive after the flood" || echo "$WHO: DIED during the flood"
$TW --socket $D/api.sock stats 2>/dev/null | head -30 > $D/stats.out || true
kill -TERM $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done
kill $web 2>/dev/null || true
{ grep -E "memory budget|budget|running|stopped|level=(WARN|ERROR)" $D/run.log | grep -v -e "kernel feature missing" | cut -c1-500 | head -12; } || true
sample_report $D/samples; cg_report; cat $D/stats.out
pair_down

}

set -euo pipefail
case "${1:-}" in
restart) restart ;;
syn) WHO=${2:?daemon or probe}; [ "$WHO" = daemon ] || [ "$WHO" = probe ] || { echo "syn daemon|probe" >&2; exit 2; }; syn ;;
*) echo "usage: $0 restart | syn daemon|probe" >&2; exit 2 ;;
esac
