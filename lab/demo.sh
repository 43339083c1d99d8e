#!/usr/bin/env bash
# demo.sh shows edgegate balancing real traffic inside throwaway network namespaces:
# a client, the gateway running edgegate with its embedded default services, and three
# labhost backends (the address plan of package lab). It builds nothing:
#
#   EDGEGATE=path/to/edgegate LABHOST=path/to/labhost lab/demo.sh      (as root)
#
# Everything it creates is removed on exit, error or Ctrl-C.
set -euo pipefail

: "${EDGEGATE:?set EDGEGATE to the edgegate binary}"
: "${LABHOST:?set LABHOST to the labhost binary}"
if [[ $EUID -ne 0 ]]; then
	echo "demo.sh: needs root to create network namespaces" >&2
	exit 1
fi
for tool in ip curl nft; do
	command -v "$tool" >/dev/null || { echo "demo.sh: needs $tool" >&2; exit 1; }
done

suffix=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
GW="egdemo-$suffix-gw"
CLIENT="egdemo-$suffix-c1"
BACKENDS=("egdemo-$suffix-b1" "egdemo-$suffix-b2" "egdemo-$suffix-b3")
NAMESPACES=("$GW" "$CLIENT" "${BACKENDS[@]}")
PIDS=()
LOGDIR=$(mktemp -d)

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if ((${#PIDS[@]})); then
		kill -TERM "${PIDS[@]}" 2>/dev/null || true
		# Give them 5s to stop, then kill what is left.
		for _ in $(seq 50); do
			local alive=0
			for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
			((alive)) || break
			sleep 0.1
		done
		kill -KILL "${PIDS[@]}" 2>/dev/null || true
		wait "${PIDS[@]}" 2>/dev/null || true
	fi
	for ns in "${NAMESPACES[@]}"; do
		[[ -e /run/netns/$ns ]] && ip netns del "$ns"
	done
	rm -rf "$LOGDIR"
	echo "demo: removed namespaces egdemo-$suffix-*"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo: building the lab (namespaces egdemo-$suffix-*)"
for ns in "${NAMESPACES[@]}"; do
	ip netns add "$ns"
	ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	ip -n "$ns" link set lo up
done
ip netns exec "$GW" sysctl -q -w net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1

# Links are created inside the gateway and their peers moved straight into the other
# namespaces: nothing ever appears in the root namespace.
ip -n "$GW" link add br0 type bridge
ip -n "$GW" addr add 10.200.2.1/24 dev br0
ip -n "$GW" addr add fd00:200:2::1/64 dev br0 nodad
ip -n "$GW" link set br0 up
ip -n "$GW" link add c1 type veth peer name eth0 netns "$CLIENT"
ip -n "$GW" addr add 10.200.1.1/24 dev c1
ip -n "$GW" addr add fd00:200:1::1/64 dev c1 nodad
ip -n "$GW" link set c1 up
ip -n "$CLIENT" addr add 10.200.1.2/24 dev eth0
ip -n "$CLIENT" addr add fd00:200:1::2/64 dev eth0 nodad
ip -n "$CLIENT" link set eth0 up
ip -n "$CLIENT" route add default via 10.200.1.1
ip -n "$CLIENT" route add default via fd00:200:1::1

for i in 1 2 3; do
	ns=${BACKENDS[i - 1]}
	ip -n "$GW" link add "b$i" type veth peer name eth0 netns "$ns"
	ip -n "$GW" link set "b$i" master br0
	ip -n "$GW" link set "b$i" up
	ip -n "$ns" addr add "10.200.2.1$i/24" dev eth0
	ip -n "$ns" addr add "fd00:200:2::1$i/64" dev eth0 nodad
	ip -n "$ns" link set eth0 up
	ip -n "$ns" route add default via 10.200.2.1
	ip -n "$ns" route add default via fd00:200:2::1
	ip netns exec "$ns" "$LABHOST" serve -name "backend-$i" -tcp :8080 -udp :5353 2>"$LOGDIR/backend-$i.log" &
	PIDS+=($!) # ip netns exec execs in place: this is labhost's own PID
done

echo "demo: starting edgegate with its embedded default services"
ip netns exec "$GW" "$EDGEGATE" --hostname-override edgegate-gw --node-ip 10.200.1.1,fd00:200:1::1 \
	2>"$LOGDIR/edgegate.log" &
EDGEGATE_PID=$!
PIDS+=("$EDGEGATE_PID")

healthy=0
for _ in $(seq 100); do
	if ! kill -0 "$EDGEGATE_PID" 2>/dev/null; then
		echo "demo: edgegate exited; its log:" >&2
		cat "$LOGDIR/edgegate.log" >&2
		exit 1
	fi
	code=$(ip netns exec "$GW" curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:10256/healthz || true)
	if [[ $code == 200 ]]; then
		healthy=1
		break
	fi
	sleep 0.1
done
if ((!healthy)); then
	echo "demo: edgegate not healthy within 10s (last /healthz: ${code:-none}); its log:" >&2
	tail -n 40 "$LOGDIR/edgegate.log" >&2
	exit 1
fi
echo "demo: edgegate is healthy (pid $EDGEGATE_PID)"

declare -A tally=()
failures=0
for url in http://10.96.0.10/ http://10.200.1.1:30080/ http://203.0.113.10/ 'http://[2001:db8:113::10]/'; do
	echo
	echo "client -> $url"
	for n in 1 2 3 4 5 6; do
		if answer=$(ip netns exec "$CLIENT" curl -s --max-time 2 "$url"); then
			read -r backend source <<<"$answer"
			backend=${backend:-(empty)}
			printf '  %d: %-10s (saw source %s)\n' "$n" "$backend" "$source"
			tally[$backend]=$((${tally[$backend]:-0} + 1))
		else
			printf '  %d: FAILED (curl exit %d)\n' "$n" "$?"
			failures=$((failures + 1))
		fi
	done
done

echo
echo "answers per backend:"
for backend in backend-1 backend-2 backend-3; do
	printf '  %-10s %d\n' "$backend" "${tally[$backend]:-0}"
done
((failures == 0)) || echo "  failed     $failures"

echo
# What edgegate programmed, as an operator reads it with Debian's nft: the dispatch map,
# the web service's chain and its per-endpoint connection counters.
show() {
	echo "# nft $*"
	ip netns exec "$GW" nft "$@"
	echo
}
web_chain=$(ip netns exec "$GW" nft list table ip edgegate | awk '/chain service-.*default\/web\// {print $2; exit}')
show list map ip edgegate service-ips
show list chain ip edgegate "$web_chain"
ip netns exec "$GW" nft list counters table ip edgegate | awk '/counter .*default\/web/ {name=$2} /packets/ && name {print "  " name ": " $2 " connections"; name=""}'

((failures == 0))
