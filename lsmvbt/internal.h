/*
** internal.h — what the engine's files share: the handle, error reporting,
** and the I/O helpers of io.c. Not installed; the API is lsmvbt.h.
*/
#ifndef LSMVBT_INTERNAL_H
#define LSMVBT_INTERNAL_H

#include "lsmvbt.h"
#include "node.h"
#include "pager.h"
#include "tree.h"

#include <stdarg.h>
#include <stdint.h>

#define LSM_TXN_NONE   0
#define LSM_TXN_OPEN   1
#define LSM_TXN_SYNCED 2    /* durable on disk, waiting for lsmvbt_commit */

/* One logical change of the open transaction, for savepoints and for the
** compensating commit of a rollback after sync: the key's previous state. */
typedef struct lsm_undo {
  int64_t key;
  int had;              /* the key existed before */
  uint32_t len;
  uint8_t *val;
} lsm_undo;

typedef struct lsm_savepoint { int id; uint32_t mark; } lsm_savepoint;

struct lsmvbt_db {
  lsmvbt_options opt;
  lsmvbt_io *io;
  char *zPath;
  int fd;
  lsm_pager pager;
  lsm_tree tree;
  int tree_ok;
  uint64_t C;                 /* last committed version */
  int txn;                    /* LSM_TXN_* */
  int gc_pass_done;           /* the periodic pass ran in this transaction */
  int txn_failed;             /* D5: a write failed half-way; only rollback */
  lsm_undo *undo;
  uint32_t nundo, nundo_alloc;
  lsm_savepoint *sp;
  int nsp, nsp_alloc;
  uint64_t *pins;             /* versions read by open cursors */
  int npin, npin_alloc;
  lsmvbt_stats stats;
  uint8_t *getbuf;            /* lsmvbt_get's result */
  uint32_t getbuf_alloc;
  char zErr[512];
};

int lsm_err(lsmvbt_db *db, int rc, const char *zFmt, ...)
  __attribute__((format(printf, 3, 4)));

/* io.c */
int lsm_read_full(lsmvbt_io *io, int fd, void *buf, size_t n, off_t off);
int lsm_write_full(lsmvbt_io *io, int fd, const void *buf, size_t n, off_t off);
int lsm_zero_fill(lsmvbt_io *io, int fd, off_t off, uint64_t n);
int lsm_sync_data(lsmvbt_io *io, int fd);
int lsm_sync_dir(lsmvbt_io *io, const char *zPath);

/* recovery.c */
int lsm_create_file(lsmvbt_db *db, const char *zPath);
int lsm_recover(lsmvbt_db *db);

#endif
