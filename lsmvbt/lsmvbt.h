/*
** lsmvbt.h — LS-MVBT, the lazy-split multi-version B+-tree of Kim et al.
** (the competing design of the WALDIO paper, ../shared/papers/004_*), as a
** key-value engine of its own, independent of SQLite.
**
** One file holds one tree: 64-bit signed integer keys, byte-string values.
** Every cell carries a version range [start, end): an insert adds [v, INF),
** a delete sets end = v, an update is both. A reader sees exactly one
** version. There is no rollback journal and no log: a commit writes each
** dirty node once, in place in that node's home in the file, and calls
** fdatasync once. A commit that dirties one node writes one page. How a
** multi-page commit stays atomic, and why a torn page never loses committed
** data, is in DESIGN.md (next to this file) and in recovery.c.
**
** Threading: one lsmvbt_db is used by one thread at a time. One process
** opens a file once (an exclusive flock; a second open gets LSMVBT_BUSY).
**
** Result codes are numerically SQLite's (so the virtual-table glue passes
** them through); the engine itself does not use SQLite.
*/
#ifndef LSMVBT_H
#define LSMVBT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LSMVBT_OK         0
#define LSMVBT_ERROR      1
#define LSMVBT_BUSY       5    /* file open elsewhere / write txn already open */
#define LSMVBT_NOMEM      7
#define LSMVBT_IOERR     10
#define LSMVBT_CORRUPT   11
#define LSMVBT_NOTFOUND  12    /* key absent (SQLITE_NOTFOUND) */
#define LSMVBT_FULL      13    /* no key left above the largest one */
#define LSMVBT_CANTOPEN  14
#define LSMVBT_TOOBIG    18    /* value longer than lsmvbt_max_value() */
#define LSMVBT_CONSTRAINT 19   /* insert of an existing key */
#define LSMVBT_MISUSE    21
#define LSMVBT_NOTADB    26    /* the file is not an LS-MVBT file */

/* ---- System calls: every call the engine makes on its file ----------------
** As SQLite's os_unix.c, the engine never calls open/pwrite/fdatasync
** directly. lsmvbt_io_default() is the process-wide table (real calls) that
** a handle uses when its options leave io NULL; a test or a crash recorder
** replaces entries in it, or hands its own table to one handle. Entries are
** read at each call, so a replacement applies to open handles too. */
typedef struct lsmvbt_io {
  int (*xOpen)(const char *path, int flags, mode_t mode);
  int (*xClose)(int fd);
  ssize_t (*xPread)(int fd, void *buf, size_t n, off_t off);
  ssize_t (*xPwrite)(int fd, const void *buf, size_t n, off_t off);
  int (*xFdatasync)(int fd);
  int (*xFsync)(int fd);                  /* the directory, after a create */
  int (*xFallocate)(int fd, int mode, off_t off, off_t len);
  int (*xFstat)(int fd, struct stat *st);
  int (*xFlock)(int fd, int op);
  int (*xRename)(const char *from, const char *to);
  int (*xUnlink)(const char *path);
} lsmvbt_io;

lsmvbt_io *lsmvbt_io_default(void);
/* Replace (fn!=NULL) or restore (fn==NULL) one entry of t by its name:
** "open", "close", "pread", "pwrite", "fdatasync", "fsync", "fallocate",
** "fstat", "flock", "rename", "unlink". Returns LSMVBT_NOTFOUND for other
** names. lsmvbt_io_get returns the current entry (NULL: unknown name). */
typedef void (*lsmvbt_io_fn)(void);
int lsmvbt_io_set(lsmvbt_io *t, const char *zName, lsmvbt_io_fn fn);
lsmvbt_io_fn lsmvbt_io_get(const lsmvbt_io *t, const char *zName);
const char *lsmvbt_io_next(const char *zName);   /* NULL: first; NULL after last */

/* ---- Options: the five optimizations of the slides, each switchable ------ */
#define LSMVBT_SYNC_NORMAL 0   /* no fdatasync per commit (one at close) */
#define LSMVBT_SYNC_FULL   1   /* one fdatasync per commit */

typedef struct lsmvbt_options {
  /* 1. Lazy split: a full node is split by copying its upper half into a new
  **    node; the old node is not written (its moved cells die through the
  **    parent's routing, and are collected on its next mutation).
  **    0: the legacy MVBT split, which also rewrites the old node. */
  int lazy_split;                        /* default 1 */
  /* 2. Reserved buffer space: bytes kept free in every node for normal
  **    inserts, usable only by a "lazy" node (one holding dead cells that
  **    cannot be collected yet). 0: off. */
  int reserve_bytes;                     /* default -1: page_size/16 */
  /* 3. Lazy garbage collection: dead cells are removed when their node is
  **    next modified. 0: a periodic pass every gc_period commits visits the
  **    whole tree and rewrites every node holding garbage. */
  int lazy_gc;                           /* default 1 */
  int gc_period;                         /* default 64 (used when lazy_gc=0) */
  /* 4. Metadata embedding: the commit version and root live in the pages the
  **    commit writes anyway. 0: every commit also rewrites the header page. */
  int embed_metadata;                    /* default 1 */
  /* 5. Sibling redistribution: 1 moves cells of a full leaf into a sibling
  **    with room before splitting (the unoptimized B-tree). The optimization
  **    is 0, redistribution disabled. */
  int redistribute;                      /* default 0 */

  int sync;                              /* default LSMVBT_SYNC_FULL */
  uint32_t page_size;                    /* new files: 512..65536, power of 2; default 4096 */
  uint32_t cache_pages;                  /* clean nodes kept in memory; default 4096 */
  uint64_t prealloc_bytes;               /* grow the file by this much, zero-filled and
                                         ** synced before use; 0: grow by writes.
                                         ** default 1 MiB */
  lsmvbt_io *io;                         /* NULL: lsmvbt_io_default() */
} lsmvbt_options;

void lsmvbt_options_default(lsmvbt_options *opt);

/* ---- Opening --------------------------------------------------------------- */
#define LSMVBT_OPEN_CREATE   0x01   /* create the file if it does not exist */
#define LSMVBT_OPEN_TRUNCATE 0x02   /* replace any existing file with an empty tree */

typedef struct lsmvbt_db lsmvbt_db;

/* Open (recovering after a crash: the result is exactly the last committed
** version) or create. On error *pDb may still be set so that
** lsmvbt_errmsg() can be read; close it. */
int lsmvbt_open(const char *zPath, int flags, const lsmvbt_options *opt,
                lsmvbt_db **pDb);
int lsmvbt_close(lsmvbt_db *db);            /* rolls back an open transaction */
const char *lsmvbt_errmsg(lsmvbt_db *db);
int lsmvbt_unlink(const char *zPath, lsmvbt_io *io);  /* delete a (closed) file */

/* The largest value lsmvbt_put() accepts on this handle (it depends on the
** page size and the reserve: a node must hold four cells). */
uint32_t lsmvbt_max_value(lsmvbt_db *db);

/* ---- Transactions -------------------------------------------------------------
** One write transaction at a time, at version V+1 where V is the last
** committed version. Reads inside it see its own writes.
**   lsmvbt_sync      writes every dirty node and fdatasyncs: after it returns
**                    the transaction is durable (SQLite's xSync).
**   lsmvbt_commit    lsmvbt_sync if not done, then ends the transaction.
**   lsmvbt_rollback  before sync: discards the dirty nodes (nothing was
**                    written); after sync: writes a compensating commit
**                    that restores the previous contents.
** Savepoints (SQLite's xSavepoint/xRelease/xRollbackTo) undo logically. */
int lsmvbt_begin(lsmvbt_db *db);
int lsmvbt_sync(lsmvbt_db *db);
int lsmvbt_commit(lsmvbt_db *db);
int lsmvbt_rollback(lsmvbt_db *db);
int lsmvbt_savepoint(lsmvbt_db *db, int iSavepoint);
int lsmvbt_release(lsmvbt_db *db, int iSavepoint);
int lsmvbt_rollback_to(lsmvbt_db *db, int iSavepoint);
int lsmvbt_in_txn(lsmvbt_db *db);

/* ---- Reads and writes --------------------------------------------------------- */
#define LSMVBT_INSERT  1   /* fail with LSMVBT_CONSTRAINT if the key exists */
#define LSMVBT_REPLACE 2   /* insert or overwrite */
#define LSMVBT_UPDATE  3   /* fail with LSMVBT_NOTFOUND if the key is absent */

int lsmvbt_put(lsmvbt_db *db, int64_t key, const void *val, uint32_t n, int mode);
int lsmvbt_delete(lsmvbt_db *db, int64_t key);      /* LSMVBT_NOTFOUND if absent */
/* The value of key in the reader's version (the open transaction's, else the
** last committed). *pVal stays valid until the next call on db. */
int lsmvbt_get(lsmvbt_db *db, int64_t key, const void **pVal, uint32_t *pn);
int lsmvbt_last_key(lsmvbt_db *db, int64_t *pKey);  /* LSMVBT_NOTFOUND if empty */

/* A cursor reads one version, fixed when it is opened: the open transaction's
** (it then sees later writes of that transaction too) or, outside a
** transaction, the last committed one, which it keeps seeing across later
** commits until it is closed (garbage collection spares that version). */
typedef struct lsmvbt_cursor lsmvbt_cursor;
int lsmvbt_cursor_open(lsmvbt_db *db, lsmvbt_cursor **pCur);
int lsmvbt_cursor_seek(lsmvbt_cursor *c, int64_t key);   /* first key >= key */
int lsmvbt_cursor_first(lsmvbt_cursor *c);
int lsmvbt_cursor_next(lsmvbt_cursor *c);
int lsmvbt_cursor_eof(lsmvbt_cursor *c);
int64_t lsmvbt_cursor_key(lsmvbt_cursor *c);
const void *lsmvbt_cursor_value(lsmvbt_cursor *c, uint32_t *pn);
uint64_t lsmvbt_cursor_version(lsmvbt_cursor *c);
void lsmvbt_cursor_close(lsmvbt_cursor *c);

/* ---- Inspection ---------------------------------------------------------------- */
typedef struct lsmvbt_stats {
  uint64_t version;              /* last committed version */
  uint32_t page_size, npages, free_pages, height;
  uint64_t commits;              /* that wrote pages */
  uint64_t empty_commits;        /* nothing changed: nothing written */
  uint64_t rollbacks, compensations;
  uint64_t pages_written, bytes_written, syncs;
  uint64_t commit_pages[5];      /* commits that wrote 1, 2, 3, 4, >=5 pages */
  uint64_t last_commit_pages;
  uint64_t page_reads, cache_hits, prealloc_bytes;
  uint64_t splits_lazy;          /* old node left untouched */
  uint64_t splits_legacy;        /* old node rewritten */
  uint64_t splits_copy;          /* lazy node full, lower half copied */
  uint64_t version_splits;       /* live cells copied into one new node */
  uint64_t root_splits, redistributions, reserve_uses;
  uint64_t gc_cells;             /* dead cells removed */
  uint64_t gc_passes;            /* periodic passes (lazy_gc=0) */
  uint64_t pages_reclaimed;
  uint64_t recovery_slots_scanned, recovery_slots_cleaned;
  uint64_t recovery_usec;
} lsmvbt_stats;

void lsmvbt_get_stats(lsmvbt_db *db, lsmvbt_stats *st);
/* Check the committed tree: every reachable page readable, levels, key
** ranges and order, one live cell per key. LSMVBT_OK or LSMVBT_CORRUPT with
** the reason in lsmvbt_errmsg(). */
int lsmvbt_check(lsmvbt_db *db);
const lsmvbt_options *lsmvbt_get_options(lsmvbt_db *db);

#ifdef __cplusplus
}
#endif
#endif
