#!/bin/sh
# CPU per notification in counts that do not depend on the machine's load
# (docs/engine.md#cpu-per-notification): valgrind's callgrind for the
# instructions, `strace -c -f` for the system calls, of `ruled` serving one
# rule on `vehicle.kickstand.up`/`down` with one `redis` step, driven one
# notification at a time (`HSET vehicle kickstand up|down`, `PUBLISH
# vehicle kickstand`, then `BLPOP` of the rule's list). Each figure is the
# difference between a run of 1,200 and one of 200 notifications, divided
# by 1,000, so start and stop cancel out.
#
#   bench/cpu-count.sh RULED RULEC [instructions|syscalls|both]
#
# CPU_COUNT_PATH=tail counts the first action of a rule with a durable tail
# instead (the floor bench's second path): `PUBLISH ev:bench.tail`, then
# `BLPOP` of the first step's list; the rule's second step, ten minutes
# later, has every run write its pending record.
#
# CPU_COUNT_RELAY=<program> counts the reading relay of the floor bench
# too, under the same load, and prints ruled's figures as ratios to its:
# the program is the floor bench's binary (target/release/deps/floor-*,
# built by `cargo bench -p ruled --bench floor --no-run`), which acts as
# the relay when started with RULES_BENCH_FLOOR set (bench/src/floor.rs).
# RULES_BENCH_FLOOR_SHAPE=tokio (or tokio-publishing) in the environment
# counts its twin on tokio instead (without, or with, ruled's bus work).
#
# RULED: a release `ruled` (build it with CARGO_PROFILE_RELEASE_STRIP=false
# to keep the symbols for callgrind_annotate); RULEC: any `rulec`. Needs
# redis-server, redis-cli, valgrind and strace on the PATH. Prints one line
# per figure (CPU_COUNT_TOP=N adds the N functions that take the most per
# notification, inclusive); the callgrind files stay in the printed
# directory.
set -eu

ruled=$(realpath "$1")
rulec=$(realpath "$2")
what=${3:-both}
small=${CPU_COUNT_SMALL:-200}
large=${CPU_COUNT_LARGE:-1200}
dir=$(mktemp -d /tmp/cpu-count.XXXXXX)
sock="$dir/redis.sock"

redis-server --port 0 --save "" --appendonly no --unixsocket "$sock" \
    --unixsocketperm 700 --daemonize no --dir "$dir" >/dev/null 2>&1 &
redis=$!
trap 'kill $redis 2>/dev/null || true' EXIT
i=0
until redis-cli -s "$sock" PING >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 100 ] || { echo "redis-server did not start" >&2; exit 1; }
    sleep 0.1
done

path=${CPU_COUNT_PATH:-notification}
mkdir "$dir/rules"
if [ "$path" = tail ]; then
    cat >"$dir/rules/tail.toml" <<'EOF'
[[topic]]
name = "bench.tail"

[[rule]]
name = "tail"
on = ["bench.tail"]
trip = false

[[rule.step]]
do = "redis"
list = "bench:tail"
push = "x"

[[rule.step]]
do = "redis"
after = "10m"
list = "bench:tail-late"
push = "x"
EOF
else
    cat >"$dir/rules/kickstand.toml" <<'EOF'
[[rule]]
name = "kickstand"
on = ["vehicle.kickstand.up", "vehicle.kickstand.down"]
trip = false

[[rule.step]]
do = "redis"
list = "bench:kick"
push = "x"
EOF
fi
"$rulec" build "$dir/rules" -o "$dir/rules.bundle" >/dev/null
redis-cli -s "$sock" HSET vehicle kickstand down >/dev/null

# The load: `count` notifications, each waited for.
load() {
    n=0
    while [ $n -lt "$1" ]; do
        if [ "$path" = tail ]; then
            printf 'PUBLISH ev:bench.tail "{\\"topic\\":\\"bench.tail\\"}"\nBLPOP bench:tail 10\n'
        else
            if [ $((n % 2)) -eq 0 ]; then value=up; else value=down; fi
            printf 'HSET vehicle kickstand %s\nPUBLISH vehicle kickstand\nBLPOP bench:kick 10\n' $value
        fi
        n=$((n + 1))
    done >"$dir/load.txt"
    redis-cli -s "$sock" <"$dir/load.txt" >/dev/null
}

# Runs the counted program (`$program`: ruled, or the relay) under `$@` (a
# wrapper) through `count` notifications; the process sent SIGTERM is the
# wrapper's child for strace.
run() {
    count=$1
    shift
    log="$dir/$program-$count.log"
    if [ "$program" = relay ]; then
        binary=$relay
        RULES_BENCH_FLOOR=$(printf '%s\tvehicle\tbench:kick\tvehicle' "$sock") \
            "$@" "$relay" >"$log" 2>&1 &
        ready=subscribed
    else
        binary=$ruled
        "$@" "$ruled" --redis "redis+unix://$sock" --bundle "$dir/rules.bundle" \
            --log-level info --stats-interval 10s 2>"$log" &
        ready="ruled ready"
    fi
    wrapper=$!
    i=0
    until grep -q "$ready" "$log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 600 ] || { echo "$program did not start: see $log" >&2; exit 1; }
        sleep 0.1
    done
    load "$count"
    target=$(pgrep -P $wrapper -x "$(basename "$binary" | cut -c1-15)" || echo $wrapper)
    kill -TERM "$target"
    # (A relay killed by the signal is no news.)
    { wait $wrapper; } 2>/dev/null || true
}

relay=${CPU_COUNT_RELAY:+$(realpath "$CPU_COUNT_RELAY")}
if [ -n "$relay" ] && [ "$path" = tail ]; then
    echo "CPU_COUNT_RELAY counts the notification path only" >&2
    exit 1
fi
programs="ruled${relay:+ relay}"

# `label`: "" for ruled, " (relay)" for the relay; `ratio NAME RULED RELAY`
# prints ruled's figure against the relay's once both are counted.
label() { [ "$program" = relay ] && echo " (relay)" || true; }
ratio() {
    perl -e 'printf "  ruled / relay, %s: %.2fx\n", $ARGV[0], $ARGV[1] / $ARGV[2]' "$@"
}

if [ "$what" != syscalls ]; then
    for program in $programs; do
        for count in $small $large; do
            run $count valgrind --tool=callgrind \
                --callgrind-out-file="$dir/callgrind.$program.$count" -q
        done
        total() { grep '^totals:\|^summary:' "$dir/callgrind.$program.$1" | head -1 | awk '{print $2}'; }
        per=$(( ($(total $large) - $(total $small)) / (large - small) ))
        echo "instructions per $path$(label): $per"
        eval "instructions_$program=$per"
        # The functions per notification, inclusive (the same difference,
        # per function).
        for count in $small $large; do
            callgrind_annotate --inclusive=yes --threshold=100 \
                "$dir/callgrind.$program.$count" 2>/dev/null |
                sed -n 's/^ *\([0-9,]*\) *( *[0-9.]*%) *\(.*\)$/\1\t\2/p' | tr -d , \
                    >"$dir/functions.$program.$count"
        done
        awk -F'\t' -v runs=$((large - small)) '
            NR == FNR { small[$2] = $1; next }
            { d = ($1 - small[$2]) / runs; if (d >= 50) printf "%8.0f %s\n", d, $2 }
        ' "$dir/functions.$program.$small" "$dir/functions.$program.$large" |
            sort -rn >"$dir/per-notification.$program"
        # tokio's parking (`Context::park`, inclusive) follows timing: how
        # often the runtime finds nothing to do between the requests. The
        # total less it compares builds to within about a hundred.
        park=$(awk '/current_thread::Context::park / { print $1; exit }' \
            "$dir/per-notification.$program")
        if [ -n "$park" ]; then
            echo "  of them in tokio's parking: $park; the rest: $((per - park))"
        fi
        # CPU_COUNT_TOP=40 lists the 40 that take the most.
        if [ "${CPU_COUNT_TOP:-0}" -gt 0 ]; then
            head -n "$CPU_COUNT_TOP" "$dir/per-notification.$program"
        fi
    done
    if [ -n "$relay" ]; then
        ratio instructions "$instructions_ruled" "$instructions_relay"
    fi
fi
if [ "$what" != instructions ]; then
    for program in $programs; do
        for count in $small $large; do
            run $count strace -f -c -o "$dir/strace.$program.$count"
        done
        calls() { awk '$NF == "total" {print $4}' "$dir/strace.$program.$1"; }
        per=$(perl -e 'printf "%.2f", ($ARGV[0] - $ARGV[1]) / ($ARGV[2] - $ARGV[3])' \
            "$(calls $large)" "$(calls $small)" $large $small)
        echo "system calls per $path$(label): $per"
        eval "syscalls_$program=$per"
        for name in sendto recvfrom write read epoll_wait futex writev; do
            l=$(awk -v n=$name '$NF == n {print $4}' "$dir/strace.$program.$large"); l=${l:-0}
            s=$(awk -v n=$name '$NF == n {print $4}' "$dir/strace.$program.$small"); s=${s:-0}
            perl -e 'printf "  %s: %.2f\n", $ARGV[0], ($ARGV[1] - $ARGV[2]) / ($ARGV[3] - $ARGV[4])' \
                $name "$l" "$s" $large $small
        done
    done
    if [ -n "$relay" ]; then
        ratio "system calls" "$syscalls_ruled" "$syscalls_relay"
    fi
fi
echo "files: $dir"
