#!/usr/bin/env bash
# pgvector for this machine's PostgreSQL, from Debian's own source package.
#
# Debian bookworm ships no pgvector; trixie's source package (pgvector 0.8.0-1)
# builds against bookworm's PostgreSQL 15. Its source comes through a private
# apt configuration (a trixie deb-src line in a temporary directory: the
# system's sources are not touched), is checked by apt against Debian's keys,
# built with Debian's own tooling (pg_buildext, dpkg-buildpackage) and
# installed as a .deb. Needs root or sudo; about a minute.
set -euo pipefail

VERSION=0.8.0-1
SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
PG=$(ls /usr/lib/postgresql | sort -n | tail -1)
if [ -f "/usr/share/postgresql/$PG/extension/vector.control" ]; then
  exit 0
fi
echo "Building pgvector $VERSION for PostgreSQL $PG from Debian's source package..."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt's downloader runs as _apt
mkdir -p "$work/lists/partial" "$work/build"
cat > "$work/sources.list" <<SOURCES
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
SOURCES
private=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-"
         -o "Dir::State::Lists=$work/lists" -o "APT::Get::List-Cleanup=0")
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential debhelper dpkg-dev "postgresql-server-dev-$PG" postgresql-server-dev-all >/dev/null
$SUDO apt-get "${private[@]}" update -qq
cd "$work/build"
$SUDO chown -R "$(id -u)" "$work"
apt-get "${private[@]}" source -qq "pgvector=$VERSION" >/dev/null
cd pgvector-*/
echo "$PG" > debian/pgversions
pg_buildext updatecontrol >/dev/null
# -d: its build dependencies are installed above under bookworm's names (trixie
# spells some of them differently: architecture-is-64-bit, postgresql-all).
dpkg-buildpackage -b -us -uc -d >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
$SUDO dpkg -i ../postgresql-"$PG"-pgvector_*.deb >/dev/null
echo "pgvector installed: CREATE EXTENSION vector works on PostgreSQL $PG."
