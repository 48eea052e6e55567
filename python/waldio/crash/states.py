"""Crash states: replaying a recording into file images under a crash model.

:class:`Recording` replays the log with two cache layers: a page cache per
file (buffered writes, made durable by that file's fsync/fdatasync) and one
volatile device write cache shared by all files (direct writes; any flush
makes everything in it durable; an RWF_DSYNC write is durable by itself).
Process kill: every completed call survives; OS crash: the device cache
survives, unsynced page-cache data may be lost; power loss: only durable data
plus any subset of the volatile writes survives, and the write in flight may
tear at 512-byte sectors.  :class:`Image` is one file's bytes in a state.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import struct
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from waldio.logformat import FRAME_HDR, WAL_HDR, WAL_VERSION, header_ok, log_geometry

from .events import (
    CLS_NAMES,
    CR,
    DEV,
    EVENT_NAMES,
    FA,
    FALLOC_KEEP_SIZE,
    FALLOC_PUNCH_HOLE,
    FALLOC_WRITE_ZEROES,
    FALLOC_ZERO_RANGE,
    FUA,
    INF,
    PAGE,
    REC_DIRSYNC,
    REC_FALLOC,
    REC_FAULT,
    REC_FORK,
    REC_MARK,
    REC_OPEN,
    REC_RENAME,
    REC_SYNC_BEGIN,
    REC_SYNC_END,
    REC_TRUNC,
    REC_UNLINK,
    REC_WRITE,
    REC_ZERO,
    RN,
    UL,
    Item,
    Mark,
    StateKey,
    T,
    W,
    parse_events,
    parse_mark,
)
from .modes import MODELS, get_mode

PAGE_BYTES = 4096          # the page cache writes back whole pages


class Recording:
    """A recorded run: base files, events, acks, and the crash-state model."""

    def __init__(self, rec_dir: Path) -> None:
        self.dir = Path(rec_dir)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        self.mode = get_mode(self.meta["mode"])
        self.digests: List[str] = self.meta["digests"]
        self.events = parse_events(self.dir / "events.bin")
        self.live_dir = self.meta["live_dir"]
        self.base_ns: Dict[str, int] = {}
        self.base_img: Dict[int, bytes] = {}
        for i, name in enumerate(sorted(self.meta["base_files"])):
            self.base_ns[name] = i
            self.base_img[i] = (self.dir / "base" / name).read_bytes()
        self._build()

    # ---- building the item list
    def _name(self, path: str) -> Optional[str]:
        d, base = os.path.split(path)
        return base if os.path.normpath(d) == os.path.normpath(self.live_dir) else None

    def _build(self) -> None:
        ns = dict(self.base_ns)
        ino_name: Dict[int, str] = {v: k for k, v in ns.items()}
        next_ino = len(ns)
        # File and sync ids are per process: (pid, id). A forked child also
        # uses the ids its parent assigned before the fork (inherited
        # descriptors): resolved through `parent`. None: a file outside the
        # database directory.
        fid_ino: Dict[Tuple[int, int], Optional[int]] = {}
        parent: Dict[int, int] = {}

        def ino_of(pid: int, fid: int) -> Optional[int]:
            p: Optional[int] = pid
            while p is not None:
                if (p, fid) in fid_ino:
                    return fid_ino[(p, fid)]
                p = parent.get(p)
            return None

        items: List[Item] = []
        syncs: List[Tuple[int, int, int]] = []         # (begin, end, ino)
        sync_begin: Dict[Tuple[int, int], Tuple[int, int]] = {}
        dirsyncs: List[int] = []
        marks: List[Tuple[int, Mark]] = []
        self.faults: List[Tuple[int, str, int]] = []
        self.n_by_type: Dict[str, int] = {}
        self.write_bytes = {PAGE: 0, DEV: 0, FUA: 0}
        self.pids: List[int] = []                      # in order of first event
        pid_seen: set = set()
        for e_idx, ev in enumerate(self.events):
            tname = EVENT_NAMES.get(ev.type, str(ev.type))
            self.n_by_type[tname] = self.n_by_type.get(tname, 0) + 1
            if ev.pid not in pid_seen:
                pid_seen.add(ev.pid)
                self.pids.append(ev.pid)
            if ev.type == REC_FORK:
                parent[ev.pid] = ev.a
            elif ev.type == REC_OPEN:
                name = self._name(bytes(ev.payload).decode())
                if name is None:
                    fid_ino[(ev.pid, ev.fid)] = None
                    continue
                if name not in ns:
                    ino = next_ino
                    next_ino += 1
                    ns[name] = ino
                    ino_name[ino] = name
                    items.append(Item(e_idx, CR, PAGE, ino=ino, name=name, ns=True))
                fid_ino[(ev.pid, ev.fid)] = ns[name]
            elif ev.type in (REC_WRITE, REC_ZERO):
                ino = ino_of(ev.pid, ev.fid)
                if ino is None:
                    continue
                data = ev.payload if ev.type == REC_WRITE else None
                items.append(Item(e_idx, W, ev.cls, ino=ino, off=ev.a, length=ev.b, data=data,
                                  name=ino_name.get(ino, "?")))
                self.write_bytes[ev.cls] += ev.b
            elif ev.type == REC_TRUNC:
                ino = ino_of(ev.pid, ev.fid)
                if ino is not None:
                    items.append(Item(e_idx, T, PAGE, ino=ino, length=ev.a, name=ino_name.get(ino, "?")))
            elif ev.type == REC_FALLOC:
                ino = ino_of(ev.pid, ev.fid)
                if ino is None:
                    continue
                mode = struct.unpack("<I", bytes(ev.payload[:4]))[0]
                cls = DEV if mode & FALLOC_WRITE_ZEROES else PAGE
                items.append(Item(e_idx, FA, cls, ino=ino, off=ev.a, length=ev.b, mode=mode,
                                  name=ino_name.get(ino, "?")))
            elif ev.type == REC_SYNC_BEGIN:
                ino = ino_of(ev.pid, ev.fid)
                if ino is not None:
                    sync_begin[(ev.pid, ev.a)] = (e_idx, ino)
            elif ev.type == REC_SYNC_END:
                got = sync_begin.pop((ev.pid, ev.a), None)
                if got is not None and ev.b == 0:
                    syncs.append((got[0], e_idx, got[1]))
            elif ev.type == REC_UNLINK:
                name = self._name(bytes(ev.payload).decode())
                if name is not None and name in ns:
                    items.append(Item(e_idx, UL, PAGE, ino=ns[name], name=name, ns=True))
                    del ns[name]
            elif ev.type == REC_RENAME:
                a, b = bytes(ev.payload).decode().split("\0")
                na, nb = self._name(a), self._name(b)
                if na is not None and nb is not None and na in ns:
                    items.append(Item(e_idx, RN, PAGE, ino=ns[na], name=na, name2=nb, ns=True))
                    ns[nb] = ns.pop(na)
                    ino_name[ns[nb]] = nb
            elif ev.type == REC_DIRSYNC:
                d = bytes(ev.payload).decode()
                if os.path.normpath(d) == os.path.normpath(self.live_dir):
                    dirsyncs.append(e_idx)
            elif ev.type == REC_MARK:
                marks.append((e_idx, parse_mark(ev)))
            elif ev.type == REC_FAULT:
                self.faults.append((e_idx, bytes(ev.payload).decode(), ev.a))
        self.parent_pid = parent
        self.items = items
        self.syncs = syncs
        self.ino_name = ino_name
        self.n = len(self.events)
        self._durability(syncs, dirsyncs)
        self._acks(marks, syncs)
        self.item_idx = [it.idx for it in items]
        self._commit_frames()
        self.write_events = [it.idx for it in items if it.op == W]
        self.dev_write_events = [it.idx for it in items if it.op == W and it.cls == DEV]
        self.recount_volatile()

    def _durability(self, syncs: List[Tuple[int, int, int]], dirsyncs: List[int]) -> None:
        """When each item becomes durable (docs/crash.md, "the model")."""
        # Any completed flush makes every device-cache item that completed
        # before the flush began durable; a file's sync also writes back that
        # file's page cache first.
        by_begin = sorted(syncs)
        begins = [s[0] for s in by_begin]
        suf = [INF] * (len(by_begin) + 1)
        for i in range(len(by_begin) - 1, -1, -1):
            suf[i] = min(suf[i + 1], by_begin[i][1])
        per_ino: Dict[int, Tuple[List[int], List[int]]] = {}
        for ino in {s[2] for s in syncs}:
            own = sorted(s for s in syncs if s[2] == ino)
            b = [s[0] for s in own]
            sm = [INF] * (len(own) + 1)
            for i in range(len(own) - 1, -1, -1):
                sm[i] = min(sm[i + 1], own[i][1])
            per_ino[ino] = (b, sm)
        for it in self.items:
            if it.ns:
                j = bisect.bisect_right(dirsyncs, it.idx)
                it.durable_at = dirsyncs[j] if j < len(dirsyncs) else INF
            elif it.cls == FUA:
                it.durable_at = it.idx
            elif it.cls == DEV:
                j = bisect.bisect_right(begins, it.idx)
                it.durable_at = suf[j]
            else:
                b, sm = per_ino.get(it.ino, ([], [INF]))
                j = bisect.bisect_right(b, it.idx)
                it.durable_at = sm[j]

    def _acks(self, marks: List[Tuple[int, Mark]], syncs: List[Tuple[int, int, int]]) -> None:
        """What was acknowledged, and promised, at each crash point.

        A[t]: the largest commit position g acknowledged with the mode's
        promise by event t ("ack" marks). The database can only recover a
        prefix of the commit order, so requiring g requires every earlier
        transaction too, whichever writer made it. Single-writer workloads
        number their transactions 1, 2, ... and g is that number.
        A_any[t]: the same with the acknowledgements made without a promise
        ("ack-async": the fork workload's group bursts).
        began[t]: the largest position whose COMMIT had begun ("commit" marks
        of the multi-process workloads; without them A_any[t] + 1): no state
        may hold more (:meth:`upper`)."""
        n = self.n
        A = [0] * n
        any_ack = [0] * n
        began = [0] * n
        acks = [(e, m.g) for e, m in marks if m.kind == "ack"]
        self.ack_marks = [(e, m) for e, m in marks if m.kind in ("ack", "ack-async")]
        self.commit_marks = [(e, m) for e, m in marks if m.kind == "commit"]
        events = sorted([(e, 0, m.g) for e, m in marks if m.kind == "ack"]
                        + [(e, 1, m.g) for e, m in self.ack_marks]
                        + [(e, 2, m.g) for e, m in self.commit_marks])
        cur = [0, 0, 0]
        j = 0
        for t in range(n):
            while j < len(events) and events[j][0] <= t:
                _e, which, g = events[j]
                cur[which] = max(cur[which], g)
                j += 1
            A[t], any_ack[t], began[t] = cur
        self.A = A
        self.A_any = any_ack
        self.began = began if self.commit_marks else None
        self.acks = acks
        self.n_acked = max([m.g for _e, m in self.ack_marks] or [0])
        self.ack_events = [a[0] for a in acks]

        def last_flush_req(pred: Callable[[int], bool]) -> List[int]:
            req = [0] * n
            ends = sorted((e, b) for (b, e, ino) in syncs if pred(ino))
            best, j = 0, 0
            for t in range(n):
                while j < len(ends) and ends[j][0] <= t:
                    best = max(best, A[ends[j][1]] if ends[j][1] >= 0 else 0)
                    j += 1
                req[t] = best
            return req

        # "walsync" (stock NORMAL) and "flush" (waldio normal and NS: the
        # flusher's fdatasync) both mean a completed sync of the log file,
        # by any process: only that writes the log's page cache back. A
        # sync of the database file is not one, although it flushes the
        # device cache: a checkpoint in another process may sync the
        # database while this one's newest commits are still in the page
        # cache. (In a single process every database sync follows a log
        # sync with no commit between them, so it changes nothing there.)
        wal_inos = {ino for ino, name in self.ino_name.items() if name.endswith("-wal")}
        self.req_walsync = last_flush_req(lambda ino: ino in wal_inos)
        self.req_flush = self.req_walsync
        self.flush_events = sorted(e for (b, e, ino) in syncs)

    def _commit_frames(self) -> None:
        """For waldio logs: which log write carried each transaction's commit
        frame (a frame header with nTruncate != 0), decoded from the
        recorded bytes. commit_items[j-1] is the write holding the j-th."""
        self.commit_items: List[Item] = []
        self.commit_frames_ok = False
        log_inos = {ino for ino, name in self.ino_name.items() if name.endswith("-wal")}
        if not self.mode.waldio or not log_inos:
            return
        wal = [n for n in self.base_ns if n.endswith("-wal")]
        g = log_geometry(self.base_img[self.base_ns[wal[0]]]) if wal else None
        # No superblock: the standard layout, SQLite's own offsets. Its direct
        # writes cover whole blocks, so a commit's write also carries the
        # previous commit's tail again, byte for byte: there, the first write
        # of a commit frame is the one that made it (a rewrite changes nothing).
        standard = g is None
        if standard:
            g = self._standard_geometry(log_inos, wal)
            if g is None:
                return
        page, slot, area = g["page"] or 4096, g["slot"] or 4096, g["area"]
        hdr_at = page - FRAME_HDR if g["layout"] == 1 else 0
        # A spilled transaction's frames are first written with zero salts
        # and checksums and then rewritten with both, the commit frame last
        # (SQLite's walEncodeFrame with iReCksum, walRewriteChecksums): a
        # commit frame counts once written with its salts. Frames are keyed
        # by (slot, salts), which name one frame of one generation; in the
        # slotted layouts the last write of a frame is the one that counts.
        latest: Dict[Tuple[int, int, int], Item] = {}
        order: List[Tuple[int, int, int]] = []
        for it in self.items:
            if it.op != W or it.ino not in log_inos or it.data is None or it.off + it.length <= area:
                continue
            # Every slot whose 24-byte frame header lies inside this write (a
            # padding layout rewrites a header's block alone).
            first = max(it.off - area, 0) // slot
            last = (it.off + it.length - area) // slot + 1
            for i in range(first, last):
                h = area + i * slot + hdr_at - it.off
                if h < 0 or h + FRAME_HDR > it.length:
                    continue
                pgno, ntrunc, s1, s2 = struct.unpack_from(">IIII", it.data, h)
                if pgno and ntrunc and (s1 or s2):
                    k = (i, s1, s2)
                    if k not in latest:
                        order.append(k)
                    elif standard:
                        continue
                    latest[k] = it
        self.commit_items = [latest[k] for k in order]
        self.commit_frames_ok = len(self.commit_items) == self.n_acked
        self.commit_written = [it.idx for it in self.commit_items]
        self.commit_durable = sorted(it.durable_at for it in self.commit_items)
        # An OS crash keeps the device cache: a direct write survives it when
        # written, a page-cache write (a shared group commit, docs/
        # durability.md) once a sync of the log wrote it back.
        self.commit_os_safe = sorted(it.durable_at if it.cls == PAGE else it.idx
                                     for it in self.commit_items)

    def _standard_geometry(self, log_inos: set, wal: List[str]) -> Optional[Dict[str, int]]:
        """The geometry of a log in SQLite's own format: frames of 24 + page
        bytes from byte 32, the page size from a valid WAL header in the base
        image or among the recorded writes at offset 0. None: no header."""
        heads = [self.base_img[self.base_ns[wal[0]]]] if wal else []
        heads += [it.data for it in self.items if it.op == W and it.ino in log_inos
                  and it.off == 0 and it.data is not None]
        for h in heads:
            if header_ok(h) and struct.unpack_from(">I", h, 4)[0] == WAL_VERSION:
                page = struct.unpack_from(">I", h, 8)[0]
                page = 65536 if page == 1 else page
                return {"layout": 0, "page": page, "slot": page + FRAME_HDR, "area": WAL_HDR}
        return None

    def _committed(self, t: int, model: str) -> int:
        """Transactions whose commit frame was written (kill), would survive
        an OS crash (os) or was durable (power) by crash point t."""
        if not self.commit_frames_ok:
            return 0
        times = {"kill": self.commit_written, "os": self.commit_os_safe,
                 "power": self.commit_durable}[model]
        return bisect.bisect_right(times, t)

    def commit_delays_ms(self) -> List[float]:
        """ms from each acknowledgement to its commit frame being durable
        (the g-th commit frame in the log is transaction g's)."""
        if not self.commit_frames_ok:
            return []
        out = []
        for e, g in self.acks:
            if 1 <= g <= len(self.commit_items):
                it = self.commit_items[g - 1]
                if it.durable_at < INF:
                    out.append((self.events[it.durable_at].t_ns - self.events[e].t_ns) / 1e6)
        return out

    def recount_volatile(self) -> None:
        """For every crash point, how many items are volatile (all, and
        page-cache/namespace only)."""
        n = self.n
        d_all = [0] * (n + 1)
        d_page = [0] * (n + 1)
        for it in self.items:
            end = min(it.durable_at, n)
            if end > it.idx:
                d_all[it.idx] += 1
                d_all[end] -= 1
                if it.cls == PAGE:
                    d_page[it.idx] += 1
                    d_page[end] -= 1
        self.nvol = [0] * n
        self.nvol_page = [0] * n
        a = p = 0
        for t in range(n):
            a += d_all[t]
            p += d_page[t]
            self.nvol[t] = a
            self.nvol_page[t] = p

    # ---- requirements
    def required(self, key: StateKey) -> int:
        t = self.effective_t(key)
        if t < 0:
            return 0
        contract = {"kill": self.mode.kill_contract, "os": self.mode.os_contract,
                    "power": self.mode.power_contract}[key.model]
        if contract == "committed":
            return self._committed(t, key.model)
        if contract == "all" or contract == "none":
            return self.A[t]
        if contract == "flush":
            return self.req_flush[t]
        if contract == "walsync":
            return self.req_walsync[t]
        raise ValueError(contract)

    def upper(self, key: StateKey) -> int:
        t = self.effective_t(key)
        if t < 0:
            return min(1, len(self.digests) - 1)
        if self.began is not None:
            return min(max(self.began[t], self.A_any[t]), len(self.digests) - 1)
        return min(self.A_any[t] + 1, len(self.digests) - 1)

    @staticmethod
    def effective_t(key: StateKey) -> int:
        # A torn write was still in flight: the crash came before it completed.
        return key.t - 1 if key.kind == "torn" else key.t

    # ---- choosing states
    def interesting_points(self) -> List[int]:
        pts = set()
        for e in self.flush_events:
            pts.add(e - 1)
            pts.add(e)
        for e in self.ack_events:
            pts.add(e)
        for it in self.items:
            if it.cls == FUA:
                pts.add(it.idx)
        return sorted(p for p in pts if 0 <= p < self.n)

    def sample(self, n_states: int, seed: int, models: Sequence[str] = MODELS,
               weights: Optional[Dict[str, float]] = None,
               exclude: Optional[set] = None) -> List[StateKey]:
        """n_states distinct crash states, chosen deterministically by seed."""
        rng = random.Random("states:%d" % seed)
        w = weights or {"kill": 0.2, "os": 0.3, "power": 0.5}
        models = [m for m in models if w.get(m, 0) > 0]
        mw = [w[m] for m in models]
        interesting = self.interesting_points()
        out: List[StateKey] = []
        seen = set(exclude or ())
        attempts = 0
        while len(out) < n_states and attempts < 60 * n_states + 1000:
            attempts += 1
            model = rng.choices(models, mw)[0]
            key = self._draw(rng, model, interesting)
            if key is None or key in seen:
                continue
            seen.add(key)
            out.append(key)
        return out

    def _draw(self, rng: random.Random, model: str, interesting: List[int]) -> Optional[StateKey]:
        n = self.n
        if n == 0:
            return None

        def point() -> int:
            if interesting and rng.random() < 0.6:
                return rng.choice(interesting)
            return rng.randrange(n)

        if model == "kill":
            return StateKey("kill", point(), "all", 0)
        if model == "os":
            kind = rng.choices(["lose", "prefix", "rand", "torn", "pages"], [2, 3, 3, 2, 2])[0]
            if kind == "torn":
                if not self.dev_write_events:
                    return None
                return StateKey("os", rng.choice(self.dev_write_events), "torn", rng.randrange(1 << 30))
            t = point()
            v = self.nvol_page[t]
            if kind == "lose" or v == 0:
                return StateKey("os", t, "lose", 0)
            if kind == "prefix":
                return StateKey("os", t, "prefix", rng.randrange(1, v + 1))
            return StateKey("os", t, kind, rng.randrange(1 << 30))
        kind = rng.choices(["prefix", "drop", "rand", "torn", "pages"], [3, 2, 3, 3, 2])[0]
        if kind == "torn":
            if not self.write_events:
                return None
            return StateKey("power", rng.choice(self.write_events), "torn", rng.randrange(1 << 30))
        t = point()
        v = self.nvol[t]
        if v == 0:
            return StateKey("power", t, "prefix", 0)
        if kind == "prefix":
            return StateKey("power", t, "prefix", rng.randrange(0, v + 1))
        if kind == "drop":
            return StateKey("power", t, "drop", rng.randrange(v))
        return StateKey("power", t, kind, rng.randrange(1 << 30))

    # ---- materializing states
    def states(self, keys: Iterable[StateKey]) -> Iterable[Tuple[StateKey, "Image"]]:
        """Yield (key, image) for each key, in crash-point order."""
        order = sorted(keys, key=lambda k: (self.effective_t(k), k.model, k.kind, k.param))
        base = Image(dict(self.base_ns), {i: bytearray(b) for i, b in self.base_img.items()})
        frontier = 0                      # items[:frontier] are in base
        items = self.items
        for key in order:
            t = self.effective_t(key)
            while (frontier < len(items) and items[frontier].idx <= t
                   and items[frontier].durable_at <= t):
                base.apply(items[frontier])
                frontier += 1
            hi = bisect.bisect_right(self.item_idx, t)
            window = items[frontier:hi]
            img = base.fork()
            self._build_state(key, t, window, img)
            yield key, img

    def _build_state(self, key: StateKey, t: int, window: List[Item], img: "Image") -> None:
        rng = random.Random("%s" % key.text())
        volatile = [it for it in window if it.durable_at > t]
        keep: set = set()
        if key.model == "kill":
            keep = {id(it) for it in volatile}
        elif key.model == "os":
            page = [it for it in volatile if it.cls == PAGE]
            keep = {id(it) for it in volatile if it.cls != PAGE}
            if key.kind == "prefix":
                keep |= {id(it) for it in page[:key.param]}
            elif key.kind == "rand":
                keep |= {id(it) for it in page if rng.random() < 0.5}
            elif key.kind == "torn":
                keep |= {id(it) for it in page if rng.random() < 0.5}
            elif key.kind == "pages":
                keep |= self._pages_state(page, rng, img, torn=False)
        else:
            if key.kind == "prefix":
                keep = {id(it) for it in volatile[:key.param]}
            elif key.kind == "drop":
                keep = {id(it) for i, it in enumerate(volatile) if i != key.param}
            elif key.kind == "rand":
                p = rng.choice([0.2, 0.5, 0.8])
                keep = {id(it) for it in volatile if rng.random() < p}
            elif key.kind == "torn":
                if rng.random() < 0.5:
                    keep = {id(it) for it in volatile}
                else:
                    keep = {id(it) for it in volatile if rng.random() < 0.5}
            elif key.kind == "pages":
                keep = {id(it) for it in volatile if it.cls != PAGE and rng.random() < 0.5}
                keep |= self._pages_state([it for it in volatile if it.cls == PAGE], rng,
                                          img, torn=True)
        img.kept = []
        partial = {id(it): seed for it, seed in img.partial}
        for it in window:
            if it.durable_at <= t or id(it) in keep:
                img.apply(it)
                if it.durable_at > t:
                    img.kept.append(it)
            elif id(it) in partial:
                img.apply_pages(it, random.Random(partial[id(it)]), img.partial_torn)
        img.dropped = [it for it in volatile if id(it) not in keep]
        if key.kind == "torn":
            torn = self._item_at(key.t)
            if torn is not None and torn.op == W:
                img.apply_torn(torn, rng, garbage=(key.model == "power"))

    @staticmethod
    def _pages_state(page_items: List[Item], rng: random.Random, img: "Image",
                     torn: bool) -> set:
        """The "pages" states: the kernel writes a page-cache write back page
        by page (4 KiB), not as one unit, and a page written back as the
        power fails tears at 512-byte sectors (found by `waldio crash
        --real`, docs/crash.md §8). Each unsynced page-cache write survives
        whole, not at all, or in part: some of its pages (and, under power
        loss, one of them torn). Returns the items kept whole; the partial
        ones are applied in their turn (apply_pages)."""
        keep, partial = set(), []
        for it in page_items:
            r = rng.random()
            if r < 0.35:
                keep.add(id(it))
            elif r >= 0.7 and it.op == W and it.length > 0:
                partial.append(it)
        img.partial = [(it, rng.randrange(1 << 30)) for it in partial]
        img.partial_torn = torn
        return keep

    def _item_at(self, idx: int) -> Optional[Item]:
        j = bisect.bisect_left(self.item_idx, idx)
        if j < len(self.items) and self.items[j].idx == idx:
            return self.items[j]
        return None

    def state_id(self, key: StateKey) -> str:
        m = self.meta
        return "%s/%s/seed=%d/txns=%d/%s" % (m["mode"], m["workload"], m["seed"], m["txns"], key.text())

    def summary(self) -> Dict[str, Any]:
        out = {"events": self.n, "by_type": self.n_by_type, "items": len(self.items),
               "acked": self.n_acked, "flushes": len(self.flush_events),
               "bytes": {CLS_NAMES[k]: v for k, v in self.write_bytes.items()},
               "faults": len(self.faults)}
        if "order" in self.meta:
            out["processes"] = self.processes_text()
        return out

    def processes_text(self) -> str:
        """Who did what in a multi-process recording, in one line."""
        by_writer: Dict[int, int] = {}
        for _g, w, _n in self.meta["order"]:
            by_writer[w] = by_writer.get(w, 0) + 1
        unpromised = sum(1 for _e, m in self.ack_marks if m.kind != "ack")
        active = {self.events[it.idx].pid for it in self.items}
        active |= {self.events[e].pid for e, _m in self.commit_marks}
        text = "%d processes wrote, %d forked; commits by writer %s (%d without a promise), " \
               "%d writer switches" % (len(active), len(self.parent_pid),
                                       ", ".join("%d: %d" % kv for kv in sorted(by_writer.items())),
                                       unpromised, self.meta.get("switches", 0))
        ck = (self.meta.get("processes") or {}).get("checkpointer-1")
        if ck:
            text += "; checkpointer %s (%d busy)" % (
                ", ".join("%s %d" % kv for kv in sorted(ck["ops"].items())), ck["busy"])
        return text

    def flush_delays_ms(self) -> List[float]:
        """For each direct write, ms from its completion to the completion of
        the flush that made it durable (waldio normal's bound, as measured)."""
        out = []
        for it in self.items:
            if it.cls == DEV and it.durable_at < INF:
                out.append((self.events[it.durable_at].t_ns - self.events[it.idx].t_ns) / 1e6)
        return out


class Image:
    """The files of one crash state: namespace (name -> inode) and contents.
    Inode images are shared with the base until first written (fork)."""

    def __init__(self, ns: Dict[str, int], data: Dict[int, bytearray]) -> None:
        self.ns = ns
        self.data = data
        self.owned: set = set(data)
        self.kept: List[Item] = []
        self.dropped: List[Item] = []
        self.partial: List[Tuple[Item, int]] = []   # ("pages" states)
        self.partial_torn = False
        self.torn_desc = ""

    def fork(self) -> "Image":
        img = Image(dict(self.ns), dict(self.data))
        img.owned = set()
        return img

    def _mut(self, ino: int) -> bytearray:
        if ino not in self.owned:
            self.data[ino] = bytearray(self.data.get(ino, b""))
            self.owned.add(ino)
        return self.data[ino]

    def apply(self, it: Item) -> None:
        if it.op == W:
            buf = self._mut(it.ino)
            end = it.off + it.length
            if len(buf) < end:
                buf.extend(bytes(end - len(buf)))
            if it.data is None:
                buf[it.off:end] = bytes(it.length)
            else:
                buf[it.off:end] = it.data
        elif it.op == T:
            buf = self._mut(it.ino)
            if it.length < len(buf):
                del buf[it.length:]
            else:
                buf.extend(bytes(it.length - len(buf)))
        elif it.op == FA:
            buf = self._mut(it.ino)
            end = it.off + it.length
            if not it.mode & FALLOC_KEEP_SIZE and len(buf) < end:
                buf.extend(bytes(end - len(buf)))
            if it.mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE | FALLOC_WRITE_ZEROES):
                hi = min(end, len(buf))
                if hi > it.off:
                    buf[it.off:hi] = bytes(hi - it.off)
        elif it.op == CR:
            self.ns[it.name] = it.ino
            if it.ino not in self.data:
                self.data[it.ino] = bytearray()
                self.owned.add(it.ino)
        elif it.op == UL:
            if self.ns.get(it.name) == it.ino:
                del self.ns[it.name]
        elif it.op == RN:
            if it.name in self.ns:
                self.ns[it.name2] = self.ns.pop(it.name)

    def apply_pages(self, it: Item, rng: random.Random, torn: bool) -> None:
        """Some 4 KiB pages of the write it (not all: a whole write is kept
        or dropped as an item), and, if torn, one of them only in part, at
        512-byte sectors of new or old bytes."""
        first, last = it.off // PAGE_BYTES, (it.off + it.length - 1) // PAGE_BYTES
        pages = list(range(first, last + 1))
        chosen = [p for p in pages if rng.random() < 0.5] or [rng.choice(pages)]
        tear = rng.choice(chosen) if torn else None
        buf = self._mut(it.ino)
        for pg in chosen:
            lo = max(it.off, pg * PAGE_BYTES)
            hi = min(it.off + it.length, (pg + 1) * PAGE_BYTES)
            for sec in range(lo // 512, (hi - 1) // 512 + 1):
                if pg == tear and rng.random() < 0.5:
                    continue                             # this sector: old bytes
                a, b = max(lo, sec * 512), min(hi, (sec + 1) * 512)
                if len(buf) < b:
                    buf.extend(bytes(b - len(buf)))
                buf[a:b] = bytes(b - a) if it.data is None else it.data[a - it.off:b - it.off]
        self.torn_desc += "%s%s: pages %s of %d-%d%s" % (
            "; " if self.torn_desc else "", it.describe(), chosen, first, last,
            ", page %d torn" % tear if tear is not None else "")

    def apply_torn(self, it: Item, rng: random.Random, garbage: bool) -> None:
        """The write it, torn at 512-byte sectors."""
        buf = self._mut(it.ino)
        first, last = it.off // 512, (it.off + it.length - 1) // 512
        nsec = last - first + 1
        style = rng.choice(["prefix", "suffix", "random"] + (["garbage"] if garbage else []))
        if style == "prefix":
            cut = rng.randrange(0, nsec)
            choice = ["new"] * cut + ["old"] * (nsec - cut)
        elif style == "suffix":
            cut = rng.randrange(1, nsec + 1)
            choice = ["old"] * cut + ["new"] * (nsec - cut)
        elif style == "random":
            choice = [rng.choice(["new", "old"]) for _ in range(nsec)]
        else:
            choice = [rng.choice(["new", "old", "garbage"]) for _ in range(nsec)]
        if all(c == "new" for c in choice) and nsec > 0:
            choice[rng.randrange(nsec)] = "old" if not garbage else rng.choice(["old", "garbage"])
        for i, c in enumerate(choice):
            lo = max(it.off, (first + i) * 512)
            hi = min(it.off + it.length, (first + i + 1) * 512)
            if c == "old":
                continue
            if len(buf) < hi:
                buf.extend(bytes(hi - len(buf)))
            new = bytes(hi - lo) if it.data is None else it.data[lo - it.off:hi - it.off]
            if c == "new":
                buf[lo:hi] = new
            else:
                # Garbage only where the write changes bytes: a byte
                # rewritten with the value it holds keeps it. SQLite's
                # powersafe-overwrite assumption, which stock SQLite relies
                # on each time the page cache writes back a WAL page holding
                # the previous commit's last frame (docs/crash.md, "Torn
                # writes").
                noise = rng.randbytes(hi - lo)
                buf[lo:hi] = bytes(o if o == n else g
                                   for o, n, g in zip(buf[lo:hi], new, noise))
        self.torn_desc = "%s: %s" % (it.describe(), "".join(c[0] for c in choice))

    def files(self) -> Dict[str, bytearray]:
        return {name: self.data.get(ino, bytearray()) for name, ino in self.ns.items()}

    def content_hash(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for name, buf in sorted(self.files().items()):
            h.update(name.encode() + b"\0" + len(buf).to_bytes(8, "little"))
            h.update(buf)
        return h.hexdigest()

    def write_to(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for p in directory.iterdir():
            if p.is_file():
                p.unlink()
        for name, buf in self.files().items():
            write_sparse(directory / name, buf)


def write_sparse(path: Path, buf: bytes) -> None:
    """Write buf, leaving runs of zero 4 KiB blocks as holes (read as zeros)."""
    mv = memoryview(buf)
    n = len(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, n)
        blk = 65536
        zero = bytes(blk)
        for off in range(0, n, blk):
            chunk = mv[off:off + blk]
            if chunk != zero[:len(chunk)]:
                os.pwrite(fd, chunk, off)
    finally:
        os.close(fd)
