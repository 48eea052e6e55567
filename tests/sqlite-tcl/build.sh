#!/usr/bin/env bash
# build.sh — builds SQLite 3.40.1's TCL test harness (testfixture) with
# libwaldio linked in and registered as the default VFS (waldio_init.c), and
# prints the path of the binary on its last line of output.
#
#   tests/sqlite-tcl/build.sh [--lib PATH/libwaldio.a] [--cache DIR]
#                             [--page-size 1024|4096]
#
# --page-size: the default page size compiled into testfixture. 1024 is
# testfixture as SQLite ships it (most tests then make 1024-byte pages, which
# waldio stores in a padding layout); 4096 builds a second testfixture
# (bld-p4096) in which databases that do not ask for a page size get 4096-byte
# pages, the only way the suite reaches the embed layout.
#
# Works on a fresh Debian 12 machine as root (CI): SQLite's source comes from
# Debian's own source package, fetched with apt through a private apt
# directory holding one deb-src stanza (the machine's sources are untouched);
# apt checks it against the signed Release file. Needs tcl8.6-dev, gcc, make,
# xz-utils (.ci/apt-packages).
#
# Everything is cached in DIR (default /var/tmp/waldio-sqlite-3.40.1, or
# $WALDIO_SQLITE_CACHE): the download, the configured out-of-tree build and
# the binary. A later run rebuilds only testfixture, and only when the
# libwaldio.a it links (or waldio_init.c, waldio.h, this script) changed. The
# library is copied into DIR first so a concurrent `ninja -C build` cannot
# change it under the compiler. Locks: the download under DIR/.lock (shared
# with bench/speedtest1/build.sh), each build directory under its own lock,
# so the two page-size builds can compile at the same time (each testfixture
# is one single-threaded compiler run); concurrent callers of one build wait.
#
# The same binary is stock SQLite with WALDIO_TEST_VFS=stock (waldio is then
# never registered); see waldio_init.c for the other variables.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSION=3.40.1
LIB="$ROOT/build/libwaldio.a"
CACHE="${WALDIO_SQLITE_CACHE:-/var/tmp/waldio-sqlite-$VERSION}"
PAGESIZE=1024

while [ $# -gt 0 ]; do
  case "$1" in
    --lib) LIB="$2"; shift 2 ;;
    --cache) CACHE="$2"; shift 2 ;;
    --page-size) PAGESIZE="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ ! -f "$LIB" ]; then
  echo "build.sh: $LIB not found; run 'make build' first" >&2
  exit 1
fi
for tool in apt-get tclsh8.6 gcc make xz flock sha256sum; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool is missing (Debian packages: .ci/apt-packages)" >&2
    exit 1
  }
done
if [ ! -f /usr/lib/tcl8.6/tclConfig.sh ]; then
  echo "build.sh: /usr/lib/tcl8.6/tclConfig.sh missing (apt-get install tcl8.6-dev)" >&2
  exit 1
fi

mkdir -p "$CACHE"

case "$PAGESIZE" in
  1024) BLD="$CACHE/bld" ;;
  4096) BLD="$CACHE/bld-p4096" ;;
  *) echo "build.sh: --page-size must be 1024 or 4096" >&2; exit 2 ;;
esac
SRC="$CACHE/sqlite3-$VERSION"
log() { echo "build.sh: $*" >&2; }

# 1. Source: Debian's sqlite3 source package (upstream tarball inside).
fetch_source() {
  local apt="$CACHE/apt" dl="$CACHE/dl" stanza
  rm -rf "$apt" "$dl"
  mkdir -p "$apt/sources" "$apt/lists/partial" "$apt/cache/archives/partial" "$dl"
  # The machine's own Debian stanza (the one serving bookworm-updates),
  # turned into a deb-src stanza for bookworm.
  stanza="$(awk 'BEGIN{RS="";ORS="\n\n"} /Suites:[^\n]*bookworm-updates/' \
              /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  if [ -z "$stanza" ]; then
    log "no Debian stanza with bookworm-updates in /etc/apt/sources.list.d/debian.sources"
    exit 1
  fi
  printf '%s' "$stanza" | sed -e 's/^Types:.*/Types: deb-src/' \
      -e 's/^Suites:.*/Suites: bookworm/' > "$apt/sources/waldio-src.sources"
  local opts=(-o "Dir::Etc::SourceParts=$apt/sources"
              -o "Dir::Etc::SourceList=/dev/null"
              -o "Dir::State::Lists=$apt/lists"
              -o "Dir::Cache=$apt/cache"
              -o "APT::Sandbox::User=root")
  log "fetching Debian's sqlite3 source package"
  apt-get -qq "${opts[@]}" update
  (cd "$dl" && apt-get -qq "${opts[@]}" source --download-only sqlite3 >/dev/null)
  local tarball="$dl/sqlite3_$VERSION.orig.tar.xz"
  if [ ! -f "$tarball" ]; then
    log "apt did not deliver sqlite3_$VERSION.orig.tar.xz (got: $(ls "$dl"))"
    exit 1
  fi
  rm -rf "$SRC" "$SRC.tmp"
  mkdir -p "$SRC.tmp"
  tar -xJf "$tarball" -C "$SRC.tmp"
  mv "$SRC.tmp/sqlite3-$VERSION" "$SRC"
  rm -rf "$SRC.tmp"
}

(
  exec 8>"$CACHE/.lock"
  flock 8
  [ -x "$SRC/configure" ] || fetch_source
)
mkdir -p "$BLD"
exec 9>"$BLD.lock"
flock 9

# 2. Out-of-tree configure, once.
if [ ! -f "$BLD/Makefile" ]; then
  log "configuring in $BLD"
  rm -rf "$BLD"
  mkdir -p "$BLD"
  (cd "$BLD" && nice -n 10 "$SRC/configure" --with-tcl=/usr/lib/tcl8.6 >configure.log 2>&1) || {
    tail -20 "$BLD/configure.log" >&2
    rm -f "$BLD/Makefile"
    exit 1
  }
  if [ "$PAGESIZE" != 1024 ]; then
    grep -q 'SQLITE_DEFAULT_PAGE_SIZE=1024' "$BLD/Makefile" || {
      log "no SQLITE_DEFAULT_PAGE_SIZE=1024 in the generated Makefile"; rm -f "$BLD/Makefile"; exit 1; }
    sed -i "s/SQLITE_DEFAULT_PAGE_SIZE=1024/SQLITE_DEFAULT_PAGE_SIZE=$PAGESIZE/" "$BLD/Makefile"
  fi
fi

# 3. testfixture, rebuilt when what it links changed.
LINK="$BLD/link"
mkdir -p "$LINK"
cp "$LIB" "$LINK/libwaldio.a.tmp"
mv "$LINK/libwaldio.a.tmp" "$LINK/libwaldio.a"
cp "$HERE/waldio_init.c" "$LINK/waldio_init.c"
key="$(cat "$LINK/libwaldio.a" "$LINK/waldio_init.c" \
           "$ROOT/include/waldio.h" "$0" | sha256sum | cut -c1-64)"
if [ -x "$BLD/testfixture" ] && [ "$(cat "$BLD/.waldio-key" 2>/dev/null)" = "$key" ]; then
  log "testfixture is up to date"
else
  log "building testfixture (about a minute on 2 cores)"
  rm -f "$BLD/testfixture" "$BLD/.waldio-key"
  (cd "$BLD" && nice -n 10 make -j2 testfixture \
      OPTS="-DSQLITE_EXTRA_INIT=waldio_test_init -I$ROOT/include" \
      LIBS="$LINK/waldio_init.c $LINK/libwaldio.a -lpthread" \
      >make.log 2>&1) || { tail -30 "$BLD/make.log" >&2; exit 1; }
  echo "$key" > "$BLD/.waldio-key"
fi
echo "$BLD/testfixture"
