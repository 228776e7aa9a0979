#!/usr/bin/env bash
# `make test`'s pytest run, in two lanes so the suite's wall time is the longer lane rather than the
# sum. The side lane runs the container tests (tests/integration: the lab, ansible, broker containers;
# ~15 minutes mostly spent waiting on containers and ansible), then the benchmark's quick runs
# (tests/bench) and the mixed Apache Kafka + Headwater clusters (tests/mixed); the main lane runs
# everything else. The side lane's output goes to build/test-side.log and is printed after the main
# lane; the exit code is non-zero when either lane failed. Arguments are passed to the main lane.
set -u
BIN=${BIN:-.venv/bin}
mkdir -p build
log=build/test-side.log
side=()
for d in tests/integration tests/bench tests/mixed; do
    [ -d "$d" ] && side+=("$d")
done
ignores=()
for d in "${side[@]}"; do
    ignores+=("--ignore=$d")
done
"$BIN/pytest" -q -p no:cacheprovider -rf --durations=20 "${side[@]}" >"$log" 2>&1 &
spid=$!
trap 'kill -TERM "$spid" 2>/dev/null' INT TERM
echo "the side lane (${side[*]}) runs beside this one (pid $spid); its output: $log"
"$BIN/pytest" -q -p no:cacheprovider -rf --durations=25 "${ignores[@]}" "$@"
rc=$?
echo "== waiting for the side lane (pid $spid) =="
wait "$spid"
src=$?
cat "$log"
echo "main lane: exit $rc; side lane (${side[*]}): exit $src"
[ "$rc" -eq 0 ] && [ "$src" -eq 0 ]
