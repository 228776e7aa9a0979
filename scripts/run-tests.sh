#!/usr/bin/env bash
# `make test`'s pytest run. The container tests (tests/integration: the lab, ansible, broker
# containers; ~15 minutes mostly spent waiting on containers and ansible) run in a second pytest
# process beside the rest, so the suite's wall time is the longer of the two rather than their sum.
# Their output goes to build/test-integration.log and is printed after the main run; the exit code is
# non-zero when either run failed. Arguments are passed to the main run.
set -u
BIN=${BIN:-.venv/bin}
mkdir -p build
log=build/test-integration.log
"$BIN/pytest" -q -p no:cacheprovider -rf --durations=15 tests/integration >"$log" 2>&1 &
ipid=$!
trap 'kill -TERM "$ipid" 2>/dev/null' INT TERM
echo "tests/integration runs beside this run (pid $ipid); its output: $log"
"$BIN/pytest" -q -p no:cacheprovider -rf --durations=25 --ignore=tests/integration "$@"
rc=$?
echo "== waiting for tests/integration (pid $ipid) =="
wait "$ipid"
irc=$?
cat "$log"
echo "main run: exit $rc; tests/integration: exit $irc"
[ "$rc" -eq 0 ] && [ "$irc" -eq 0 ]
