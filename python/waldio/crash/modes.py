"""The journal modes ``waldio crash`` checks, each with its durability contract.

A :class:`Mode` is a stock or waldio configuration (journal mode, synchronous
level, waldio URI options and PRAGMAs) plus what it promises after a crash:
which acknowledged transactions must survive under each crash model
(:data:`MODELS`: process kill, OS crash, power loss).  An LS-MVBT mode
(:attr:`Mode.lsmvbt`) keeps the workload's rows in an lsmvbt virtual table
(:mod:`.lsmvbt`); its database, in rollback-journal mode, holds only the
schema.  :attr:`Mode.models` are the crash models a mode promises anything
for (``lsmvbt-normal``: a process kill only, lsmvbt/DESIGN.md §5.5).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Tuple


@dataclass(frozen=True)
class Mode:
    """A journal mode and its durability contract (docs/durability.md)."""
    name: str
    waldio: bool                 # opened through the waldio VFS
    synchronous: str             # PRAGMA synchronous
    journal: str = "WAL"         # PRAGMA journal_mode
    uri: Tuple[Tuple[str, str], ...] = ()
    # Which acknowledged transactions must survive each crash model:
    #   "all"    every transaction acknowledged before the crash
    #   "flush"  those acknowledged before the last completed flush of the
    #            log (waldio's flusher, or any fdatasync of the log, by any
    #            process) began
    #   "walsync" those acknowledged before the last completed sync of the WAL
    #            began (stock SQLite; the same rule for its WAL file)
    #   "committed" those whose commit frame had reached the log (kill), the
    #            device (os: a direct write, or a written-back page-cache
    #            write) or durable media (power) at the crash: group async, whose
    #            commits return before their frames are written. Its time
    #            bound (group_ms) is measured from the recording and reported
    #   "none"   nothing (a mode without guarantees; used to show the
    #            checker fails when it should)
    os_contract: str = "all"
    power_contract: str = "all"
    kill_contract: str = "all"
    testonly: bool = False
    # The run starts from a standard WAL left by stock SQLite (the first
    # third of the transactions, never checkpointed); waldio opens it as it
    # is (the standard layout, auto's for a standard WAL), or converts it at
    # its first open when the mode names a slotted layout (+pad4k: the stock
    # database has no reserved bytes for embed; format.md §7), during the
    # recording.
    from_stock: bool = False
    # LS-MVBT modes: the CREATE VIRTUAL TABLE options of the store (empty:
    # not an LS-MVBT mode).
    lsmvbt: Tuple[str, ...] = ()
    models: Tuple[str, ...] = ("kill", "os", "power")
    # PRAGMA locking_mode=EXCLUSIVE before WAL mode is entered: the wal-index
    # is heap memory and SQLite never calls xShmBarrier. One connection only:
    # the workload's readers are skipped, no multi-process workload runs.
    exclusive: bool = False
    # PRAGMA wal_autocheckpoint. A small one checkpoints often (a checkpoint
    # syncs the log); the synchronous=NORMAL promise modes use a large one, so
    # the sync that COMMIT itself owes is not hidden behind a checkpoint's.
    autocheckpoint: int = 32

    def uri_options(self) -> Dict[str, str]:
        return dict(self.uri)


LOG_PREALLOC = "256K"


MODES: Dict[str, Mode] = {m.name: m for m in [
    Mode("wal-full", False, "FULL"),
    Mode("wal-normal", False, "NORMAL", os_contract="walsync", power_contract="walsync"),
    Mode("waldio-full", True, "FULL", uri=(("prealloc", LOG_PREALLOC),)),
    Mode("waldio-persistent", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("sync", "persistent"))),
    # synchronous=NORMAL commits go through the page cache (as stock's
    # do) and the flusher makes them durable within flush_ms: an OS crash
    # or a power loss may lose what came after the last completed flush.
    Mode("waldio-normal", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10")),
         os_contract="flush", power_contract="flush"),
    # The paper's NS: direct writes, so an OS crash loses nothing.
    Mode("waldio-ns", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10"), ("sync", "ns")),
         power_contract="flush"),
    # persistent and ns promise an OS crash loses no commit without a sync
    # from SQLite (synchronous=NORMAL): frames a commit wrote through the page
    # cache (a spilled transaction) are synced before COMMIT returns, also
    # where SQLite calls no xShmBarrier (locking_mode=EXCLUSIVE).
    Mode("waldio-persistent-normal", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10"), ("sync", "persistent")),
         autocheckpoint=1000),
    Mode("waldio-persistent-exclusive", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10"), ("sync", "persistent")),
         exclusive=True, autocheckpoint=1000),
    Mode("waldio-ns-exclusive", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10"), ("sync", "ns")),
         power_contract="flush", exclusive=True, autocheckpoint=1000),
    Mode("waldio-group-durable", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "durable"))),
    # Durable group commit whose readers wait for what they see to be
    # durable: the same contract for the writers.
    Mode("waldio-group-strict", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "strict"))),
    # Durable group commit in which every commit waits for a shared flush,
    # even one that no other commit is near (which otherwise flushes before
    # it is published: wal_file.c flushes_alone).
    Mode("waldio-group-shared", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "durable"), ("flush_alone", "0"))),
    Mode("waldio-from-stock", True, "FULL", uri=(("prealloc", LOG_PREALLOC),), from_stock=True),
    # libwaldio's default group mode (auto, log_group.h), left to the
    # default: in the standard layout strict for synchronous=FULL commits,
    # while a NORMAL commit takes no ticket and is made as with group commit
    # off, held to waldio-normal's contract.
    Mode("waldio-group-auto", True, "FULL", uri=(("prealloc", LOG_PREALLOC),)),
    Mode("waldio-normal-auto", True, "NORMAL",
         uri=(("prealloc", LOG_PREALLOC), ("flush_ms", "10")),
         os_contract="flush", power_contract="flush"),
    Mode("waldio-group-async", True, "FULL",
         uri=(("prealloc", LOG_PREALLOC), ("group", "async"), ("group_ms", "2")),
         kill_contract="committed", os_contract="committed", power_contract="committed"),
    # Rollback journal with synchronous=OFF: SQLite promises nothing under
    # power loss. Included to prove that the checker finds corruption, holes
    # and losses when they happen (tests/py/test_crash.py).
    Mode("delete-off", False, "OFF", journal="DELETE", testonly=True,
         os_contract="none", power_contract="none"),
    # Stock WAL with synchronous=OFF held to FULL's contract: the control of
    # the campaigns of several processes, which must find it losing
    # acknowledged transactions (a test-only mode: its failures are expected).
    Mode("wal-off", False, "OFF", testonly=True),
]}


# The other waldio modes measure their own way of committing: group commit off
# unless they name a group mode (libwaldio's default is auto).
for _name, _m in list(MODES.items()):
    if _m.waldio and "group" not in _m.uri_options() and not _name.endswith("-auto"):
        MODES[_name] = replace(_m, uri=_m.uri + (("group", "off"),))


# LS-MVBT (issue 12). 32 KiB pages: the workload's largest value (5,000
# bytes) must fit inline (lsmvbt/DESIGN.md §9). The database is in DELETE
# mode: no reader connection can share the table (one handle per file), and
# the workload skips readers and checkpoints outside WAL mode.
LSMVBT_PAGE = "page_size=32768"
for _m in [
    Mode("lsmvbt-full", False, "FULL", journal="DELETE", lsmvbt=("sync=full", LSMVBT_PAGE)),
    # Every optimization off: legacy splits, GC passes, the superblock in every
    # commit (so every commit writes two or more pages), redistribution.
    Mode("lsmvbt-mvbt", False, "FULL", journal="DELETE",
         lsmvbt=("sync=full", LSMVBT_PAGE, "lazy_split=off", "reserve=off", "lazy_gc=off",
                 "gc_period=4", "embed_metadata=off", "redistribute=on")),
    # No fdatasync per commit: safe against a process kill only.
    Mode("lsmvbt-normal", False, "NORMAL", journal="DELETE", lsmvbt=("sync=normal", LSMVBT_PAGE),
         os_contract="none", power_contract="none", models=("kill",)),
]:
    MODES[_m.name] = _m


# The WAL modes: what test_crash.py and `--layout` iterate over.
DEFAULT_MODES = [m for m in MODES if not MODES[m].testonly and not MODES[m].lsmvbt]


LSMVBT_MODES = [m for m in MODES if MODES[m].lsmvbt]


# `waldio crash --mode all`.
ALL_MODES = DEFAULT_MODES + LSMVBT_MODES


# The log layouts a waldio mode may name (the default, auto, gives a new log the
# standard layout).
LAYOUTS = ("standard", "embed", "pad4k", "pad8k")


def get_mode(name: str) -> Mode:
    """A mode by name; "waldio-...+embed" is that waldio mode with the
    embed (or standard, pad4k, pad8k) log layout, "waldio-...+KEY=VALUE" the mode with
    that waldio URI option (e.g. waldio-normal+flush_ms=100: the default
    flush bound; waldio-full+prealloc=1M: the log's runway doubles from
    256 KiB up to 1 MiB), and "MODE+autocheckpoint=N" (any mode) the mode
    with PRAGMA wal_autocheckpoint=N. Suffixes combine: a+b+c."""
    base, *extras = name.split("+")
    if base not in MODES:
        raise KeyError("unknown mode %r (expected one of %s)" % (name, ", ".join(MODES)))
    m = MODES[base]
    if not extras:
        return m
    uri = dict(m.uri)
    for extra in extras:
        key, eq, value = extra.partition("=")
        if key == "autocheckpoint" and value.isdigit():
            m = replace(m, autocheckpoint=int(value))
            continue
        if not m.waldio or not (key in LAYOUTS and not eq or eq and key and value):
            raise KeyError("mode %r: a suffix is a layout (%s), a waldio URI option "
                           "KEY=VALUE (waldio modes only) or autocheckpoint=N"
                           % (name, ", ".join(LAYOUTS)))
        uri.update({"layout": key} if not eq else {key: value})
    return replace(m, name=name, uri=tuple(uri.items()))


# Stock-mode states are also opened through waldio, which must convert the
# standard WAL and recover exactly what stock SQLite recovers (format.md §7).
# The stock databases have no reserved bytes, so the padding layout is used.
CONVERT_MODE = Mode("waldio-convert", True, "FULL", uri=(("prealloc", LOG_PREALLOC),
                                                        ("layout", "pad4k")))


MODELS = ("kill", "os", "power")


# Every mode runs every workload of several processes: group commit joins
# other processes (issue 18), and its solo mode hands over to an opener.
_MULTI_EXCLUDED: dict = {}


def mode_runs_workload(mode: str, workload: str) -> bool:
    """Whether `waldio crash` runs this mode (a name from MODES, maybe with a
    +layout) with this workload.  LS-MVBT modes run the single-connection
    workloads (one handle per file: a second connection or process gets
    SQLITE_BUSY), and so do the locking_mode=EXCLUSIVE modes."""
    base = mode.partition("+")[0]
    if base in MODES and (MODES[base].lsmvbt or MODES[base].exclusive):
        return workload in ("mixed", "bank")
    if workload in ("stock-writer", "stock-ckpt"):
        # A stock process beside waldio's: only the standard layout shares
        # the database with it (a slotted log refuses stock SQLite).
        m = get_mode(mode)
        return m.waldio and m.uri_options().get("layout", "auto") in ("auto", "standard")
    return base not in _MULTI_EXCLUDED.get(workload, ())
