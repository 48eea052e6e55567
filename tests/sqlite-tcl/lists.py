"""lists — which of SQLite's 3.40.1 test files run against waldio, and why.

Seconds are one file's wall time through waldio on this machine kind (2 vCPU,
ext4), measured in runs of the whole list; stock takes the same or less.

FULL runs with waldio's default options (make test: `default`: the standard
layout, SQLite's own -wal and -shm). It holds every WAL test file, the pager,
savepoint, backup and incrvacuum files, and the fault-injection files whose
loops use a WAL (pagerfault 40-70 s, sysfault), except:
  walcrash3.test      700 s: 10,000 crash-and-recover rounds (stock 400 s)
  walcrash2.test      every one of its 1,025 cases asserts the -wal file size
                      (by design different); tester.tcl gives up after 1,000
                      failures, so the file cannot end normally
  walslow.test        60-100 s: its 3.3 cases flip each of the first 1080
                      bytes of the -wal in turn, 18 times, and its large-log
                      cases are covered by wal3 and walbig
  savepoint6.test     195 s: random savepoint operations
  backup_ioerr.test   120 s, pagerfault2.test 45 s, savepoint4.test 65 s,
  backup_malloc.test 21 s: no WAL at all (rollback journal faults)
They stay runnable: `run.py --list all`.

LAYOUT runs with each slotted layout forced (pad4k, pad8k) and on the
4096-byte-page build (default-p4096: the standard layout with 4096-byte
pages): the WAL files of FULL that take seconds. Left out there: walfault
(190 s) and walthread (150 s), which exercise no layout-specific path the fast
files miss; walprotocol (20 s of lock waits, the same in every layout); and
walcrash (50-60 s), except on default-p4096 (default runs it with 1024-byte
pages).

USER runs as an unprivileged user (variant default-user, judged by
stock-user; as root SQLite's permission checks pass whatever the file modes):
the files that chmod files or open read-only.

FAULT: the fault-injection files (SQLite's simulated I/O errors, disk-full,
OOM), for the rounds report (`run.py --list fault --rounds`): each loop's
rounds through waldio against stock. The WAL ones are in FULL; the others use
no WAL, and differ from stock only through the 24 reserved bytes of a new
database (ioerr-10/-13 rounds, ioerr4-1.6, pagerfault2-1-pre1: stock-reserve
gives the same). IOERR_LOOPS are those whose loops are tester.tcl's
do_ioerr_test (rounds NAME.N.1/.2/.3).

EMBED runs with waldio_layout=embed forced on the 4096-byte-page build: only
files that never ask for pages smaller than a block. Forced embed refuses
smaller pages by design, and a refused open in a file's set-up code ends the
file.
"""
from __future__ import annotations

from typing import Dict, List

WAL: List[str] = """
e_wal.test e_walckpt.test e_walhook.test
wal.test wal2.test wal3.test wal4.test wal5.test wal6.test wal64k.test wal7.test
wal8.test wal9.test walbak.test walbig.test walblock.test walcksum.test
walcrash.test walcrash4.test walfault.test walfault2.test walhook.test
walmode.test walnoshm.test waloverwrite.test walpersist.test walprotocol.test
walprotocol2.test walrofault.test walshared.test walthread.test walvfs.test
""".split()

OTHER: List[str] = """
backup.test backup2.test backup4.test backup5.test
incrvacuum.test incrvacuum2.test incrvacuum3.test incrvacuum_ioerr.test
pager1.test pager2.test pager3.test pager4.test pagerfault.test pagerfault3.test
pageropt.test savepoint.test savepoint2.test savepoint5.test savepoint7.test savepointfault.test
sysfault.test
""".split()

# They open, chmod or patch test.db-shm by name: with waldio's own layouts
# (whose wal-index is test.db-wal-shm) they stop there; the standard layout
# (the default) keeps SQLite's own test.db-shm, so they run in FULL.
SHM_NAMED: List[str] = """
e_walauto.test walro.test walro2.test walsetlk.test
""".split()

FULL: List[str] = WAL + OTHER + SHM_NAMED

LAYOUT: List[str] = [f for f in WAL
                     if f not in ("walfault.test", "walthread.test",
                                  "walprotocol.test", "walcrash.test")]

EMBED: List[str] = """
e_wal.test wal4.test wal64k.test wal8.test walbig.test walblock.test
walfault2.test walnoshm.test walprotocol2.test walrofault.test walshared.test
""".split()

LONG: List[str] = """
walcrash2.test walcrash3.test walslow.test pagerfault2.test savepoint4.test
savepoint6.test backup_ioerr.test backup_malloc.test
""".split()

USER: List[str] = """
walro.test walro2.test wal2.test pager1.test rowallock.test walrofault.test
""".split()

IOERR_LOOPS: List[str] = """
autovacuum_ioerr2.test incrblob_err.test incrvacuum_ioerr.test ioerr.test
ioerr2.test ioerr3.test ioerr4.test misc7.test savepointfault.test
shared_err.test vacuum3.test vtab_err.test
""".split()

FAULT: List[str] = """
walfault.test walfault2.test walrofault.test wal4.test pagerfault.test
sysfault.test pagerfault2.test pagerfault3.test savepointfault.test
incrvacuum_ioerr.test rollbackfault.test backup_ioerr.test diskfull.test
ioerr.test ioerr2.test ioerr3.test ioerr4.test ioerr5.test ioerr6.test
autovacuum_ioerr2.test
""".split()

ALL: List[str] = FULL + LONG + [f for f in USER + FAULT if f not in FULL + LONG]

LISTS: Dict[str, List[str]] = {
    "full": FULL, "layout": LAYOUT, "embed": EMBED, "long": LONG,
    "user": USER, "fault": FAULT, "all": ALL,
}


def make_test_plan() -> List[tuple]:
    """(file, variant) pairs that make test runs (tests/py/test_sqlite_tcl.py)."""
    plan = [(f, "default") for f in FULL]
    for variant in ("pad4k", "pad8k"):
        plan += [(f, variant) for f in LAYOUT]
    plan += [(f, "default-p4096") for f in LAYOUT + ["walcrash.test"]]
    plan += [(f, "embed") for f in EMBED]
    plan += [(f, "default-user") for f in USER]
    return plan
