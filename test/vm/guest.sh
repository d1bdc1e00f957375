# SPDX-License-Identifier: Apache-2.0
# Runs inside the kernel-test VM (scripts/vmtest.sh), from the repository's
# root, with the host's tree read-only around it. Argument: the suites.
# Each test binary runs from its package's folder (testdata) with CI=true,
# so that a test that needs root or a tool fails instead of skipping.
# Prints one "vm: SUITE ok|FAIL" line a suite and exits non-zero on any
# failure.
suites="$1"
root="$(pwd)"
echo "vm: kernel $(uname -r)"
export CI=true TIERWALL_BIN="$root/bin/vm/tierwall" GOCACHE=/tmp/gocache
fail=0
pass=0
# Before nf_conntrack is loaded: the SYN proxy's kfunc is missing, so doctor
# must report that one part off, name the module, and still exit 0.
case " $suites " in *" doctor "*)
	out="$("$TIERWALL_BIN" doctor 2>&1)"
	r=$?
	echo "$out" | grep -E "nf_conntrack|synproxy"
	if [ "$r" -eq 0 ] && echo "$out" | grep -q "synproxy/tw_synproxy *off *needs kfunc bpf_xdp_ct_lookup (nf_conntrack)"; then
		echo "vm: degraded ok"
		pass=$((pass + 1))
	else
		echo "$out"
		echo "vm: degraded FAIL (exit $r)"
		fail=$((fail + 1))
	fi
	;;
esac
for m in veth sch_ingress cls_flower act_gact cls_bpf nf_conntrack nf_tables nft_ct nft_synproxy; do
	modprobe "$m" 2>/dev/null || echo "vm: module $m not loaded"
done
ip link set lo up
# TIERWALL_REQUIRE: what these kernels have, so that no test may skip
# for its absence (testutil.RequireKernel). TIERWALL_TIME_SCALE: the
# tests' waits (not their checks) stretched for the emulated CPU.
export TIERWALL_REQUIRE=flower TIERWALL_TIME_SCALE=6
for s in $suites; do
	t0=$(date +%s)
	case "$s" in
	doctor)
		"$TIERWALL_BIN" doctor
		r=$?
		;;
	*)
		case "$s" in
		datapath) dir=internal/datapath ;;
		nicstage) dir=internal/tier/nicstage ;;
		probe) dir=internal/probe/xdp ;;
		synproxy) dir=internal/synproxy/xdp ;;
		gen) dir=internal/testbed/gen ;;
		flower) dir=internal/tier/flower ;;
		e2e) dir=test/e2e ;;
		*) echo "vm: unknown suite $s"; fail=$((fail + 1)); continue ;;
		esac
		run=".*"
		# The end-to-end package's run on these kernels: the daemon
		# bans a flood in XDP, survives a kill, and detach leaves
		# nothing; the rest of that package needs nginx, BGP daemons
		# and the lab, which the host's CI runs.
		[ "$s" = e2e ] && run='^(TestBlockOverVeth|TestDaemonBansUnbansAndSurvivesKill)$'
		(cd "$dir" && "$root/bin/vm/tests/$s.test" -test.v -test.count=1 -test.timeout=20m -test.run "$run")
		r=$?
		;;
	esac
	if [ "$r" -eq 0 ]; then
		echo "vm: $s ok ($(($(date +%s) - t0)) s)"
		pass=$((pass + 1))
	else
		echo "vm: $s FAIL (exit $r, $(($(date +%s) - t0)) s)"
		fail=$((fail + 1))
	fi
done
echo "vm: $(uname -r): $pass passed, $fail failed"
[ "$fail" -eq 0 ]
