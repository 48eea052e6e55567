/*
** wal_log.h — one physical waldio log, shared by every connection of this
** process that opens it (one object per inode, like os_unix.c's
** unixInodeInfo).
**
** A log owns: the file descriptor (dio_file), its layout (wal_layout.h) and
** geometry, the preallocated size, the recent-frame cache and the rule
** that decides when the cache can be trusted, the write/flush sequence
** numbers that let an xSync skip a flush nobody needs, the background
** flusher, and the statistics behind PRAGMA waldio_stats.
**
** Invariants:
**   L1  A direct write lands only below durableEnd: bytes there are
**       allocated, written (zero-filled or by earlier frames) and made
**       durable, so the write changes no file-system metadata ("preallocation
**       with explicit journaling"). physSize >= durableEnd is the file's
**       extent as this process knows it; buffered writes (large
**       transactions, NORMAL and OFF commits) may extend it, as stock
**       SQLite's appends do. A new log holds block 0 only: the zero-filled
**       preallocation is made by the first direct write that needs it, so a
**       database that never commits directly never pays for it. Any flush
**       of the log moves durableEnd up to the physSize it began with (as
**       the preallocation's own flush does), unless either went down while
**       it ran (sizeCuts). durableEnd is reset whenever
**       another process may have shrunk the file (a new generation, a
**       smaller size seen): a process shrinks the log only as a generation
**       begins, so every shrink is seen at the next write.
**   L2  flushedSeq <= writeSeq; every non-O_DSYNC write completed before a
**       flush started is durable once flushedSeq reaches its sequence. The
**       sequences count this process's writes only: a sync SQLite asks for
**       is skipped only if, besides, no other process published since.
**   L3  A cached slot is served only while the wal-index header equals the
**       epoch recorded when this process last wrote or published: any
**       other writer changes that header (see wal_log.c).
**   L4  After a failed flush or group write the log is poisoned: no further
**       read, write or flush succeeds until every connection closes it (no
**       "fsyncgate"; no checkpoint copies a frame whose write failed).
**   L5  Between processes (log_lock.h): every process holds LOG_LOCK_USE
**       shared while it has the log open; block 0 is read at open and
**       written to initialize, convert, re-lay-out or clear the guard only
**       under LOG_LOCK_INIT, and formatting, converting, re-lay-out and
**       clearing the guard also need USE exclusive (no other process has
**       the log open). A process keeps USE exclusive while its group mode
**       buffers commits in memory (solo, log_group.h): such buffers are
**       visible only inside one process. An opener that finds USE held
**       knocks (LOG_LOCK_KNOCK) and the solo process switches to shared
**       group commit (flush_region.h) and downgrades USE.
**   L6  A log belongs to the process that opened it. A child created by
**       fork() inherits the object but never reads, writes, flushes or
**       closes through it (forkGen differs): it would otherwise write its
**       parent's stale buffers over newer frames. The child opens its own.
**   L7  The log grows (ensure_allocated) under growMutex, one extension at
**       a time, with the size re-checked once the mutex is held: two
**       writers (a group flusher and a spilling transaction) never zero-fill
**       the same range, so a fill never lands on frames just written.
**   L8  Processes that close together leave a clean log (log_open.c, "the
**       last close"): SQLite checkpoints and empties the log only in the
**       close that gets the database lock exclusively, which any other
**       connection's shared lock refuses. Every process holds LOG_LOCK_ACTIVE
**       shared until the close of its last connection is refused that lock;
**       then, while no other process holds ACTIVE (all are closing), one
**       refused closer (LOG_LOCK_CLOSER) retries for a bounded time instead
**       of holding its own lock through a close that refuses the next one.
**       A connection that goes on after a refusal takes ACTIVE again.
**       In the standard layout only while no stock process, which holds no
**       ACTIVE, has the database open (db_file.c, stock_guard.h). The work
**       of a log's close that can take long (its flusher's join, a flush)
**       is done as the close begins, before SQLite asks for the lock
**       (log_close_begins).
*/
#ifndef WALDIO_WAL_LOG_H
#define WALDIO_WAL_LOG_H

#include "sqlite_api.h"
#include "dio_file.h"
#include "frame_cache.h"
#include "log_lock.h"
#include "log_group.h"
#include "syscalls.h"
#include "wal_format.h"
#include "wal_index.h"
#include "wal_layout.h"
#include "waldio.h"
#include "flush_side.h"

#include <pthread.h>
#include <sys/types.h>

#define WALINDEX_HDR_BYTES 48   /* one copy of SQLite's WalIndexHdr */

typedef struct waldio_stats {
  u64 frames_written;      /* new frames (header + page assembled) */
  u64 page_overwrites;     /* page-only rewrites of an uncommitted frame */
  u64 header_rewrites;     /* header-only rewrites (walRewriteChecksums) */
  u64 other_writes;        /* any other write shape (read-modify-write) */
  u64 block0_writes;       /* WAL header / superblock writes */
  u64 log_writes;          /* write system calls on the log */
  u64 dsync_writes;        /* of which O_DSYNC (persistent mode) */
  u64 bytes_written;
  u64 flushes;             /* fdatasync calls issued */
  u64 flushes_skipped;     /* xSync calls with nothing left to flush */
  u64 timer_flushes;       /* of the flushes, those made by the flusher */
  u64 prealloc_extends;
  u64 prealloc_bytes;
  u64 prealloc_syncs;      /* flushes that made bytes already in the file
                           ** durable before a direct write there (L1) */
  u64 edge_reads;          /* blocks read back to complete the first block
                           ** of a direct write (layout_standard.c T2) */
  u64 cache_hits;
  u64 cache_misses;
  u64 cache_invalidations;
  u64 disk_reads;          /* reads through the page cache */
  u64 device_reads;        /* of which found outside it (read from the
                           ** device), where the kernel can tell */
  u64 readaheads;          /* read-aheads of a snapshot's frames */
  u64 bytes_read;
  u64 buffered_writes;     /* writes through the page cache */
  u64 logical_truncates;
  u64 group_commits;       /* group commits: appended to the group buffer
                           ** (solo) or written and ticketed (shared) */
  u64 group_writes;        /* group writes (solo: one write, maybe a flush)
                           ** and shared flushes this process led */
  u64 group_waits;         /* waits for a group write or shared flush */
  u64 alone_flushes;       /* shared group commits flushed before their
                           ** publication, no other commit near
                           ** (wal_file.c commit_shared) */
  u64 early_releases;      /* wal-index read locks given back while a
                           ** commit waited for its flush (db_file.c) */
  u64 sharer_counts;       /* counts of the processes sharing SQLite's
                           ** -shm in /proc/locks (shm_watch.h) */
} waldio_stats;

typedef struct waldio_log waldio_log;
typedef struct log_flusher log_flusher;

typedef struct log_registry {
  pthread_mutex_t mutex;
  waldio_log *pList;
  struct log_registry *pNextRegistry;   /* every registry (exit, fork) */
} log_registry;

/* What an opener asks of the log (log_acquire). */
struct log_request {
  const waldio_options *opts;
  int layout;                /* for a new log: never WALDIO_LAYOUT_AUTO */
  const char *zLayoutWhy;    /* why that layout, for PRAGMA waldio */
  const char *zStockShm;     /* stock SQLite's wal-index, "<db>-shm" */
  sqlite3_file *pDb;         /* the database file, to be read (standard:
                             ** are a damaged header's frames in it?) */
  mode_t mode;               /* the database file's mode and owner, */
  uid_t uid;                 /*   applied to a newly created log */
  gid_t gid;
};

struct waldio_log {
  /* Registry membership, guarded by log_registry.mutex. */
  waldio_log *pNext;
  int nRef;
  dev_t dev;
  ino_t ino;
  unsigned forkGen;        /* L6 */

  const waldio_syscalls *sys;
  char *zPath;
  dio_file file;
  pthread_mutex_t growMutex;  /* L7 */
  pthread_mutex_t leaderMutex;  /* held while this process leads a shared
                                ** flush (flush_region.c) and by fork() */
  int leaderFd;            /* the descriptor the leader lock is taken on
                           ** (flush_region.c), -1 until a first lead; under
                           ** leaderMutex; a forked child closes its copy */
  const char *zLayoutWhy;  /* why the log has its layout (static text) */
  const wal_layout *pLayout;  /* set at open, never changes */
  flush_side side;         /* the flush region's side file (flush_side.h):
                           ** layouts with LAYOUT_NATIVE_SHM only */
  pthread_mutex_t mutex;   /* guards every field below */

  wal_superblock sb;       /* geometry, and SQLite's header as last read or
                           ** written (the slotted layouts: block 0) */
  i64 physSize;            /* L1 */
  i64 durableEnd;          /* L1: direct writes land below it */
  u32 sizeCuts;            /* L1: times physSize or durableEnd went down */
  i64 preallocInitial;
  i64 runway;              /* the last growth's runway (growMutex) */
  long long cacheBudget;
  int flushMs;
  frame_cache cache;
  u8 aEpoch[WALINDEX_HDR_BYTES];
  int epochValid;
  u8 aSynced[WALINDEX_HDR_BYTES];   /* the wal-index header as of this process's
                                    ** last flush or durable publication */
  int syncedValid;
  u64 writeSeq;            /* L2 */
  u64 flushedSeq;
  u64 othersSeq;           /* writeSeq + 1 when this process last found
                           ** another process's commit in the wal-index
                           ** (log_begin_write), 0 never: log_others_commit */
  u8 *aLastBlock;          /* the last block a direct write of this */
  i64 lastBlockOff;        /*   process covered, as written; -1: none
                           **   (layout_standard.c T2) */
  i64 raLo, raHi;          /* the last read-ahead (wal_log.c), for the */
  u8 aRaSnap[12];          /* snapshot (mxFrame, salts) it was made in */
  u32 raMisses;            /* device reads since */
  u64 armedSeq;            /* writeSeq of the last write under a flush bound
                           ** (LOG_ARM): the flusher, a close or an exit
                           ** flushes up to it */
  int poisoned;            /* L4 */
  int inactive;            /* L8: ACTIVE given up (a close was refused) */
  waldio_stats stats;
  log_flusher *pFlusher;
  log_group group;         /* group commit state (log_group.h) */
};

/* Add r to the process's registries (the first call installs the exit
** hook and the fork handlers); log_registry_remove() takes it out. */
void log_registry_init(log_registry *r);
void log_registry_remove(log_registry *r);

/* Open the log at zPath (creating and preallocating it, or converting a
** standard-format WAL) or share the one this process already has open. */
int log_acquire(log_registry *r, const waldio_syscalls *sys, const char *zPath,
                const log_request *req, waldio_log **ppLog);
/* Drop one reference; the last one flushes what is unflushed and closes.
** idleKeep >= 0: a clean close -- SQLite checkpointed every frame with the
** database locked exclusively (the last connection anywhere): the
** generation is dropped, and if no other process has the log open, the
** guard too (F4) and every byte beyond idleKeep (the idle footprint).
** LOG_CLOSE_DIRTY: anything else; the log stays as it is. */
#define LOG_CLOSE_DIRTY (-1)
int log_release(log_registry *r, waldio_log *pLog, i64 idleKeep);
/* A connection's close begins (db_file.c): what log_release does first --
** stop the flusher thread if this is the log's last reference here, write
** what is buffered, flush what a close owes -- done before SQLite tries the
** database lock for its last-close checkpoint, so that none of it lengthens
** the time this process holds its shared lock while processes stopped
** together try theirs. Early, never instead: log_release does again what is
** still owed then, and reports what fails. */
void log_close_begins(log_registry *r, waldio_log *pLog);

/* L8: SQLite's close of a connection asked for the database exclusively
** (xTry(pArg), an SQLite result code) and was refused. If it is this
** process's last connection to the log, wait for the other processes'
** closes as L8 says. Returns SQLITE_OK once xTry succeeded, else SQLITE_BUSY
** (the close leaves the log to a later one, as it would have). */
int log_last_close_lock(log_registry *r, waldio_log *pLog,
                        int (*xTry)(void*), void *pArg);
/* L8: the connection went on after a refused close: ACTIVE again. */
void log_reactivate(waldio_log *pLog);

/* SQLITE_CORRUPT for a log whose block 0 (meta) is damaged: the message
** names the log, the damage (wf_block0_damage) and the way out. */
int log_damaged_error(const char *zPath, const u8 *meta);

/* Non-zero if this log was inherited through fork() (L6): unusable here. */
int log_inherited(const waldio_log *pLog);
int log_inherited_error(const waldio_log *pLog);

/* A copy of the current geometry (page 0 while unknown). */
wal_geometry log_geometry(waldio_log *pLog);

/* The geometry to address frames with. While this process knows no page
** size, block 0 is read again: another process may have started the
** generation whose frames this connection now reads or appends to (it
** learned of them from the wal-index, not from this log object). */
int log_frame_geometry(waldio_log *pLog, wal_geometry *g);
int log_is_readonly(waldio_log *pLog);

/* Called before every write with the caller's wal-index region 0 (NULL in
** heap-memory mode): adopts the current epoch, dropping the cache if another
** writer changed the log. Also fails if the log is poisoned. */
int log_begin_write(waldio_log *pLog, const volatile void *shm0);

/* The wal-index header just published by this process's own commit. */
void log_publish(waldio_log *pLog, const volatile void *aHdr);

/* Non-zero while other processes commit to the log: one of them appended
** frames in this generation since this process last wrote or published, at
** most LOG_OTHERS_WRITES writes of this process ago. Their read
** transactions then read this process's frames: a commit written through
** the page cache (LOG_PREALLOC) is there for them, as stock SQLite's are,
** where a direct write would send each of them to the device (wal_file.c). */
#define LOG_OTHERS_WRITES 64
int log_others_commit(waldio_log *pLog);

/* Non-zero while another process has the log open (it holds LOG_LOCK_USE,
** log_lock.h; one fcntl, nothing taken). Its read transactions re-read the
** pages this process's commits change, from the log: a direct write would
** drop them from the page cache even where that process never commits
** (the bench's web workload at 16 processes, group commit off: 3,300
** device reads in 2 s, and 0.92x stock FULL). */
int log_others_open(waldio_log *pLog);

/* Read logical bytes [lo,hi) of frame (0 <= lo < hi <= page+24) into out:
** from the group buffer or the cache of directly written slots (L3), else
** through the page cache. pView (may be NULL): the caller's wal-index
** regions, which tell a read-ahead which frames to ask for. scratch: one
** slot of memory. *pShort is set if the file ended first. */
int log_read_frame(waldio_log *pLog, u32 frame, u32 lo, u32 hi,
                   const volatile void *shm0, const wal_index_view *pView,
                   u8 *scratch, u8 *out, int *pShort);

/* What a write was, for the statistics. */
enum { LOG_WRITE_FRAME, LOG_WRITE_PAGE, LOG_WRITE_HEADER, LOG_WRITE_OTHER };

/* How a write is made. */
#define LOG_DSYNC    0x1   /* durable when it returns (persistent mode) */
#define LOG_ARM      0x2   /* start the normal-mode flush timer */
#define LOG_BUFFERED 0x4   /* through the page cache (else direct, if the
                           ** log has direct I/O: zero-filled first, L1) */
#define LOG_PREALLOC 0x8   /* buffered, but into the zero-filled, durable
                           ** range as a direct write (L1): an overwrite
                           ** that allocates nothing */
#define LOG_WHOLE_BLOCKS 0x10 /* buffered, as the layout writes a commit
                           ** directly: whole blocks, so that the kernel
                           ** reads no partial page first (with
                           ** LOG_PREALLOC) */

/* Write bytes [lo,hi) of img, the images of nSlot consecutive slots
** starting at frame, with one system call. Direct writes are block-aligned
** and their slot images cached; buffered ones drop cached entries. */
int log_write_slots(waldio_log *pLog, u32 frame, u32 nSlot, const u8 *img,
                    u32 lo, u32 hi, int kind, int flags);

/* Write logical bytes [lo,hi) of frame through the page cache, each part
** where the layout keeps it (no read needed). The caller has checked that
** bytes falling in the embed layout's page tail are zero. */
int log_write_frame(waldio_log *pLog, u32 frame, u32 lo, u32 hi,
                    const u8 *data, int kind, int flags);

/* Non-zero while the log holds a generation (SQLite's header is stored). */
int log_holds_generation(waldio_log *pLog);

/* Write n bytes at off as they are, through the page cache (LOG_BUFFERED)
** or direct, counted like any write (flags as log_write_slots). */
int log_write_bytes(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                    int flags);

/* The copy of the block at off that this process wrote last, into out (1),
** or 0 if it has none that is still trusted (L3); put: remember it (off
** -1 forgets). */
int log_last_block_get(waldio_log *pLog, i64 off, u8 *out);
void log_last_block_put(waldio_log *pLog, i64 off, const u8 *img);

/* SQLite wrote its 32-byte WAL header: a new generation begins. */
int log_write_header(waldio_log *pLog, const u8 *aSqliteHdr, int flags);

/* SQLite's WAL header as stored on disk; *pHas = 0 if the log is empty. */
int log_read_sqlite_header(waldio_log *pLog, u8 *aOut, int *pHas);

/* Logical file size SQLite should see (re-reads block 0: another process
** may have started or truncated a generation). */
int log_logical_size(waldio_log *pLog, i64 *pSize);

/* SQLite truncated the logical file to `size` bytes. The physical file
** keeps max(what `size` needs, keepAtLeast) bytes (the layout's xTruncate):
** the caller decides the floor (the preallocation while the database is in
** use, nothing for a TRUNCATE checkpoint, the idle bound at the last
** close). */
int log_truncate(waldio_log *pLog, i64 size, i64 keepAtLeast);

/* Cut the file to `keep` bytes (if longer), whatever it holds. */
int log_truncate_physical(waldio_log *pLog, i64 keep);

/* Make every completed write durable (skipped if nothing is unflushed). */
int log_sync(waldio_log *pLog);
/* The same, but only if a write under a flush bound (NORMAL's flush_ms,
** group async) is unflushed: what a close or process exit owes. Writes of
** synchronous=OFF are left to the kernel, as stock SQLite leaves them. */
int log_sync_bound(waldio_log *pLog);
/* The same for SQLite's own xSync, given the wal-index (NULL in heap
** mode): frames other processes wrote are flushed too, L2's skip applies
** only while nobody published since this process's last flush. */
int log_sync_published(waldio_log *pLog, const volatile void *shm0);
int log_sync_from_flusher(waldio_log *pLog);
/* An fdatasync now, whatever this process wrote (a shared flush covers
** other processes' writes too). */
int log_flush_now(waldio_log *pLog);
/* The number of this process's last write (L2), and: writes up to seq are
** durable (a shared flush covered them, flush_region.h). */
u64 log_write_seq(waldio_log *pLog);
void log_note_flushed(waldio_log *pLog, u64 seq);
/* Non-zero if every write of this process is durable (and none failed). */
int log_own_writes_flushed(waldio_log *pLog);
/* Non-zero if log_sync_published would skip its flush now (L2). */
int log_nothing_to_flush(waldio_log *pLog, const volatile void *shm0);
/* The same as log_sync_published, but *pFlushed says whether it flushed. */
int log_sync_published_ex(waldio_log *pLog, const volatile void *shm0,
                          int *pFlushed);

void log_get_stats(waldio_log *pLog, waldio_stats *pOut);
/* Count a group commit, group write (or shared flush) or wait. */
enum { LOG_GROUP_COMMIT, LOG_GROUP_WRITE, LOG_GROUP_WAIT, LOG_GROUP_EARLY_RELEASE,
       LOG_GROUP_SHARER_COUNT, LOG_GROUP_ALONE };
void log_count_group(waldio_log *pLog, int what);
void log_reset_stats(waldio_log *pLog);
void log_set_flush_ms(waldio_log *pLog, int ms);

/* ---- For the log's own modules (log_open.c, wal_log.c, the layouts). ---- */

/* Is every committed frame of the log, read in `layout` with the database
** pDb's page size, already in the database (log_settled.c)? 1 or 0. */
int log_settled(waldio_log *pLog, int layout, sqlite3_file *pDb, i64 size);

/* The first WALDIO_META_BYTES of the file (*pGot: how many it has). */
int log_read_meta(waldio_log *pLog, u8 *aMeta, size_t *pGot);
void log_adopt_meta(waldio_log *pLog, const wal_superblock *sb);  /* mutex held */
i64 log_round_up(i64 x, i64 unit);
/* Cut the file from phys to keep bytes if longer; growMutex held (L7). */
int log_cut_locked(waldio_log *pLog, i64 phys, i64 keep);
/* log_open.c: LOG_LOCK_USE taken exclusively without waiting (no other
** process has the log open), and the error for "someone else has". */
int log_alone(waldio_log *pLog);
int log_in_use_error(waldio_log *pLog, const char *zWhat);


#endif
