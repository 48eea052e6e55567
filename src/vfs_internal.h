/*
** vfs_internal.h — the objects of the waldio VFS shim and how they link.
**
**   waldio_vfs       the registered sqlite3_vfs; owns the default options,
**                    the system-call table and the registry of open logs.
**   waldio_db_file   wraps each main database file (passes I/O through,
**                    answers waldio's PRAGMAs, watches the wal-index).
**   waldio_wal_file  each connection's handle on its WAL: translates
**                    SQLite's logical WAL reads and writes to the shared
**                    physical waldio_log.
**
** A WAL handle finds its database wrapper at open among the VFS's open
** database files: the one whose WAL path is the WAL's name and which this
** thread used last (SQLite opens a WAL right after reading its database
** file, on the same thread). It never dereferences the WAL name as an
** SQLite-allocated filename (sqlite3_database_file_object()): a shim stacked
** above waldio may pass its own copy. SQLite closes the WAL before the
** database, so the pointers between the two never dangle.
*/
#ifndef WALDIO_VFS_INTERNAL_H
#define WALDIO_VFS_INTERNAL_H

#include "flush_region.h"
#include "sqlite_api.h"
#include "syscalls.h"
#include "wal_index.h"
#include "wal_log.h"
#include "waldio.h"

typedef struct waldio_vfs {
  sqlite3_vfs base;          /* base.pAppData points back here */
  sqlite3_vfs *pLower;
  waldio_options opts;
  waldio_syscalls sys;
  log_registry registry;
  pthread_mutex_t dbMutex;   /* guards pDbList */
  struct waldio_db_file *pDbList;   /* open database files (WAL binding) */
  int defaultSyncLevel;      /* SQLite's compile-time WAL synchronous */
  long long defaultJournalSizeLimit;  /* and its journal_size_limit */
  u32 defaultPageSize;       /* and the page size of a new database */
  char zName[64];
} waldio_vfs;

/* SQLite's wal-index locks, as xShmLock offsets (src/wal.c). */
#define WAL_WRITE_LOCK_SLOT 0
#define WAL_CKPT_LOCK_SLOT  1
#define WAL_READ_LOCK_FIRST 3     /* WAL_READ_LOCK(0) .. (4) */

typedef struct waldio_wal_file waldio_wal_file;

typedef struct waldio_db_file {
  sqlite3_file base;
  waldio_vfs *pVfs;
  waldio_options opts;       /* VFS defaults + URI parameters + PRAGMAs */
  const char *zGroupFrom;    /* who set opts.group (log_group.h GROUP_WHY_*),
                             ** 0: the default */
  int flushAlone;            /* URI waldio_flush_alone (default 1): a shared
                             ** durable commit with no other near flushes
                             ** before it is published (wal_file.c); 0:
                             ** every one waits for a shared flush */
  waldio_wal_file *pWal;     /* this connection's open WAL, or NULL */
  const char *zName;
  char *zWalPath;            /* zName + "-wal" (sqlite3_malloc) */
  struct waldio_db_file *pNextDb;   /* waldio_vfs.pDbList */
  int lockLevel;             /* SQLITE_LOCK_* held on the database file */
  int syncLevel;             /* PRAGMA synchronous as set, -1 = default */
  long long journalSizeLimit;  /* PRAGMA journal_size_limit as set (-1: none) */
  int leavingWal;            /* journal_mode set to a rollback mode */
  int passthrough;           /* the file is not plain SQLite format (a VFS
                             ** above transforms it): its WAL and wal-index
                             ** are the lower VFS's, untouched (db_file.c) */
  int nativeShm;             /* the open WAL's layout keeps SQLite's own
                             ** "<db>-shm" (wal_layout.h LAYOUT_NATIVE_SHM):
                             ** set at each WAL open, before SQLite maps
                             ** the wal-index */
  int slotted;               /* the WAL is in a slotted layout of waldio's
                             ** own: set at each WAL open; before the
                             ** first, what the database's open expects
                             ** (one asked for by name, or such a log
                             ** beside the database) -- SQLite's pager
                             ** asks for the device's characteristics at
                             ** its open, before any WAL (db_file.c) */
  const char *zStockIo;      /* the WAL is the lower VFS's own, as stock
                             ** SQLite's, because of this (no direct I/O on
                             ** the file system, wal_file.c); NULL */
  int persistWal;            /* application's SQLITE_FCNTL_PERSIST_WAL, -1 */
  int holdsWriteLock;        /* WAL_WRITE_LOCK held in the wal-index */
  int holdsCkptLock;         /* WAL_CKPT_LOCK held (restart_assist.c) */
  volatile void *shm0;       /* wal-index region 0, NULL in heap mode */
  wal_index_view view;       /* the regions mapped (read-ahead advice) */
  int reserveState;          /* RESERVE_*: reserved bytes of a new database */
  u32 reservePage;           /* its page size, while RESERVE_PENDING */
  sqlite3 **ppBtreeDb;       /* SQLITE_FCNTL_PDB: the connection using the
                             ** B-tree on this file, while it is open */
  sqlite3_file *pShmHost;    /* slotted layouts: lower-VFS file on the log
                             ** path: its shm is waldio's wal-index,
                             ** "<db>-wal-shm": region 0 the flush region,
                             ** SQLite's regions after it */
  volatile flush_region *pFlush;   /* mapped on first use, or NULL */
  int strictPending;         /* strict: a read transaction has not yet read
                             ** a frame it must see durable (db_file.c) */
  int strictOwed;            /* strict: a write transaction skipped that
                             ** wait and has not committed durably since */
  int readSlot;              /* the wal-index read lock SQLite holds through
                             ** this connection (WAL_READ_LOCK(i) = 3+i), 0 */
  int releasedSlot;          /* that lock, released early for a durable
                             ** commit's wait (db_file.c): SQLite's own
                             ** unlock of it is skipped; 0 */
  const char *zShmHostName;
  /* The lower VFS's file object follows in memory. */
} waldio_db_file;

struct waldio_wal_file {
  sqlite3_file base;
  waldio_db_file *pDb;
  waldio_log *pLog;
  u8 *aSlot;                 /* block-aligned scratch, one slot */
  u32 nSlot;                 /* its size */
  u8 *aBatch;                /* new frames not yet written: slot images of */
  u32 batchFirst;            /*   frames batchFirst .. batchFirst+nBatch-1 */
  u32 nBatch;
  u32 nBatchMax;             /* capacity in slots */
  u32 pendingFrame;          /* a frame header awaiting its page, or 0 */
  u8 aPending[WAL_FRAME_HDR_BYTES];
  int needsSync;             /* persistent/ns: buffered frames to flush
                             ** before the commit is published */
  int spilled;               /* this transaction wrote frames before its
                             ** commit (a large one): it commits buffered */
  int wroteSinceBarrier;     /* frames written since the last publication */
  u64 commitSeq;             /* group mode: the last commit appended (solo)
                             ** or its ticket (shared), until
                             ** COMMIT_PHASETWO has waited for it */
  u64 ticket;                /* the last commit's flush_region ticket */
  int commitShared;          /* commitSeq is a flush_region ticket */
  u64 commitWriteSeq;        /* ... and the log's writeSeq after its write */
  int wroteUnderLock;        /* a write since the WAL write lock was taken */
  int inCommit;              /* group mode: between the commit frame and the
                             ** commit's publication (its xSync is skipped) */
  int flushAlone;            /* shared group mode: the commit's xSync flushes
                             ** it and takes its ticket (wal_file.c) */
  int closeClean;            /* fully checkpointed at close: mark empty */
};

#define ORIGFILE(p) ((sqlite3_file*)(((waldio_db_file*)(p))+1))

/* db_file.c */
extern const sqlite3_io_methods waldio_db_io_methods;
int waldio_db_open(waldio_vfs *v, const char *zName, waldio_db_file *p,
                   int flags, int *pOutFlags);
waldio_db_file *waldio_db_of(sqlite3_file *pTop);
/* The open database file a WAL named zWal belongs to (see above), or NULL. */
waldio_db_file *waldio_db_for_wal(waldio_vfs *v, const char *zWal);
/* Non-zero if a log in one of waldio's slotted layouts (a superblock) is at
** the database's WAL path. */
int waldio_db_has_slotted_log(waldio_db_file *p);
/* Decide (once the file holds a header) whether p passes through; a read
** error goes to *pRc. */
int waldio_db_passthrough(waldio_db_file *p, int *pRc);
/* The flush region shared by every process (flush_region.h), mapped on
** first use; NULL (with *pRc set on an error) where there is none: a
** heap-memory wal-index has no other process to share with, and a
** standard-layout log has one only in group mode, if its side file can be
** used (flush_side.h). */
volatile flush_region *waldio_db_flush_region(waldio_db_file *p, int *pRc);
int waldio_db_sync_level(const waldio_db_file *p);

/* wal_file.c */
int waldio_wal_open(waldio_vfs *v, const char *zName, waldio_wal_file *p,
                    int flags, int *pOutFlags);
int waldio_wal_flush(waldio_wal_file *p);
int waldio_wal_usable(waldio_wal_file *p);      /* L6: SQLITE_OK or an error */
/* xShmBarrier (a publication): write held state, and flush what the
** connection's promise (persistent, ns) needs durable before readers and
** the application may see the commit. */
int waldio_wal_barrier(waldio_wal_file *p);
void waldio_wal_discard(waldio_wal_file *p);   /* W4 */
/* The most the log keeps once the last connection closes (durability.md). */
i64 waldio_db_idle_bound(const waldio_db_file *db);

/* log_owner.c: before a WAL open, the log and its wal-index get the
** database's mode (and owner, as root); never fails (see there). */
void waldio_log_conform(waldio_vfs *v, waldio_db_file *db, const char *zLog,
                        const struct stat *pDb, int readonly);

/* Strict group mode, before a read transaction reads frame `frame` of the
** log: the first time it reads a page other than page 1 without holding the
** WAL write lock, wait until what it can see is durable (db_file.c). */
int waldio_db_strict_read(waldio_db_file *p, u32 frame);
/* A read while the connection's read lock is given back (db_file.c): an
** error, never a read outside a snapshot. */
int waldio_db_read_released(waldio_db_file *p);

/* Whether exactly one statement of the connection using this file runs
** (its commit, or its write lock request, is that statement's). */
int waldio_db_only_statement(waldio_db_file *p);

/* restart_assist.c: before a group-mode writer takes SQLite's WAL write
** lock on a long log: SQLITE_OK to go on, SQLITE_BUSY to be retried by
** SQLite from a new read transaction. */
int waldio_restart_gate(waldio_db_file *p);
/* The lock request is SQLite's attempt to restart the log (the other read
** locks, exclusive, by a writer on WAL_READ_LOCK(0)); xTry retries it for
** a short while. */
int waldio_restart_is_attempt(waldio_db_file *p, int ofst, int n, int flags);
int waldio_restart_lock_readers(int (*xTry)(void*), void *arg);

/* xSleep, as SQLite's busy handler calls it right after this thread's
** group-mode write lock attempt failed: sleep until the WAL write lock is
** released instead (at most us), and return 1; else 0 (sleep normally). */
int waldio_busy_sleep(waldio_vfs *v, int us);

/* vfs.c: per-connection setup (reserve bytes, SQL functions). */
int waldio_connection_setup(sqlite3 *db);
/* The reserve of a new database (vfs.c): decided as late as possible. */
enum { RESERVE_NONE, RESERVE_PENDING, RESERVE_DONE, RESERVE_NEVER };
void waldio_reserve_note_page_size(waldio_db_file *p, const char *zArg);
void waldio_reserve_decide(waldio_db_file *p);     /* SHARED lock taken */
/* The block size the log of database zDb will use (>= 4096). */
u32 waldio_block_size(const char *zDb);

/* pragma_vtab.c: pragma_waldio and friends, for one connection. */
int waldio_register_pragma_tables(sqlite3 *db);

/* pragmas.c: returns SQLITE_NOTFOUND for pragmas that are not waldio's. */
int waldio_pragma(waldio_db_file *p, char **az);

#endif
