#!/usr/bin/env bash
# The measurement behind waldio's idle-log bound (docs/durability.md, "The log
# left beside an idle database"): the open-close regime of waldio bench -- open
# a connection, commit one transaction, close it, 200 times -- on a fresh
# journaled ext4 loop device, stock WAL FULL and waldio full side by side, with
# the log an idle database keeps bounded by PRAGMA journal_size_limit, for
# sessions that write one small row, ~64 KiB and ~224 KiB.
#
#   bench/idle-bound/run.sh [OUT_DIR]        then: bench/idle-bound/table.py OUT_DIR
#
# Needs root (loop device). About 10 minutes on 2 cores.
set -euo pipefail
out=${1:-/var/tmp/waldio-idle-bound}
mkdir -p "$out"
py=${PYTHON:-python3}
common=(--regime open-close --fs ext4 --modes wal-full,waldio-full --transactions 200
        --repetitions 5 --warmup 1 --quiet)
declare -A session=(
  [row]=""
  [64k]="--txn begin --ops-per-txn 16 --record-size 4000"
  [224k]="--txn begin --ops-per-txn 56 --record-size 4000"
)
for s in row 64k 224k; do
  for limit in 0 65536 262144 1048576 4194304; do
    # shellcheck disable=SC2086
    "$py" -m waldio bench "${common[@]}" ${session[$s]} --journal-size-limit "$limit" \
      --json "$out/$s-$limit.json" >/dev/null
    echo "$s journal_size_limit=$limit done"
  done
done
