#!/bin/bash
# Healthy when the server answers `srvr` and is serving (standalone, leader or follower).
set -uo pipefail
port="${ZOO_CLIENT_PORT:-2181}"
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'srvr' >&3
reply="$(timeout 2 cat <&3)"
exec 3<&-
grep -Eq '^Mode: (standalone|leader|follower|observer)' <<<"$reply"
