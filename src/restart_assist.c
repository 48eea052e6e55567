/*
** restart_assist.c — letting SQLite restart a long log under a saturating
** load of group commits from several processes.
**
** SQLite restarts its WAL from the start (walRestartLog, src/wal.c) only
** when a writer's read transaction began after a checkpoint had copied the
** whole log into the database (it then holds WAL_READ_LOCK(0)), and no
** reader holds another read lock when that writer writes its first frame.
** Under shared group commit (flush_region.h) writers wait for the write
** lock on a futex instead of sleeping in SQLite's busy handler, so under a
** saturating load commits land during every checkpoint, no checkpoint
** copies the whole log, and the log grows without bound (as stock SQLite's
** WAL does under synchronous=NORMAL). Once the log is longer than
** LONG_LOG_FRAMES, a group writer about to take the write lock:
**
**   - if it holds no read lock yet (SQLite builds with
**     SQLITE_ENABLE_SETLK_TIMEOUT, apsw's among them, take the write lock
**     first), waits while a checkpoint runs (flush_region ckptMs, at most
**     CKPT_WAIT_MS): the checkpoint then copies the whole log, and the
**     read transaction this writer begins next finds it copied;
**   - if it holds a read lock (other builds), waits the same way, after
**     giving its read lock back (SQLITE_BUSY) if that lock's mark would
**     stop the checkpoint short of the log's end; and once the whole log
**     is copied, returns SQLITE_BUSY so that SQLite's retry begins a read
**     transaction on the copied log.
**
** Invariants:
**   R1  Only a writer whose BUSY SQLite retries by itself is sent back: an
**       autocommit statement (or BEGIN IMMEDIATE) that is its connection's
**       only running statement -- its B-tree had no read transaction, so
**       sqlite3BtreeBeginTrans ends the read transaction and calls the busy
**       handler (a connection without one gets SQLITE_BUSY, as whenever
**       another holds the write lock). A write inside an open transaction
**       goes on as before.
**   R2  Nothing here is needed for correctness: the wal-index is read for
**       advice (wal_index.h), and a wrong answer costs a retry or a missed
**       restart. Every wait is bounded; a checkpointer killed mid-way leaves
**       a mark that goes stale (flush_region_checkpoint_running).
**   R3  The restart itself is SQLite's: its attempt to lock the other read
**       locks is retried for at most READERS_WAIT_US (read transactions are
**       short), then left to fail as it would.
*/
#include "vfs_internal.h"
#include "flush_region.h"
#include "wal_index.h"

#include <time.h>

#define LONG_LOG_FRAMES  1000    /* SQLite's default checkpoint interval
                                 ** (wal_autocheckpoint 1000): past it every
                                 ** commit runs a checkpoint, each with a log
                                 ** flush and a database sync, until the log
                                 ** restarts (at 4000, two processes made 1.26
                                 ** flushes a commit; at 1000, 1.00) */
#define CKPT_WAIT_MS     50
#define READERS_WAIT_US  2000
#define READERS_POLL_US  50

static int log_is_long(const volatile void *shm0){
  return wal_index_mx_frame(shm0)>=LONG_LOG_FRAMES;
}

/* R1 */
static int retried_by_sqlite(waldio_db_file *p){
  sqlite3 *db = p->ppBtreeDb ? *p->ppBtreeDb : 0;
  return db && sqlite3_get_autocommit(db) && waldio_db_only_statement(p);
}

/* This connection's read mark stops a checkpoint before the log's end. */
static int mark_is_behind(waldio_db_file *p){
  int i = p->readSlot - WAL_READ_LOCK_FIRST;
  return i>0 && wal_index_read_mark(p->shm0, i)<wal_index_mx_frame(p->shm0);
}

static int whole_log_copied(const volatile void *shm0){
  return wal_index_backfilled(shm0)==wal_index_mx_frame(shm0);
}

int waldio_restart_gate(waldio_db_file *p){
  if( !p->shm0 || !p->pFlush || p->holdsCkptLock
   || p->readSlot==WAL_READ_LOCK_FIRST || !log_is_long(p->shm0) ){
    return SQLITE_OK;       /* a checkpoint's own request, a writer that will
                            ** restart the log, or nothing to do */
  }
  if( p->readSlot==0 ){     /* no read lock yet: SQLite asks for the write
                            ** lock first (SQLITE_ENABLE_SETLK_TIMEOUT
                            ** builds; a recovery): its read transaction
                            ** begins after the checkpoint, on the copied log */
    flush_region_await_checkpoint(p->pFlush, CKPT_WAIT_MS);
    return SQLITE_OK;
  }
  if( !retried_by_sqlite(p) ) return SQLITE_OK;
  if( flush_region_checkpoint_running(p->pFlush) ){
    if( mark_is_behind(p) ) return SQLITE_BUSY;
    flush_region_await_checkpoint(p->pFlush, CKPT_WAIT_MS);
  }
  return whole_log_copied(p->shm0) ? SQLITE_BUSY : SQLITE_OK;
}

int waldio_restart_is_attempt(waldio_db_file *p, int ofst, int n, int flags){
  return p->holdsWriteLock && p->readSlot==WAL_READ_LOCK_FIRST && p->shm0
      && ofst==WAL_READ_LOCK_FIRST + 1 && n==4
      && flags==(SQLITE_SHM_LOCK|SQLITE_SHM_EXCLUSIVE) && log_is_long(p->shm0);
}

int waldio_restart_lock_readers(int (*xTry)(void*), void *arg){
  struct timespec poll = { 0, READERS_POLL_US * 1000L };
  int waited, rc = xTry(arg);
  for(waited=0; rc==SQLITE_BUSY && waited<READERS_WAIT_US; waited+=READERS_POLL_US){
    nanosleep(&poll, 0);
    rc = xTry(arg);
  }
  return rc;
}
