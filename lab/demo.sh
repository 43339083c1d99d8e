#!/usr/bin/env bash
# demo.sh shows an edgegate gateway joined to a real Kubernetes API server, balancing real
# traffic, inside throwaway network namespaces. It builds nothing:
#
#   EDGEGATE=bin/edgegate LABHOST=bin/labhost EGDEMO=bin/egdemo lab/demo.sh            (as root)
#   ... GATEWAY=firmware EGPROVISION=bin/egprovision DISK=out/firmware/qemu-x86_64/disk.img \
#       UPDATE=out/demo/edgegate-qemu-x86_64-v0.0.1-demo.bundle lab/demo.sh
#
# GATEWAY=netns runs the edgegate binary in a namespace of its own; GATEWAY=firmware boots
# a copy of the qemu-x86_64 disk image (make image's) under QEMU through UEFI as the gateway,
# its two NICs on taps inside the lab's switch namespace, after egprovision has written the
# gateway's identity into its data partition; once the traffic is shown it updates the
# gateway live with the UPDATE bundle through the dashboard's API and shows the trial boot,
# the commit and the update history. The lab (the address plan of package lab and of the
# embedded demo):
#
#   client     10.200.1.2    ─┐
#                             ├─ gateway 10.200.1.1 (node IP) │ 10.200.2.1 ─┬─ backend-1..3 10.200.2.11..13
#                                                                         └─ control plane 10.200.2.100
#                                                                            (etcd + kube-apiserver)
#
# The control plane gets deploy/rbac.yaml and the embedded demo's Services and
# EndpointSlices; the gateway joins with a bootstrap-style token bound to that RBAC and
# nothing else. Everything the demo creates is removed on exit, error or Ctrl-C; nothing
# touches the machine's own network.
set -euo pipefail

: "${EDGEGATE:?set EDGEGATE to the edgegate binary}"
: "${LABHOST:?set LABHOST to the labhost binary}"
: "${EGDEMO:?set EGDEMO to the egdemo binary}"
GATEWAY=${GATEWAY:-netns}
if [[ $EUID -ne 0 ]]; then
	echo "demo.sh: needs root to create network namespaces" >&2
	exit 1
fi
tools=(ip curl nft)
[[ $GATEWAY == firmware ]] && tools+=(debugfs qemu-system-x86_64)
for tool in "${tools[@]}"; do
	command -v "$tool" >/dev/null || { echo "demo.sh: needs $tool" >&2; exit 1; }
done
case $GATEWAY in
netns) ;;
firmware)
	: "${EGPROVISION:?set EGPROVISION to the egprovision binary}"
	: "${DISK:?set DISK to the qemu-x86_64 disk image (make image)}"
	: "${UPDATE:?set UPDATE to a newer signed bundle of the same board (make bundle)}"
	;;
*)
	echo "demo.sh: GATEWAY=$GATEWAY: want netns or firmware" >&2
	exit 1
	;;
esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
suffix=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
GW="egdemo-$suffix-gw" # the gateway (netns) or the switch holding the firmware's taps
CLIENT="egdemo-$suffix-c1"
CP="egdemo-$suffix-cp"
BACKENDS=("egdemo-$suffix-b1" "egdemo-$suffix-b2" "egdemo-$suffix-b3")
NAMESPACES=("$GW" "$CLIENT" "$CP" "${BACKENDS[@]}")
NODE=edgegate-gw
PIDS=()
WORK=$(mktemp -d)

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if ((${#PIDS[@]})); then
		kill -TERM "${PIDS[@]}" 2>/dev/null || true
		# Give them 10s to stop (the gateway posts its Node not ready), then kill what is left.
		for _ in $(seq 100); do
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
	rm -rf "$WORK"
	echo "demo: removed namespaces egdemo-$suffix-*"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fail prints a message and the end of a log, then exits (cleanup runs).
fail() {
	echo "demo: $1" >&2
	[[ -n ${2:-} && -f $2 ]] && tail -n 40 "$2" >&2
	exit 1
}

echo "demo: building the lab (namespaces egdemo-$suffix-*)"
for ns in "${NAMESPACES[@]}"; do
	ip netns add "$ns"
	ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
	ip -n "$ns" link set lo up
done

# Links are created inside the gateway (switch) namespace and their peers moved straight into
# the other namespaces: nothing ever appears in the root namespace. br0 is the backend side,
# br1 the client side (used by the firmware; the netns gateway routes on c1 itself).
ip -n "$GW" link add br0 type bridge
ip -n "$GW" link set br0 up
ip -n "$GW" link add c1 type veth peer name eth0 netns "$CLIENT"
ip -n "$CLIENT" addr add 10.200.1.2/24 dev eth0
ip -n "$CLIENT" addr add fd00:200:1::2/64 dev eth0 nodad
ip -n "$CLIENT" link set eth0 up
ip -n "$CLIENT" route add default via 10.200.1.1
ip -n "$CLIENT" route add default via fd00:200:1::1

leaf() { # leaf NS NAME IPV4 IPV6: a host on br0
	ip -n "$GW" link add "$2" type veth peer name eth0 netns "$1"
	ip -n "$GW" link set "$2" master br0
	ip -n "$GW" link set "$2" up
	ip -n "$1" addr add "$3/24" dev eth0
	ip -n "$1" addr add "$4/64" dev eth0 nodad
	ip -n "$1" link set eth0 up
	ip -n "$1" route add default via 10.200.2.1
	ip -n "$1" route add default via fd00:200:2::1
}
for i in 1 2 3; do
	ns=${BACKENDS[i - 1]}
	leaf "$ns" "b$i" "10.200.2.1$i" "fd00:200:2::1$i"
	ip netns exec "$ns" "$LABHOST" serve -name "backend-$i" -tcp :8080 -udp :5353 2>"$WORK/backend-$i.log" &
	PIDS+=($!) # ip netns exec execs in place: this is labhost's own PID
done
leaf "$CP" cp 10.200.2.100 fd00:200:2::100

echo "demo: starting etcd and kube-apiserver in $CP (built from hack/apiserver, cached after the first build)"
# setsid: Ctrl-C reaches egdemo once, through cleanup, so it stops its apiserver and etcd in order.
(cd "$root" && exec setsid "$EGDEMO" cluster -netns "$CP" -address 10.200.2.100 -dir "$WORK/cluster" \
	-manifests daemon/source/manifests/default/demo.yaml >"$WORK/cluster.log" 2>&1) &
PIDS+=($!)
for _ in $(seq 1200); do
	grep -qx ready "$WORK/cluster.log" 2>/dev/null && break
	kill -0 "${PIDS[-1]}" 2>/dev/null || fail "the control plane did not start; its log:" "$WORK/cluster.log"
	sleep 0.5
done
grep -qx ready "$WORK/cluster.log" || fail "the control plane was not ready within 10 minutes" "$WORK/cluster.log"
grep '^egdemo:' "$WORK/cluster.log" | sed 's/^egdemo: /demo: /'
SERVER=$(cat "$WORK/cluster/gateway/server")
# The dashboard's access token, provisioned like the cluster token.
DASHBOARD_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
DASHBOARD_PORT=${DASHBOARD_PORT:-8080}
KUBECTL=(ip netns exec "$CP" "$EGDEMO" nodes -kubeconfig "$WORK/cluster/admin.kubeconfig")

start_netns_gateway() {
	ip netns exec "$GW" sysctl -q -w net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
	ip -n "$GW" addr add 10.200.2.1/24 dev br0
	ip -n "$GW" addr add fd00:200:2::1/64 dev br0 nodad
	ip -n "$GW" addr add 10.200.1.1/24 dev c1
	ip -n "$GW" addr add fd00:200:1::1/64 dev c1 nodad
	ip -n "$GW" link set c1 up
	(umask 077 && echo "$DASHBOARD_TOKEN" >"$WORK/dashboard-token")
	echo "demo: starting edgegate in $GW, joining $SERVER as Node $NODE"
	ip netns exec "$GW" "$EDGEGATE" --api-server "$SERVER" --token-file "$WORK/cluster/gateway/token" \
		--ca-file "$WORK/cluster/gateway/ca.crt" --state-dir "$WORK/state" \
		--hostname-override "$NODE" --node-ip 10.200.1.1,fd00:200:1::1 --zone demo-zone \
		--dashboard-token-file "$WORK/dashboard-token" \
		2>"$WORK/edgegate.log" &
	PIDS+=($!)
	GATEWAY_LOG=$WORK/edgegate.log
	HEALTHZ=(ip netns exec "$GW" curl -s --max-time 1 http://127.0.0.1:10256/healthz)
}

# start_firmware_gateway boots a copy of the qemu-x86_64 disk image as the gateway, through
# UEFI (OVMF, systemd-boot, slot A). $GW becomes a plain switch with no address of its own:
# br1 joins the client's link and the guest's eth0 (tap0), br0 the backends, the control plane
# and the guest's eth1 (tap1); QEMU runs inside $GW, so the guest's NICs lead nowhere but the
# lab. The gateway's identity goes where an operator puts it, with the command an operator
# uses: egprovision writes the API server, the token, the cluster's CA, network.yaml, a
# config.yaml and the dashboard's token into the image's data partition, which PID 1 mounts
# on /var/lib/edgegate (the offline-first cache and the update history land there too).
start_firmware_gateway() {
	ip -n "$GW" link add br1 type bridge
	ip -n "$GW" link set br1 up
	ip -n "$GW" link set c1 master br1
	ip -n "$GW" link set c1 up
	ip -n "$GW" tuntap add tap0 mode tap
	ip -n "$GW" tuntap add tap1 mode tap
	ip -n "$GW" link set tap0 master br1
	ip -n "$GW" link set tap1 master br0
	ip -n "$GW" link set tap0 up
	ip -n "$GW" link set tap1 up

	ID=$WORK/identity
	mkdir -p "$ID"
	(umask 077 && echo "$DASHBOARD_TOKEN" >"$ID/dashboard-token")
	cat >"$ID/config.yaml" <<-EOF
		# The gateway's own configuration; egprovision adds the cluster's fields.
		hostnameOverride: $NODE
		nodeIPs: [10.200.1.1, "fd00:200:1::1"]
		zone: demo-zone
		# No shell on the box: Prometheus scrapes it over the network.
		metricsBindAddress: 0.0.0.0:10249
	EOF
	cat >"$ID/network.yaml" <<-EOF
		ip: [eth0:10.200.1.1/24, "eth0:fd00:200:1::1/64", eth1:10.200.2.1/24, "eth1:fd00:200:2::1/64"]
	EOF
	cp --sparse=always "$DISK" "$WORK/disk.img"
	echo "demo: provisioning a copy of $DISK for Node $NODE (egprovision, no mount):"
	"$EGPROVISION" -disk "$WORK/disk.img" -api-server "$SERVER" -token-file "$WORK/cluster/gateway/token" \
		-ca-file "$WORK/cluster/gateway/ca.crt" -config "$ID/config.yaml" -network "$ID/network.yaml" \
		-dashboard-token-file "$ID/dashboard-token" | sed 's/^/  /'

	echo "demo: booting the disk image under QEMU (TCG) through UEFI as the gateway, joining $SERVER as Node $NODE"
	ip netns exec "$GW" "$EGDEMO" boot -board qemu-x86_64 -uefi-vars "$WORK/vars.fd" -disk "$WORK/disk.img" \
		-console "$WORK/console.log" -tap tap0 -tap tap1 >"$WORK/boot.log" 2>&1 &
	PIDS+=($!)
	BOOT_PID=$!
	GATEWAY_LOG=$WORK/console.log
	for _ in $(seq 1800); do
		grep -qx ready "$WORK/boot.log" && break
		kill -0 "$BOOT_PID" 2>/dev/null || fail "the firmware did not boot; QEMU's output and the console:" "$WORK/boot.log"
		sleep 0.1
	done
	grep -qx ready "$WORK/boot.log" || fail "the firmware did not program its rules within 3 minutes; its console:" "$GATEWAY_LOG"
	show_markers
	HEALTHZ=(ip netns exec "$CLIENT" curl -s --max-time 1 http://10.200.1.1:10256/healthz)
}

# show_markers prints the firmware's console markers that egdemo boot reported since the last
# call, with the time since QEMU started.
MARKERS_SHOWN=0
show_markers() {
	local lines
	mapfile -t lines < <(grep '^egdemo: ' "$WORK/boot.log" | grep -v ' booting ')
	for line in "${lines[@]:MARKERS_SHOWN}"; do
		echo "  ${line#egdemo: }"
	done
	MARKERS_SHOWN=${#lines[@]}
}

case $GATEWAY in
netns) start_netns_gateway ;;
firmware) start_firmware_gateway ;;
esac

healthy=0
for _ in $(seq 300); do
	kill -0 "${PIDS[-1]}" 2>/dev/null || fail "the gateway exited; its log:" "$GATEWAY_LOG"
	if "${KUBECTL[@]}" -wait "$NODE" -timeout 1s >/dev/null 2>&1; then
		healthy=1
		break
	fi
	sleep 0.2
done
((healthy)) || fail "Node $NODE not Ready within 60s; the gateway's log:" "$GATEWAY_LOG"
echo "demo: the gateway is a Ready Node of the cluster:"
echo
"${KUBECTL[@]}" -wait "$NODE" | sed 's/^/  /'
echo
echo "demo: the gateway's /healthz:"
"${HEALTHZ[@]}" | sed 's/^/  /'

declare -A tally=()
failures=0
# PROBE_TIMEOUT bounds each request through the gateway. A TCP SYN that is lost is sent again
# after 1 s and 3 s: 5 s lets a first connection wait for neighbour discovery on a TCG guest
# that shares two cores with a build, and still fails one that is not served.
PROBE_TIMEOUT=5
for url in http://10.96.0.10/ http://10.200.1.1:30080/ http://203.0.113.10/ 'http://[2001:db8:113::10]/'; do
	echo
	echo "client -> $url"
	for n in 1 2 3 4 5 6; do
		if answer=$(ip netns exec "$CLIENT" curl -s --max-time "$PROBE_TIMEOUT" "$url"); then
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

if [[ $GATEWAY == netns ]]; then
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
fi

if [[ $GATEWAY == firmware ]]; then
	echo
	echo "demo: the firmware's metrics, scraped from the client (http://10.200.1.1:10249/metrics):"
	ip netns exec "$CLIENT" curl -s --max-time 2 http://10.200.1.1:10249/metrics |
		grep -E '^edgegate_(sync_proxy_rules_last_timestamp_seconds|cluster_api_reachable|cluster_synced|node_lease_renewed_timestamp_seconds|sync_proxy_rules_duration_seconds_(sum|count)) ' |
		sed 's/^/  /' || true
	echo
	echo "demo: the gateway's serial console, PID 1's markers:"
	grep -aE 'EDGEGATE-|msg="persistent' "$GATEWAY_LOG" | sed 's/^.*EDGEGATE-/EDGEGATE-/; s/^/  /' | head -20
fi

# The dashboard, on the gateway's node IP in TLS (port 443), brought to the host's loopback:
# egdemo listens on 127.0.0.1 and opens each connection from inside the client's namespace,
# TLS passes through untouched. The certificate is the gateway's own, generated at its
# first start: the browser and curl pin its key as the gateway's console printed it.
"$EGDEMO" forward -listen "127.0.0.1:$DASHBOARD_PORT" -netns "$CLIENT" -to 10.200.1.1:443 >"$WORK/forward.log" 2>&1 &
PIDS+=($!)
DASHBOARD_URL="https://127.0.0.1:$DASHBOARD_PORT/?token=$DASHBOARD_TOKEN"
SPKI=$(sed -n 's/.*dashboard TLS certificate: pin it.*spkiSHA256="\{0,1\}\([A-Za-z0-9+/=]*\).*/\1/p' "$GATEWAY_LOG" | tail -1)
CERT_SHA256=$(sed -n 's/.*dashboard TLS certificate: pin it.*certSHA256=\([0-9A-F:]*\).*/\1/p' "$GATEWAY_LOG" | tail -1)
dashboard_ok=0
for _ in $(seq 50); do
	# -k skips the CA check (no CA vouches for a gateway's own certificate); the pin
	# still binds the connection to the key the console printed.
	if [[ -n $SPKI ]] && state=$(curl -sf --max-time 2 -k --pinnedpubkey "sha256//$SPKI" \
		-H "Authorization: Bearer $DASHBOARD_TOKEN" "https://127.0.0.1:$DASHBOARD_PORT/api/state"); then
		dashboard_ok=1
		break
	fi
	sleep 0.2
done
echo
if ((dashboard_ok)); then
	echo "demo: the dashboard: $DASHBOARD_URL"
	echo "      (token $DASHBOARD_TOKEN; /api/state answered with ${#state} bytes over TLS pinned to the gateway's key)"
	echo "      certificate SHA-256 $CERT_SHA256"
	echo "      key (SPKI) SHA-256  $SPKI"
	echo "      chromium --user-data-dir=\$(mktemp -d) --ignore-certificate-errors-spki-list=$SPKI '$DASHBOARD_URL'"
else
	echo "demo: the dashboard did not answer over TLS on 127.0.0.1:$DASHBOARD_PORT (pinned key: ${SPKI:-none in the gateway log}); the forwarder's log:" >&2
	cat "$WORK/forward.log" >&2
	failures=$((failures + 1))
fi

# live_update uploads the newer bundle through the dashboard's API (the forwarder, TLS pinned
# to the gateway's key), follows the trial boot and the commit on the console, prints the
# slots and the update history as the updated gateway reports them, and sends traffic again.
live_update() {
	local api=("$EGDEMO" update -url "https://127.0.0.1:$DASHBOARD_PORT" -token-file "$ID/dashboard-token" -spki "$SPKI")
	echo
	echo "demo: live update: uploading $(basename "$UPDATE") through the dashboard's API (POST /api/update)"
	"${api[@]}" -bundle "$UPDATE" || return 1
	echo "demo: the gateway's console markers while it boots the new slot on trial and commits it:"
	local ended=0
	for _ in $(seq 600); do
		show_markers
		if grep -q 'EDGEGATE-UPDATE \(committed\|rolled-back\)' "$WORK/boot.log"; then
			ended=1
			break
		fi
		kill -0 "$BOOT_PID" 2>/dev/null || fail "QEMU ended during the update; its console:" "$GATEWAY_LOG"
		sleep 0.5
	done
	show_markers
	((ended)) || fail "the update did not end within 5 minutes; the console:" "$GATEWAY_LOG"
	echo
	echo "demo: the gateway's slots and update history (GET /api/update), as the dashboard shows them:"
	"${api[@]}" -wait 2m || return 1
	grep -q 'EDGEGATE-UPDATE committed' "$WORK/boot.log" || return 1
	echo
	echo "demo: traffic through the updated gateway:"
	local url answer n
	for url in http://10.96.0.10/ http://10.200.1.1:30080/ http://203.0.113.10/; do
		for n in 1 2 3; do
			if answer=$(ip netns exec "$CLIENT" curl -s --max-time "$PROBE_TIMEOUT" "$url"); then
				printf '  %-26s %s\n' "$url" "${answer%% *}"
			else
				printf '  %-26s FAILED\n' "$url"
				return 1
			fi
		done
	done
}

if [[ $GATEWAY == firmware ]] && ((dashboard_ok)); then
	live_update || failures=$((failures + 1))
fi
echo
if ((failures == 0)); then
	echo "demo: every step passed, in ${SECONDS}s"
else
	echo "demo: $failures step(s) failed, in ${SECONDS}s"
fi

if ((failures == 0)) && [[ -t 0 && -z ${CI:-} ]]; then
	echo "demo: the lab stays up for the dashboard; press Ctrl-C to end it"
	trap 'exit 0' INT
	while kill -0 "${PIDS[-1]}" 2>/dev/null; do sleep 1; done
fi

((failures == 0))
