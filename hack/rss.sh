#!/usr/bin/env bash
# hack/rss.sh: the steady-state resident memory of `selftaint agent`, per
# build variant, and which parts of the binary are resident.
#
# It starts etcd and kube-apiserver on loopback (in a temporary directory,
# removed again at exit), creates a Node per variant, runs `selftaint agent`
# for it with the built-in default config (the probes read this host) and,
# at each of the -t times after its start, reads /proc/PID/smaps_rollup,
# /proc/PID/smaps, /proc/PID/pagemap and /proc/PID/stat. For each variant
# and time it prints the binary's size and ELF type, Rss = Anonymous +
# file-backed, the CPU time and page faults since the start, the largest
# mappings, and the resident part of each ELF section of the binary (section
# addresses from readelf -S, residency from the pagemap's present bits);
# then a summary, a row per variant and time.
#
# The agent sheds its start-up pages (--shed-startup-memory, on by default:
# madvise(MADV_PAGEOUT) over its binary's read-only mappings) 30 s after its
# first sync, which is a few seconds after the start here: a time under
# about 40 s measures it before the shed. RSS_AGENT_ARGS=
# --shed-startup-memory=false measures without it (an agent older than the
# flag refuses it). To see whether Rss creeps back as the steady-state loop
# touches code, measure twice, e.g. -t 60,180: the CPU time and faults
# between the two show whether pages fault back in a storm.
#
# Usage:
#   hack/rss.sh [options] [LABEL=BINARY ...]
#
# Without LABEL=BINARY arguments it builds the variants named in
# $RSS_VARIANTS (default "make unshifted") from the repository's working
# tree:
#   make       as `make build` and the Dockerfile build it: cgo on,
#              -trimpath, -ldflags "$RSS_LDFLAGS" (`make rss` passes the
#              Makefile's SELFTAINT_LDFLAGS; VERSION/REVISION stamps left out)
#   unshifted  the same without the -Ttext-segment fix (-ldflags "-s -w")
#   internal   -ldflags "-s -w -linkmode=internal" (Go's own linker)
#   pie        -buildmode=pie -ldflags "-s -w"
#
# Options:
#   -t SECONDS[,SECONDS...]
#               when to measure each agent, in seconds after its start
#               (default 60); several times, ascending, measure it at each
#   -n N        how many mappings to list per variant (default 8)
#   -c MODE     the page cache of the binary when the agent starts. The
#               binary is copied into the temporary directory first, except
#               with asis. On Linux >= 6.18 a fault maps a whole large folio
#               of the page cache (up to 2 MiB), so this matters:
#                 warm   (default) dropped, then read whole with read(2):
#                        large folios, as after a copy or an earlier read
#                 cold   dropped: the agent's own faults read it in (with
#                        the disk's readahead)
#                 small  written with 4 KiB writes: order-0 folios only, so
#                        only the kernel's fault-around (64 KiB) inflates Rss
#                 asis   measured in place, as it is now (e.g. right after
#                        the build: GNU ld writes 2 MiB folios)
#   -k          keep the temporary directory (logs, kubeconfig)
#   -m MODE[,MODE...]
#               how to run each variant's agent; several modes run side by
#               side (one Node each, on the same control plane). A mode is
#               CONFIG[@UID:GID]. CONFIG is
#                 default     the built-in defaults (no --config)
#                 kernel-log  deploy/kernel-log/config.yaml, its two NPD
#                             files (checks.npdLogConfigs) copied next to it
#                             and its paths pointed there; kmsgPath stays
#                             /dev/kmsg (a non-root agent is given
#                             CAP_SYSLOG as an ambient capability to open
#                             it, as the image's user cannot otherwise)
#                 FILE        a config file, as it is
#               @UID:GID runs that mode's agent as that user (as
#               RSS_AGENT_USER does for every mode). Default: "default".
#               E.g. -m default,kernel-log,default@65532:65532,kernel-log@65532:65532
#
# Environment: ETCD_BIN, KUBE_BIN_DIR (as for the tests), RSS_VARIANTS,
# RSS_LDFLAGS, RSS_SRC (the tree to build the variants from, default the
# repository), RSS_AGENT_ENV (VAR=VALUE words given to every agent, e.g.
# "GOGC=50"), RSS_AGENT_ARGS (more flags for every agent, after the
# script's: e.g. "--shed-startup-memory=false", or "--log-level=info" to
# see the agent's one line about the shed in its log, printed per variant),
# RSS_AGENT_USER (UID:GID: run every agent as that user, with its binary
# owned by it and mode 0555, as the image installs it; needs root and
# setpriv; not with -c asis).
#
# Each report also prints the agent's Go runtime figures, read from its
# /metrics (the Go collector): heap in use, heap idle and released, the
# next GC's goal, stacks, goroutines, GOGC and the memory limit, and the
# GC cycles (their stop-the-world pauses) and bytes allocated so far.
#
# Needs: etcd ($ETCD_BIN or $PATH; `make etcd`), kube-apiserver
# ($KUBE_BIN_DIR or <repo>/bin; `make kube-binaries`), openssl, curl,
# readelf, od, dd, awk; go to build variants. Linux only (procfs).
set -Eeuo pipefail

die() {
	echo "hack/rss.sh: $*" >&2
	exit 1
}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIMES=60
TOPN=8
CACHE=warm
KEEP=0
MODES=default
while getopts "t:n:c:m:kh" opt; do
	case $opt in
	t) TIMES=$OPTARG ;;
	n) TOPN=$OPTARG ;;
	c) CACHE=$OPTARG ;;
	k) KEEP=1 ;;
	m) MODES=$OPTARG ;;
	h)
		sed -n '2,/^set -Eeuo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown option (see -h)" ;;
	esac
done
shift $((OPTIND - 1))
case $CACHE in warm | cold | small | asis) ;; *) die "-c must be warm, cold, small or asis" ;; esac
[[ $TIMES =~ ^[0-9]+(,[0-9]+)*$ ]] || die "-t wants whole seconds, or several separated by commas"
IFS=, read -r -a AT <<<"$TIMES"
for ((i = 1; i < ${#AT[@]}; i++)); do
	((AT[i] > AT[i - 1])) || die "-t: the times must ascend"
done
[[ $TOPN =~ ^[0-9]+$ ]] || die "-n wants a number"
IFS=, read -r -a MODE_LIST <<<"$MODES"
((${#MODE_LIST[@]})) || die "-m wants at least one mode"

# Keep in step with SELFTAINT_LDFLAGS in the Makefile (`make rss` passes it).
RSS_LDFLAGS=${RSS_LDFLAGS:--s -w -extldflags=-Wl,-Ttext-segment=0x401000}

# variant_cmd NAME prints the build command of a named variant, without -o
# and the package.
variant_cmd() {
	case $1 in
	make) echo "CGO_ENABLED=1 go build -trimpath -ldflags '$RSS_LDFLAGS'" ;;
	unshifted) echo "CGO_ENABLED=1 go build -trimpath -ldflags '-s -w'" ;;
	internal) echo "CGO_ENABLED=1 go build -trimpath -ldflags '-s -w -linkmode=internal'" ;;
	pie) echo "CGO_ENABLED=1 go build -trimpath -buildmode=pie -ldflags '-s -w'" ;;
	*) return 1 ;;
	esac
}

# --- preflight -------------------------------------------------------------

[[ $(uname -s) == Linux ]] || die "needs Linux (/proc/PID/smaps, pagemap)"
for tool in openssl curl readelf od dd awk; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done
ETCD=${ETCD_BIN:-$(command -v etcd || true)}
[[ -n $ETCD && -x $ETCD ]] ||
	die "etcd not found: install it with 'make etcd' (apt-get install etcd-server) or set ETCD_BIN"
APISERVER=${KUBE_BIN_DIR:-$REPO/bin}/kube-apiserver
if [[ ! -x $APISERVER ]]; then
	[[ -e $APISERVER.tmp ]] && die "kube-apiserver is still being built ($APISERVER.tmp); wait for 'make deps'"
	die "kube-apiserver not found at $APISERVER: build it with 'make kube-binaries' or set KUBE_BIN_DIR"
fi
if (($# == 0)); then
	command -v go >/dev/null 2>&1 || die "go not found on PATH (needed to build the variants)"
fi
read -r -a AGENT_ENV <<<"${RSS_AGENT_ENV:-}"
read -r -a AGENT_ARGS <<<"${RSS_AGENT_ARGS:-}"
# mode_user MODE: the UID:GID a mode's agent runs as ("" for this user).
mode_user() {
	if [[ $1 == *@* ]]; then echo "${1##*@}"; else echo "${RSS_AGENT_USER:-}"; fi
}
# mode_config MODE: the CONFIG part of a mode.
mode_config() { echo "${1%@*}"; }
for mode in "${MODE_LIST[@]}"; do
	user=$(mode_user "$mode")
	cfg=$(mode_config "$mode")
	case $cfg in
	default | kernel-log) ;;
	*) [[ -f $cfg ]] || die "-m $mode: $cfg is not a file (nor default or kernel-log)" ;;
	esac
	[[ -n $user ]] || continue
	[[ $user =~ ^[0-9]+:[0-9]+$ ]] || die "user $user (-m $mode or RSS_AGENT_USER): want UID:GID (e.g. 65532:65532)"
	[[ $CACHE != asis ]] || die "running as $user needs a copy of the binary to chown: not with -c asis"
	((EUID == 0)) || die "running as $user needs root (to chown the binary and change user)"
	command -v setpriv >/dev/null 2>&1 || die "setpriv not found (util-linux)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/selftaint-rss.XXXXXX")
PIDS=()
cleanup() {
	local rc=$? p
	trap - ERR
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ $KEEP == 1 ]]; then
		echo "kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "hack/rss.sh: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# stop PID: SIGTERM, SIGKILL after 10 s, reap it and forget it.
stop() {
	local p keep=()
	kill -TERM "$1" 2>/dev/null || true
	for _ in $(seq 50); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.2
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
	PIDS=(${keep[@]+"${keep[@]}"})
}

# --- variants ---------------------------------------------------------------

LABELS=()
BINS=()
if (($# > 0)); then
	for a in "$@"; do
		[[ $a == *=* ]] || die "arguments are LABEL=BINARY, got '$a'"
		[[ -f ${a#*=} && -x ${a#*=} ]] || die "${a#*=}: not an executable file"
		LABELS+=("${a%%=*}")
		BINS+=("$(cd "$(dirname "${a#*=}")" && pwd)/$(basename "${a#*=}")")
	done
else
	for v in ${RSS_VARIANTS:-make unshifted}; do
		cmd=$(variant_cmd "$v") || die "unknown variant '$v' in RSS_VARIANTS (make, unshifted, internal, pie)"
		echo "building variant $v: $cmd" >&2
		(cd "${RSS_SRC:-$REPO}" && eval "env $cmd -o '$WORK/build-$v' ./cmd/selftaint") ||
			die "building variant $v failed"
		LABELS+=("$v")
		BINS+=("$WORK/build-$v")
	done
fi

# --- control plane ----------------------------------------------------------

free_port() {
	# A port that was free a moment ago (the kernel's pick for port 0).
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 20000))
}

PKI=$WORK/pki
mkdir -p "$PKI" "$WORK/etcd" "$WORK/apiserver" "$WORK/run"
openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
TOKEN=$(openssl rand -hex 16)
echo "$TOKEN,rss-admin,rss-admin,system:masters" >"$PKI/tokens.csv"

ETCD_PORT=$(free_port)
PEER_PORT=$(free_port)
API_PORT=$(free_port)
ETCD_URL=http://127.0.0.1:$ETCD_PORT
API=https://127.0.0.1:$API_PORT

# ETCD_* variables would be read as etcd flags.
mapfile -t unset_etcd < <(env | awk -F= '/^ETCD_/ { print "-u"; print $1 }')
env ${unset_etcd[@]+"${unset_etcd[@]}"} "$ETCD" \
	--name=default --data-dir="$WORK/etcd" \
	--listen-client-urls="$ETCD_URL" --advertise-client-urls="$ETCD_URL" \
	--listen-peer-urls="http://127.0.0.1:$PEER_PORT" \
	--initial-advertise-peer-urls="http://127.0.0.1:$PEER_PORT" \
	--initial-cluster="default=http://127.0.0.1:$PEER_PORT" --initial-cluster-state=new \
	--logger=zap --log-outputs=stderr >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
PIDS+=("$ETCD_PID")

# wait_for NAME PID CMD...: retry CMD for up to a minute while PID lives.
wait_for() {
	local what=$1 pid=$2
	shift 2
	for _ in $(seq 600); do
		"$@" >/dev/null 2>&1 && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -20 "$WORK/$what.log" >&2
			die "$what exited before it was ready (log above)"
		fi
		sleep 0.1
	done
	tail -20 "$WORK/$what.log" >&2
	die "$what not ready after a minute (log above)"
}
wait_for etcd "$ETCD_PID" curl -fsS "$ETCD_URL/health"

# No --tls-cert-file: kube-apiserver writes a self-signed serving certificate
# into --cert-dir, and curl and the kubeconfig skip verification (loopback).
"$APISERVER" \
	--etcd-servers="$ETCD_URL" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
	--secure-port="$API_PORT" --cert-dir="$WORK/apiserver" \
	--token-auth-file="$PKI/tokens.csv" --authorization-mode=RBAC \
	--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
	--service-account-issuer=https://kubernetes.default.svc \
	--service-cluster-ip-range=10.0.0.0/24 --enable-priority-and-fairness=false \
	--disable-admission-plugins=ServiceAccount --profiling=false >"$WORK/kube-apiserver.log" 2>&1 &
API_PID=$!
PIDS+=("$API_PID")
kapi() { curl -ksS --fail -H "Authorization: Bearer $TOKEN" "$@"; }
wait_for kube-apiserver "$API_PID" kapi "$API/readyz"

KUBECONFIG_FILE=$WORK/kubeconfig
cat >"$KUBECONFIG_FILE" <<KC
apiVersion: v1
kind: Config
clusters: [{name: rss, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
users: [{name: rss-admin, user: {token: "$TOKEN"}}]
contexts: [{name: rss, context: {cluster: rss, user: rss-admin}}]
current-context: rss
KC
# Non-root agents read the kubeconfig and the configs (nothing else here).
chmod 0755 "$WORK"
chmod 0644 "$KUBECONFIG_FILE"

# The kernel-log mode's config: deploy/kernel-log's, its NPD files next to
# it and its paths pointed there.
for mode in "${MODE_LIST[@]}"; do
	[[ $(mode_config "$mode") == kernel-log ]] || continue
	mkdir -p "$WORK/kernel-log"
	cp "$REPO"/deploy/kernel-log/npd/*.json "$WORK/kernel-log/"
	sed "s#/etc/selftaint/#$WORK/kernel-log/#" "$REPO/deploy/kernel-log/config.yaml" >"$WORK/kernel-log/config.yaml"
	chmod -R a+rX "$WORK/kernel-log"
	break
done

# config_args MODE: the --config flag of a mode (none for default).
config_args() {
	local cfg
	cfg=$(mode_config "$1")
	case $cfg in
	default) ;;
	kernel-log) echo "--config=$WORK/kernel-log/config.yaml" ;;
	*) echo "--config=$(cd "$(dirname "$cfg")" && pwd)/$(basename "$cfg")" ;;
	esac
}

# --- measuring ---------------------------------------------------------------

PAGE=$(getconf PAGESIZE)
TICKS=$(getconf CLK_TCK)
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# drop FILE: drop FILE's clean pages from the page cache.
drop() { dd if="$1" iflag=nocache count=0 status=none; }

# prepare LABEL BIN [UID:GID]: prints the path to run BIN from, its page
# cache set up as -c asks, owned by UID:GID (mode 0555) when given.
prepare() {
	local out=$WORK/run/$1
	case $CACHE in
	asis)
		echo "$2"
		return
		;;
	small) dd if="$2" of="$out" bs=4096 conv=fsync status=none ;;
	*) dd if="$2" of="$out" bs=1M conv=fsync status=none ;;
	esac
	chmod +x "$out"
	if [[ -n ${3:-} ]]; then
		chown "$3" "$out"
		chmod 0555 "$out"
	fi
	case $CACHE in
	warm) drop "$out" && cat "$out" >/dev/null ;;
	cold) drop "$out" ;;
	esac
	echo "$out"
}

# resident PID START END: how many pages of [START, END) are present, and how
# many of those are file pages (pagemap bits 63 and 61), as "present file".
resident() {
	local pid=$1 start=$(($2 / PAGE * PAGE)) end=$((($3 + PAGE - 1) / PAGE * PAGE))
	if ((end <= start)); then
		echo "0 0"
		return
	fi
	dd if="/proc/$pid/pagemap" bs=65536 iflag=skip_bytes,count_bytes \
		skip=$((start / PAGE * 8)) count=$(((end - start) / PAGE * 8)) status=none |
		od -An -v -tx8 -w8 |
		awk '{ d = index("0123456789abcdef", substr($1, 1, 1)) - 1
		       if (d >= 8) { p++; if (d % 4 >= 2) f++ } }
		     END { printf "%d %d\n", p, f }'
}

# sections_report PID BIN: resident KiB of each allocated section of BIN.
sections_report() {
	local pid=$1 bin=$2 bias=0 first_vaddr map_start name addr size a s p f pages
	if [[ $(readelf -hW "$bin") == *"Type:"*DYN* ]]; then
		# Position independent: sections are at their address plus the
		# load bias (where the mapping of file offset 0 starts, less the
		# first PT_LOAD's page-aligned address).
		first_vaddr=$(readelf -lW "$bin" | awk '$1 == "LOAD" && !n++ { print $3 }')
		map_start=$(awk -v b="$bin" '$6 == b && $3 == "00000000" && !n++ { split($1, r, "-"); print r[1] }' "/proc/$pid/maps")
		bias=$((0x$map_start - (first_vaddr / PAGE * PAGE)))
	fi
	printf '  %-20s %10s %10s %9s %10s\n' section size-KiB rss-KiB "of-pages" anon-KiB
	while read -r name addr size; do
		a=$((0x$addr + bias))
		s=$((0x$size))
		((s > 0)) || continue
		read -r p f < <(resident "$pid" "$a" $((a + s)))
		pages=$(((a + s + PAGE - 1) / PAGE - a / PAGE))
		printf '  %-20s %10d %10d %8d%% %10d\n' "$name" $((s / 1024)) $((p * PAGE / 1024)) \
			$((100 * p / pages)) $(((p - f) * PAGE / 1024))
	done < <(readelf -SW "$bin" | sed 's/^ *\[ *[0-9]*\] *//' |
		awk '$1 ~ /^\./ && $2 != "NULL" && $7 ~ /A/ { print $1, $3, $5 }')
}

# mappings_report PID: the TOPN largest mappings by Rss.
mappings_report() {
	awk '
		/^[0-9a-f]+-[0-9a-f]+ / { key = $1 " " $2 " " $3 " " ($6 == "" ? "[anon]" : $6); next }
		/^Rss:/ { rss[key] = $2 }
		/^Anonymous:/ { anon[key] = $2 }
		END { for (k in rss) printf "%d %d %s\n", rss[k], anon[k], k }' "/proc/$1/smaps" |
		sort -k1,1nr |
		awk -v top="$TOPN" 'NR <= top { printf "  %8d %8d  %s %s %s %s\n", $1, $2, $3, $4, $5, $6 }'
}

# cpu_faults PID: the CPU time (user + system, seconds) and the minor and
# major page faults of PID since its start, from /proc/PID/stat (fields after
# the command name, which may hold spaces: minflt 10, majflt 12, utime 14,
# stime 15).
cpu_faults() {
	local stat
	stat=$(<"/proc/$1/stat")
	stat=${stat##*) }
	# shellcheck disable=SC2086
	set -- $stat
	awk -v u="${12}" -v s="${13}" -v t="$TICKS" -v mi="${8}" -v ma="${10}" \
		'BEGIN { printf "%.2f %d %d\n", (u + s) / t, mi, ma }'
}

# goruntime_report PORT: the Go runtime's memory figures from the agent's
# /metrics (MiB; the Go collector's go_memstats_* and go_gc_*).
goruntime_report() {
	curl -fsS --max-time 10 "http://127.0.0.1:$1/metrics" 2>/dev/null | awk '
		/^go_memstats_heap_inuse_bytes / { hi = $2 }
		/^go_memstats_heap_alloc_bytes / { ha = $2 }
		/^go_memstats_heap_idle_bytes / { hd = $2 }
		/^go_memstats_heap_released_bytes / { hr = $2 }
		/^go_memstats_next_gc_bytes / { ng = $2 }
		/^go_memstats_stack_inuse_bytes / { st = $2 }
		/^go_memstats_sys_bytes / { sy = $2 }
		/^go_goroutines / { g = $2 }
		/^go_threads / { th = $2 }
		/^go_gc_gogc_percent / { gc = $2 }
		/^go_gc_gomemlimit_bytes / { lim = $2 }
		/^go_gc_duration_seconds_count / { gcn = $2 }
		/^go_gc_duration_seconds_sum / { gcs = $2 }
		/^go_memstats_alloc_bytes_total / { at = $2 }
		function m(b) { return sprintf("%.1f", b / 1048576) }
		END {
			if (sy == "") { print "Go runtime: /metrics not read"; exit }
			printf "Go runtime (MiB): heap alloc %s, in use %s, idle %s (released %s), next GC goal %s; stacks %s; runtime total (sys) %s; goroutines %d, threads %d; GOGC %s, memory limit %s; since the start: %d GC cycles (stop-the-world %.1f ms), %s allocated\n",
				m(ha), m(hi), m(hd), m(hr), m(ng), m(st), m(sy), g, th, gc, (lim >= 9e18 ? "none" : m(lim)), gcn, gcs * 1000, m(at)
		}' || echo "Go runtime: /metrics not read"
}

# report LABEL BIN PID NODE LOG SECONDS PORT: one measurement of a running agent;
# appends a row to SUMMARY.
report() {
	local label=$1 bin=$2 pid=$3 node=$4 log=$5 at=$6 port=$7 conds rss anon pmd file hwm size etype needed cpu minflt majflt
	conds=$(kapi "$API/api/v1/nodes/$node" | grep -c '"lastHeartbeatTime"' || true)
	read -r rss anon pmd < <(awk '/^Rss:/ { r = $2 } /^Anonymous:/ { a = $2 } /^FilePmdMapped:/ { p = $2 }
		END { print r, a, p + 0 }' "/proc/$pid/smaps_rollup")
	read -r cpu minflt majflt < <(cpu_faults "$pid")
	file=$((rss - anon))
	hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
	size=$(stat -c %s "$bin")
	etype=$(readelf -hW "$bin" | awk -F: '/Type:/ { sub(/^ +/, "", $2); print $2 }')
	needed=$(readelf -dW "$bin" | awk '/NEEDED/ { printf "%s ", $5 }')
	echo
	echo "=== $label ($bin) at ${at}s"
	echo "size $(mib $((size / 1024))) MiB; ELF type $etype; NEEDED ${needed:-none}"
	echo "LOAD segments: offset vaddr filesz flags, and (vaddr - offset) mod 2 MiB: a 2 MiB folio fits a page table only where that is 0"
	readelf -lW "$bin" | awk '$1 == "LOAD" { f = $7; for (i = 8; i < NF; i++) f = f $i; print $2, $3, $5, f }' |
		while read -r off vaddr fsz flags; do
			printf '  %-10s %-18s %-10s %-3s %#x\n' "$off" "$vaddr" "$fsz" "$flags" $(((vaddr - off) % 0x200000))
		done
	echo "after ${at}s (page cache: $CACHE): Rss $(mib "$rss") MiB = Anonymous $(mib "$anon") + file-backed $(mib "$file")" \
		"(of which PMD-mapped $(mib "$pmd")); peak (VmHWM) $(mib "$hwm") MiB; Node conditions: $conds"
	echo "since the start: CPU (user + system) ${cpu}s; page faults: $minflt minor, $majflt major"
	goruntime_report "$port"
	grep -h 'shed start-up memory' "$log" 2>/dev/null | sed 's/^/agent log: /' || true
	((conds > 0)) || echo "warning: the agent has published no condition: not a steady state (see $log, -k keeps it)"
	echo "largest mappings (KiB):"
	echo "       rss     anon  range perms offset path"
	mappings_report "$pid"
	echo "resident part of each section of the binary (pagemap):"
	sections_report "$pid" "$bin"
	SUMMARY+=("$(printf '%-32s %5s %7s %-5s %7s %7s %7s %7s %7s %8s %6s %5s' "$label" "$at" "$(mib $((size / 1024)))" "${etype%% *}" \
		"$(mib "$rss")" "$(mib "$anon")" "$(mib "$file")" "$(mib "$hwm")" "$cpu" "$minflt" "$majflt" "$conds")")
}

SUMMARY=()
for i in "${!LABELS[@]}"; do
	# Every mode of this variant runs side by side, a Node each.
	M_LABEL=() M_BIN=() M_PID=() M_NODE=() M_LOG=() M_PORT=()
	for mode in "${MODE_LIST[@]}"; do
		label=${LABELS[$i]}
		((${#MODE_LIST[@]} == 1)) && [[ $mode == default ]] || label="$label/$mode"
		user=$(mode_user "$mode")
		bin=$(prepare "$(echo "$label" | tr '/@:' '---')" "${BINS[$i]}" "$user")
		node=$(echo "rss-$label" | tr 'A-Z_./@:' 'a-z-----' | tr -cd 'a-z0-9-' | cut -c1-60)
		kapi -X POST -H 'Content-Type: application/json' "$API/api/v1/nodes" \
			-d "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$node\"}}" >/dev/null ||
			die "creating Node $node failed"
		log=$WORK/agent-$node.log
		args=(agent --node-name="$node" --kubeconfig="$KUBECONFIG_FILE" --log-level=warn)
		read -r -a cargs <<<"$(config_args "$mode")"
		args+=(${cargs[@]+"${cargs[@]}"})
		# Older agents have no metrics server; newer ones must not take :9746.
		port=
		if [[ $("$bin" agent -h 2>&1 || true) == *-metrics-address* ]]; then
			port=$(free_port)
			args+=(--metrics-address=127.0.0.1:$port)
		fi
		args+=(${AGENT_ARGS[@]+"${AGENT_ARGS[@]}"})
		as_user=()
		if [[ -n $user ]]; then
			as_user=(setpriv --reuid="${user%%:*}" --regid="${user##*:}" --clear-groups)
			# The kernel log (/dev/kmsg, dmesg_restrict) needs CAP_SYSLOG.
			[[ $(mode_config "$mode") != kernel-log ]] || as_user+=(--inh-caps=+syslog --ambient-caps=+syslog)
		fi
		${as_user[@]+"${as_user[@]}"} env ${AGENT_ENV[@]+"${AGENT_ENV[@]}"} "$bin" "${args[@]}" >"$log" 2>&1 &
		pid=$!
		PIDS+=("$pid")
		echo "$label: agent pid $pid on node $node${user:+ as $user}; measuring after ${TIMES//,/, }s..." >&2
		M_LABEL+=("$label") M_BIN+=("$bin") M_PID+=("$pid") M_NODE+=("$node") M_LOG+=("$log") M_PORT+=("$port")
	done
	started=$SECONDS
	for at in "${AT[@]}"; do
		while ((SECONDS - started < at)); do
			for j in "${!M_PID[@]}"; do
				if ! kill -0 "${M_PID[$j]}" 2>/dev/null; then
					tail -20 "${M_LOG[$j]}" >&2
					die "agent (${M_LABEL[$j]}) exited early (log above)"
				fi
			done
			sleep 1
		done
		for j in "${!M_PID[@]}"; do
			report "${M_LABEL[$j]}" "${M_BIN[$j]}" "${M_PID[$j]}" "${M_NODE[$j]}" "${M_LOG[$j]}" "$at" "${M_PORT[$j]}"
		done
	done

	for j in "${!M_PID[@]}"; do
		stop "${M_PID[$j]}"
		kapi -X DELETE "$API/api/v1/nodes/${M_NODE[$j]}" >/dev/null || true
	done
done

echo
echo "summary (MiB; page cache: $CACHE; at: seconds after the agent's start; cpu: user + system seconds since the start;" \
	"faults since the start${RSS_AGENT_USER:+; agent user: $RSS_AGENT_USER}; modes: $MODES${RSS_AGENT_ENV:+; agent env: $RSS_AGENT_ENV}${RSS_AGENT_ARGS:+; agent args: $RSS_AGENT_ARGS})"
printf '%-32s %5s %7s %-5s %7s %7s %7s %7s %7s %8s %6s %5s\n' variant at size elf rss anon file peak cpu-s minflt majflt conds
printf '%s\n' "${SUMMARY[@]}"
