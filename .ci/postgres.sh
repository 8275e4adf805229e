#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: Debian's package, run as an
# unprivileged user on 127.0.0.1 with its data in a temporary directory
# (fsync and synchronous_commit stay on, as in production).
#
#   eval "$(bash .ci/postgres.sh start)"   # installs if needed, starts, prints the exports
#   bash .ci/postgres.sh stop "$STATEINDEX_PG_DIR"
#
# start prints STATEINDEX_PG_URL (what the tests and `stateindex serve
# --store` use) and STATEINDEX_PG_DIR (what stop needs).
set -euo pipefail
cmd=${1:-start}
port=${STATEINDEX_PG_PORT:-54329}

pgbin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && { echo "$d"; return; }
	done
	return 1
}

as_user() { # run as the postgres user when we are root (initdb refuses root)
	if [ "$(id -u)" = 0 ]; then
		su postgres -s /bin/bash -c "$*"
	else
		bash -c "$*"
	fi
}

case "$cmd" in
start)
	if ! bin=$(pgbin); then
		echo "postgres.sh: installing Debian's postgresql" >&2
		export DEBIAN_FRONTEND=noninteractive
		sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo -n"
		$sudo apt-get update -q >&2 || true
		$sudo apt-get install -y -q --no-install-recommends postgresql >&2
		bin=$(pgbin)
	fi
	dir=$(mktemp -d /tmp/stateindex-pg.XXXXXX)
	chmod 755 "$dir"
	[ "$(id -u)" = 0 ] && chown postgres "$dir"
	as_user "'$bin/initdb' -D '$dir/data' -U stateindex --auth=trust -E UTF8 --locale=C >'$dir/initdb.log' 2>&1" ||
		{ cat "$dir/initdb.log" >&2; exit 1; }
	as_user "'$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -w -t 30 \
		-o \"-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c fsync=on -c synchronous_commit=on -c max_connections=300 -c shared_buffers=128MB\" start" >&2 ||
		{ cat "$dir/server.log" >&2; exit 1; }
	as_user "'$bin/createdb' -h 127.0.0.1 -p $port -U stateindex stateindex" >&2
	echo "export STATEINDEX_PG_URL='postgres://stateindex@127.0.0.1:$port/stateindex?sslmode=disable'"
	echo "export STATEINDEX_PG_DIR='$dir'"
	;;
stop)
	dir=${2:-${STATEINDEX_PG_DIR:-}}
	[ -n "$dir" ] && [ -d "$dir/data" ] || exit 0
	bin=$(pgbin)
	as_user "'$bin/pg_ctl' -D '$dir/data' -m fast -w stop" >&2 || true
	rm -rf "$dir"
	;;
*)
	echo "usage: postgres.sh start | stop [DIR]" >&2
	exit 2
	;;
esac
