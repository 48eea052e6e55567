"""What can be run: stock journal modes, waldio modes and the raw system-call ceilings.

:data:`MODES` is the table of everything ``waldio bench`` can run.  A stock
mode is a ``journal_mode`` and a ``synchronous`` level through SQLite's
``unix`` VFS; a waldio mode is ``journal_mode=WAL`` through the ``waldio`` VFS
plus optional PRAGMAs (``waldio-persistent`` adds ``PRAGMA
waldio_sync=persistent``; ``<base>-async`` and ``<base>-durable`` add ``PRAGMA
waldio_group=...``).  A new libwaldio mode is one more :class:`Mode` entry.
``raw-dio`` and ``raw-append`` run no SQLite at all: they are the system-call
ceilings a commit cannot beat on the file system.  An ``lsmvbt`` mode keeps the
bench's tables in LS-MVBT virtual tables (lsmvbt/, issue 12): the database
(stock ``unix`` VFS, WAL) holds only the schema, every row lives in the
table's ``.lsmvbt`` file, and :attr:`Mode.vtab` are the ``CREATE VIRTUAL
TABLE`` options (``lsmvbt-full``: every optimization on, one fdatasync per
commit; ``lsmvbt-no-<optimization>``: the slides' ablation, one optimization
off).  Invariant: every lsmvbt mode other than ``lsmvbt-normal`` commits with
``sync=full``, so its rows survive a power loss as stock WAL FULL's do.

A mode spec on the command line is ``NAME[:LAYOUT][@BUILD]`` (:func:`parse_modes`):
``waldio-full:pad4k`` runs waldio-full with the pad4k log layout,
``wal-full@system`` runs stock WAL on the system SQLite library.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

JOURNAL_MODES = ("DELETE", "TRUNCATE", "PERSIST", "WAL", "MEMORY", "OFF")


SYNC_LEVELS = ("OFF", "NORMAL", "FULL")


LAYOUTS = ("standard", "embed", "pad4k", "pad8k")


SQLITE_BUILDS = ("apsw", "system")
RAW_BLOCK = 4096          # raw-dio: one aligned block per commit
RAW_APPEND_BYTES = 4120   # raw-append: a WAL frame (24-byte header + 4096-byte page)


@dataclass(frozen=True)
class Mode:
    """One way of committing: what SQLite is told, and what a commit then does."""

    name: str
    kind: str                               # "stock", "waldio" or "raw"
    journal_mode: Optional[str] = None      # PRAGMA journal_mode (SQL modes)
    synchronous: Optional[str] = None       # PRAGMA synchronous (SQL modes)
    pragmas: Tuple[str, ...] = ()           # further PRAGMAs, run in order
    waldio_sync: Optional[str] = None       # what PRAGMA waldio must report as "sync"
    waldio_group: Optional[str] = None      # what PRAGMA waldio must report as "group"
    commit: str = ""                        # what one commit does
    durability: str = ""                    # what survives a crash
    vtab: Tuple[str, ...] = ()              # lsmvbt: CREATE VIRTUAL TABLE options

    @property
    def is_sql(self) -> bool:
        return self.kind in ("stock", "waldio", "lsmvbt")


def _stock_commit(jm: str, sync: str) -> str:
    if jm == "WAL":
        return {"FULL": "buffered WAL append + fdatasync of the WAL per commit",
                "NORMAL": "buffered WAL append; fsyncs only at checkpoints",
                "OFF": "buffered WAL append; never syncs"}[sync]
    journal = {"DELETE": "rollback journal written then deleted",
               "TRUNCATE": "rollback journal written then truncated",
               "PERSIST": "rollback journal written then its header zeroed",
               "MEMORY": "rollback journal kept in memory",
               "OFF": "no rollback journal"}[jm]
    syncs = {"FULL": "journal and database fsynced per commit",
             "NORMAL": "journal and database fsynced per commit (fewer header syncs)",
             "OFF": "never syncs"}[sync]
    if jm in ("MEMORY", "OFF"):
        syncs = {"FULL": "database fsynced per commit", "NORMAL": "database fsynced per commit",
                 "OFF": "never syncs"}[sync]
    return f"{journal}; {syncs}"


def _stock_durability(jm: str, sync: str) -> str:
    if jm in ("MEMORY", "OFF"):
        return ("a crash inside a write transaction can corrupt the database "
                "(no rollback journal on disk)")
    if sync == "OFF":
        return "OS crash or power loss can lose commits or corrupt the database"
    if jm == "WAL" and sync == "NORMAL":
        return "no loss on process crash; OS crash or power loss may lose recent commits"
    if sync == "NORMAL":
        return "no loss on process crash; power loss: small chance of corruption (SQLite docs)"
    return "no loss on process crash, OS crash or power loss"


MODES: Dict[str, Mode] = {}


def _add(mode: Mode) -> None:
    MODES[mode.name] = mode


for _jm in JOURNAL_MODES:
    for _sync in SYNC_LEVELS:
        _add(Mode(f"{_jm.lower()}-{_sync.lower()}", "stock", _jm, _sync,
                  commit=_stock_commit(_jm, _sync), durability=_stock_durability(_jm, _sync)))


_add(Mode("waldio-full", "waldio", "WAL", "FULL", waldio_sync="full",
          commit="O_DIRECT overwrite of preallocated log blocks + fdatasync per commit",
          durability="no loss on process crash, OS crash or power loss"))


_add(Mode("waldio-persistent", "waldio", "WAL", "FULL",
          pragmas=("PRAGMA waldio_sync=persistent",), waldio_sync="persistent",
          commit="O_DIRECT|O_DSYNC overwrite per log write (FUA where the device has it, "
                 "else write + flush)",
          durability="no loss on process crash, OS crash or power loss"))


_add(Mode("waldio-normal", "waldio", "WAL", "NORMAL", waldio_sync="normal",
          commit="buffered overwrite of the preallocated log (page cache), no flush; log "
                 "flushed at checkpoints and within flush_ms",
          durability="no loss on process crash; OS crash or power loss may lose commits of "
                     "the last flush_ms plus one flush"))


_add(Mode("waldio-ns", "waldio", "WAL", "NORMAL",
          pragmas=("PRAGMA waldio_sync=ns",), waldio_sync="ns",
          commit="O_DIRECT overwrite of preallocated log blocks, no flush (the paper's "
                 "WALDIO NS); log flushed at checkpoints and within flush_ms",
          durability="no loss on process crash or OS crash; power loss with a volatile "
                     "device cache may lose commits of the last flush_ms plus one flush"))


_add(Mode("waldio-off", "waldio", "WAL", "OFF", waldio_sync="off",
          commit="buffered log write through the page cache; waldio never flushes it "
                 "(as stock WAL with synchronous=OFF)",
          durability="no loss on process crash; OS crash or power loss may lose recent commits "
                     "(kernel write-back decides)"))


def _add_group(base: str, group: str, commit: str, durability: str) -> None:
    """The base mode with PRAGMA waldio_group=<group> after its own PRAGMAs."""
    b = MODES[base]
    _add(Mode(f"{base}-{group}", "waldio", "WAL", b.synchronous,
              pragmas=b.pragmas + (f"PRAGMA waldio_group={group}",),
              waldio_sync=b.waldio_sync, waldio_group=group,
              commit=commit + "; base: " + b.commit, durability=durability))


# Group commit (the paper's Group Synch; docs/durability.md): one entry per base mode
# and group mode.
for _base in ("waldio-full", "waldio-persistent", "waldio-normal", "waldio-ns"):
    _b = MODES[_base]
    _add_group(_base, "async",
               "returns once buffered; one log write (+ the base mode's flush) per "
               "group_ms (default 2 ms) or group_bytes (default 16 KiB)",
               "the base mode's loss plus commits of the last group_ms, on process "
               "crash, OS crash and power loss (base: " + _b.durability + ")")
    _add_group(_base, "durable",
               "returns after a group write covering it; concurrent committers share the "
               "write", _b.durability)


# Strict durable group commit (issue 18): as -durable, and no reader, in any process,
# sees a commit before the flush that covers it completed.  Only for the bases whose
# commits are durable (a strict NORMAL would wait for a flush NORMAL never promises).
for _base in ("waldio-full", "waldio-persistent"):
    _add_group(_base, "strict",
               "as -durable (a group write covering it, shared by concurrent committers, "
               "across processes), and readers never see a commit before that write is "
               "durable", MODES[_base].durability)


# Group commit by default (auto, issue 27): in the standard layout strict for
# synchronous=FULL commits, while NORMAL commits are made as with group commit off; off
# in the slotted layouts.  The base modes below switch group commit off, so that they
# measure each commit on its own.
for _base in ("waldio-full", "waldio-normal"):
    _add_group(_base, "auto",
               "libwaldio's default group mode: in the standard layout "
               + ("as -strict" if MODES[_base].synchronous == "FULL"
                  else "as group commit off")
               + ", in the slotted layouts as group commit off", MODES[_base].durability)


for _m in ("waldio-full", "waldio-persistent", "waldio-normal", "waldio-ns", "waldio-off"):
    MODES[_m] = replace(MODES[_m], waldio_group="off",
                        pragmas=MODES[_m].pragmas + ("PRAGMA waldio_group=off",))


_add(Mode("raw-dio", "raw",
          commit="one 4096-byte O_DIRECT overwrite of a zero-filled, fdatasync'ed "
                 "preallocated file + fdatasync (no SQLite)",
          durability="ceiling: what a durable one-block commit costs here"))


_add(Mode("raw-append", "raw",
          commit="one buffered 4120-byte write at the end of the file + fdatasync "
                 "(what stock WAL does while its file grows; no SQLite)",
          durability="ceiling of stock WAL FULL while the WAL grows"))


# LS-MVBT (lsmvbt/DESIGN.md): the host database is stock WAL with the mode's
# synchronous setting, which only labels it (no page of it is written while
# the bench runs); the table's own sync option decides what a commit costs.
_LSMVBT_DURABLE = "no loss on process crash, OS crash or power loss (lsmvbt/DESIGN.md §5.3)"
_add(Mode("lsmvbt-full", "lsmvbt", "WAL", "FULL", vtab=("sync=full",),
          commit="LS-MVBT: each dirty node written once into its page's other slot + one "
                 "fdatasync of the .lsmvbt file per commit (all five optimizations on)",
          durability=_LSMVBT_DURABLE))
_add(Mode("lsmvbt-normal", "lsmvbt", "WAL", "NORMAL", vtab=("sync=normal",),
          commit="LS-MVBT: dirty nodes written (page cache), no fdatasync per commit",
          durability="no loss on process crash; OS crash or power loss may lose or corrupt "
                     "the table (lsmvbt/DESIGN.md §5.5)"))


# The slides' ablation: lsmvbt-full with one optimization switched off.
LSMVBT_ABLATIONS: Dict[str, Tuple[str, str]] = {
    "lsmvbt-no-lazy-split": ("lazy_split=off", "legacy MVBT split (the old node is written too)"),
    "lsmvbt-no-reserve": ("reserve=off", "no reserved buffer space in nodes"),
    "lsmvbt-no-lazy-gc": ("lazy_gc=off", "periodic garbage collection (every 64 commits)"),
    "lsmvbt-no-embed": ("embed_metadata=off", "the header page is written by every commit too"),
    "lsmvbt-redistribute": ("redistribute=on", "sibling redistribution enabled"),
}
for _name, (_opt, _what) in LSMVBT_ABLATIONS.items():
    _add(Mode(_name, "lsmvbt", "WAL", "FULL", vtab=("sync=full", _opt),
              commit=f"as lsmvbt-full, but {_what}", durability=_LSMVBT_DURABLE))
_add(Mode("lsmvbt-mvbt", "lsmvbt", "WAL", "FULL",
          vtab=("sync=full",) + tuple(o for o, _ in LSMVBT_ABLATIONS.values()),
          commit="plain MVBT: all five LS-MVBT optimizations off, one fdatasync per commit",
          durability=_LSMVBT_DURABLE))


QUICK_MODES = ("wal-full", "wal-normal", "waldio-full", "waldio-normal", "waldio-persistent",
               "raw-dio")


SHORTCUTS: Dict[str, Tuple[str, ...]] = {
    "quick": QUICK_MODES,
    "all-stock": tuple(n for n, m in MODES.items() if m.kind == "stock"),
    "all-waldio": tuple(n for n, m in MODES.items() if m.kind == "waldio"),
    "all-raw": tuple(n for n, m in MODES.items() if m.kind == "raw"),
    "all-lsmvbt": tuple(n for n, m in MODES.items() if m.kind == "lsmvbt"),
    "all": tuple(MODES),
}


@dataclass(frozen=True)
class ModeSpec:
    """A mode as it runs: the mode, the log layout (waldio) and the SQLite build."""

    mode: Mode
    layout: Optional[str]       # waldio modes only
    sqlite: Optional[str]       # "apsw" / "system" for SQL modes, None for raw
    label: str

    @property
    def name(self) -> str:
        return self.mode.name


def accepted_mode_words() -> str:
    return ", ".join(list(SHORTCUTS) + list(MODES))


def parse_modes(text: str, layout: str = "embed", sqlite: str = "apsw") -> List[ModeSpec]:
    """Parse ``--modes``: a comma list of NAME[:LAYOUT][@BUILD] and shortcuts.

    Raises ValueError naming the bad word and the accepted values.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (accepted: {', '.join(LAYOUTS)})")
    if sqlite not in SQLITE_BUILDS:
        raise ValueError(f"unknown SQLite build {sqlite!r} (accepted: {', '.join(SQLITE_BUILDS)})")
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise ValueError("no mode given")
    specs: List[ModeSpec] = []
    seen: Dict[str, str] = {}
    for word in words:
        base, _, build = word.partition("@")
        name, _, lay = base.partition(":")
        shortcut = name in SHORTCUTS
        if shortcut:
            names = list(SHORTCUTS[name])
        elif name in MODES:
            names = [name]
        else:
            raise ValueError(f"unknown mode {name!r} (accepted: {accepted_mode_words()}; "
                             f"optionally :{'|'.join(LAYOUTS)} and @{'|'.join(SQLITE_BUILDS)})")
        if lay and lay not in LAYOUTS:
            raise ValueError(f"unknown layout {lay!r} in {word!r} (accepted: {', '.join(LAYOUTS)})")
        if build and build not in SQLITE_BUILDS:
            raise ValueError(f"unknown SQLite build {build!r} in {word!r} "
                             f"(accepted: {', '.join(SQLITE_BUILDS)})")
        if not shortcut and lay and MODES[name].kind != "waldio":
            raise ValueError(f"{word!r}: a layout (:{lay}) applies to waldio modes only")
        if not shortcut and build and MODES[name].kind == "raw":
            raise ValueError(f"{word!r}: raw modes run no SQLite, so @{build} does not apply")
        for n in names:
            mode = MODES[n]
            label = n
            if lay and mode.kind == "waldio":
                label += f":{lay}"
            if build and mode.is_sql:
                label += f"@{build}"
            if label in seen:
                continue  # a shortcut and an explicit name may overlap
            seen[label] = word
            specs.append(ModeSpec(
                mode=mode,
                layout=(lay or layout) if mode.kind == "waldio" else None,
                sqlite=(build or sqlite) if mode.is_sql else None,
                label=label))
    return specs
