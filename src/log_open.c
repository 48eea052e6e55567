/*
** log_open.c — opening and closing a waldio log: the per-process registry
** (one waldio_log per inode, like os_unix.c's unixInodeInfo), the locks
** between processes (log_lock.h, wal_log.h L5), fork (L6), and what block 0
** says the file is.
**
** Opening (attach_locked), with LOG_LOCK_INIT held exclusively (shared for a
** read-only descriptor):
**   1. The descriptor must still be the file at the path: a conversion in
**      another process may have renamed a new log over it, and this process
**      then holds the old, unlinked inode. If so, close and reopen.
**   2. What the file holds decides its layout (init_file below), and the
**      layout brings it into shape (wal_layout.h xAttach): a slotted
**      layout formats a fresh block 0 or adopts the one it finds
**      (log_superblock.c); the standard layout adopts SQLite's header as it
**      is (layout_standard.c). A standard WAL an opener asked to have in a
**      slotted layout is converted (wal_convert.c; needs "alone"). "Alone"
**      is LOG_LOCK_USE taken exclusively without waiting.
**   3. Take LOG_LOCK_USE shared (an atomic downgrade where step 2 took it
**      exclusively) and release INIT. If a process in solo group mode holds
**      USE exclusively, knock (LOG_LOCK_KNOCK shared), release INIT, and
**      start again every millisecond: that process writes its group buffer
**      and downgrades USE within milliseconds (log_group.h G5).
** Every opener re-reads block 0 after its lock wait, so concurrent first
** opens all succeed: the first formats, the others find the format done.
**
** The slotted layouts' guard (log_superblock.c) relies on this order.
*/
#include "wal_log.h"
#include "errors.h"
#include "log_flusher.h"
#include "sqlite_api.h"
#include "wal_convert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INIT_WAIT_MS 30000   /* INIT is held only for bounded work */
#define GROUP_WAIT_MS 5000   /* a solo group-mode process holding USE: it
                             ** answers a knock within milliseconds */
#define ATTACH_RETRY 0x57415454   /* not an SQLite code: "release, retry" */

/* ------------------------------------------- process-wide: exit and fork */

/* Every registry of this process (one per registered waldio VFS), for the
** exit hook and the fork handlers: the only process-wide state of the log
** layer, as os_unix.c keeps its inode list. */
static pthread_mutex_t g_regMutex = PTHREAD_MUTEX_INITIALIZER;
static log_registry *g_pRegistries;
static volatile unsigned g_forkGen;

/* Process exit: write what group commit still buffers and flush (a C
** program may exit() without sqlite3_close()). Never an inherited log. */
static void flush_at_exit(void){
  log_registry *r;
  pthread_mutex_lock(&g_regMutex);
  for(r=g_pRegistries; r; r=r->pNextRegistry){
    waldio_log *p;
    pthread_mutex_lock(&r->mutex);
    for(p=r->pList; p; p=p->pNext){
      if( !log_inherited(p) && group_write_all(p)==SQLITE_OK ) log_sync_bound(p);
    }
    pthread_mutex_unlock(&r->mutex);
  }
  pthread_mutex_unlock(&g_regMutex);
}

/* fork(): no registry mutex may be held by another thread at the moment of
** the fork, or the child would deadlock on it; and no shared flush may be
** under way: the child would inherit its OFD leader lock, and keep it held
** if the parent then died (flush_region.h F4). */
static void before_fork(void){
  log_registry *r;
  waldio_log *p;
  pthread_mutex_lock(&g_regMutex);
  for(r=g_pRegistries; r; r=r->pNextRegistry){
    pthread_mutex_lock(&r->mutex);
    for(p=r->pList; p; p=p->pNext) pthread_mutex_lock(&p->leaderMutex);
  }
}
static void after_fork_parent(void){
  log_registry *r;
  waldio_log *p;
  for(r=g_pRegistries; r; r=r->pNextRegistry){
    for(p=r->pList; p; p=p->pNext) pthread_mutex_unlock(&p->leaderMutex);
    pthread_mutex_unlock(&r->mutex);
  }
  pthread_mutex_unlock(&g_regMutex);
}
/* The child also closes its copy of every leader descriptor (flush_region.c
** try_lead): while it held one, a parent killed inside a later flush would
** leave the leader lock held by the child's reference. */
static void after_fork_child(void){
  log_registry *r;
  waldio_log *p;
  g_forkGen++;                       /* L6: every inherited log is foreign */
  for(r=g_pRegistries; r; r=r->pNextRegistry){
    for(p=r->pList; p; p=p->pNext){
      if( p->leaderFd>=0 ) p->sys->xClose(p->leaderFd);
      p->leaderFd = -1;
    }
  }
  after_fork_parent();
}

void log_registry_init(log_registry *r){
  static int hooked = 0;
  pthread_mutex_init(&r->mutex, 0);
  r->pList = 0;
  pthread_mutex_lock(&g_regMutex);
  if( !hooked ){
    atexit(flush_at_exit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    hooked = 1;
  }
  r->pNextRegistry = g_pRegistries;
  g_pRegistries = r;
  pthread_mutex_unlock(&g_regMutex);
}

void log_registry_remove(log_registry *r){
  log_registry **pp;
  pthread_mutex_lock(&g_regMutex);
  for(pp=&g_pRegistries; *pp; pp=&(*pp)->pNextRegistry){
    if( *pp==r ){ *pp = r->pNextRegistry; break; }
  }
  pthread_mutex_unlock(&g_regMutex);
}

int log_inherited(const waldio_log *pLog){ return pLog->forkGen!=g_forkGen; }

int log_inherited_error(const waldio_log *pLog){
  return waldio_error(SQLITE_MISUSE, "%s: this connection was opened before"
      " fork(); a child process must open its own connections (SQLite"
      " connections must not be carried across fork)", pLog->zPath);
}

/* ------------------------------------------------------------- block 0 */

int log_damaged_error(const char *zPath, const u8 *meta){
  const char *zDamage = wf_block0_damage(meta);
  size_t n = strlen(zPath);
  int nDb = (int)(n>4 && strcmp(zPath+n-4, "-wal")==0 ? n-4 : n);
  return waldio_error(SQLITE_CORRUPT, "%s: block 0 of the log is damaged: %s."
      " waldio refuses to open the database, because the log may hold"
      " committed transactions the database file does not have yet. Close"
      " every connection to it, then run `waldio recover %.*s`: it keeps every"
      " frame that can be proven committed, says how many it dropped, and"
      " keeps the damaged log as %s.damaged (docs/format.md section 8)",
      zPath, zDamage ? zDamage : "no valid superblock", nDb, zPath, zPath);
}

int log_alone(waldio_log *pLog){
  return log_lock(pLog->sys, pLog->file.fd, LOG_LOCK_USE, LOG_EXCLUSIVE)==0;
}

int log_in_use_error(waldio_log *pLog, const char *zWhat){
  return waldio_error(SQLITE_BUSY, "%s: cannot %s the log while another"
      " process has it open", pLog->zPath, zWhat);
}

static int attach_as(waldio_log *pLog, int layout, const log_request *req,
                     const wal_superblock *pFound, i64 size){
  pLog->pLayout = wal_layout_find(layout);
  if( !pLog->pLayout ){
    return waldio_error(SQLITE_CANTOPEN, "%s: unknown log layout %d",
                        pLog->zPath, layout);
  }
  return pLog->pLayout->xAttach(pLog, req, pFound, size);
}

/* A slotted log found; an opener that asked for the standard layout by
** name turns it into one if it holds no frames and nobody else has it
** open (an empty standard WAL is an empty file). Otherwise an existing log
** keeps its layout. */
static int attach_found(waldio_log *pLog, const log_request *req,
                        const wal_superblock *sb, i64 size){
  const wal_layout *pAsked = wal_layout_find(req->layout);
  if( req->opts->layout!=WALDIO_LAYOUT_AUTO && pAsked
   && (pAsked->flags & LAYOUT_NATIVE_SHM) && !pLog->file.readonly
   && !(sb->flags & SB_FLAG_HAS_HEADER) && log_alone(pLog) ){
    int rc = dio_truncate(&pLog->file, 0);
    return rc ? rc : attach_as(pLog, req->layout, req, 0, 0);
  }
  return attach_as(pLog, (int)sb->geo.layout, req, sb, size);
}

/* What the file holds decides, INIT held:
**   a waldio superblock             -> that slotted layout (attach_found)
**   a guard header, or a superblock
**   that fails its checks           -> refuse: it may hold commits (unless
**                                      a torn write left its SQLite header
**                                      copy whole: wf_decode_block0_torn;
**                                      or every frame behind it is in the
**                                      database: log_settled.c, as empty)
**   a standard SQLite WAL (3007000) -> the standard layout, or, for an
**                                      opener that asked for a slotted
**                                      one, wal_convert.c re-lays its
**                                      frames (needs alone); reopen
**   empty, or anything else         -> the asked layout's fresh log (the
**                                      standard layout refuses data after a
**                                      broken header)
** Returns SQLITE_OK, WALDIO_CONVERTED (reopen: the file was replaced) or an
** error. */
static int init_file(waldio_log *pLog, const log_request *req){
  const wal_layout *pAsked = wal_layout_find(req->layout);
  u8 aMeta[WALDIO_META_BYTES];
  wal_superblock sb;
  size_t got = 0;
  i64 size;
  u32 version = 0, page = 0;
  int rc, d;

  rc = dio_file_size(&pLog->file, &size);
  if( rc ) return rc;
  memset(aMeta, 0, sizeof(aMeta));
  if( size>0 ){
    rc = log_read_meta(pLog, aMeta, &got);
    if( rc ) return rc;
  }
  d = wf_decode_block0(aMeta, &sb);
  if( d>0 ) return attach_found(pLog, req, &sb, size);
  if( d<0 && !pLog->file.readonly && wf_decode_block0_torn(aMeta, &sb) ){
    /* A block-0 write torn in its flags or checksum: the SQLite header copy
    ** it carries is whole, and says what the log holds. */
    return attach_found(pLog, req, &sb, size);
  }
  if( d<0 && !pLog->file.readonly
   && log_settled(pLog, (int)wf_get32(aMeta+SB_OFF_LAYOUT), req->pDb, size) ){
    /* Block 0 torn while SQLite began a new generation: every frame behind
    ** it is in the database, so the log is as good as empty. */
    return attach_as(pLog, req->layout, req, 0, size);
  }
  if( d<0 ) return log_damaged_error(pLog->zPath, aMeta);
  if( wf_parse_sqlite_header(aMeta, &version, &page)
   && version==WALDIO_GUARD_VERSION ){
    return log_damaged_error(pLog->zPath, aMeta);
  }
  if( version==WAL_FORMAT_VERSION && pAsked
   && !(pAsked->flags & LAYOUT_NATIVE_SHM) ){
    if( pLog->file.readonly ){
      return waldio_error(SQLITE_READONLY, "%s: a standard-format WAL that"
          " this read-only connection cannot convert; open the database"
          " read-write once (or checkpoint it with stock SQLite)",
          pLog->zPath);
    }
    if( !log_alone(pLog) ) return log_in_use_error(pLog, "convert");
    return wal_convert_standard(pLog->sys, pLog->zPath, &pLog->file,
                                req->opts, req->layout);
  }
  return attach_as(pLog, req->layout, req, 0, size);
}

/* Step 1: is the descriptor still the file at the path? */
static int same_file_as_path(waldio_log *pLog){
  struct stat st;
  if( pLog->sys->xStat(pLog->zPath, &st)==0
   && st.st_dev==pLog->dev && st.st_ino==pLog->ino ){
    return SQLITE_OK;
  }
  return WALDIO_CONVERTED;     /* replaced or removed meanwhile: reopen */
}

/* L5: the open protocol (see the top of this file). */
static int attach_locked(waldio_log *pLog, const log_request *req){
  const waldio_syscalls *sys = pLog->sys;
  int fd = pLog->file.fd;
  int initMode = pLog->file.readonly ? LOG_SHARED : LOG_EXCLUSIVE;
  int waited = 0, knocking = 0, err, rc;

  for(;;){
    err = log_lock_wait(sys, fd, LOG_LOCK_INIT, initMode, INIT_WAIT_MS);
    if( err==EAGAIN ){
      rc = waldio_error(SQLITE_BUSY, "%s: cannot lock the log to open it:"
          " another process has held it for more than %d s (initializing or"
          " converting it)", pLog->zPath, INIT_WAIT_MS/1000);
      break;
    }
    if( err ){
      rc = waldio_errno(SQLITE_IOERR_LOCK, err, "cannot lock log", pLog->zPath);
      break;
    }
    rc = same_file_as_path(pLog);
    if( rc==SQLITE_OK ) rc = init_file(pLog, req);
    if( rc==SQLITE_OK ){
      err = log_lock(sys, fd, LOG_LOCK_USE, LOG_SHARED);
      if( err==0 ) err = log_lock(sys, fd, LOG_LOCK_ACTIVE, LOG_SHARED);   /* L8 */
      if( err==EAGAIN ){
        rc = ATTACH_RETRY;
      }else if( err ){
        rc = waldio_errno(SQLITE_IOERR_LOCK, err, "cannot lock log", pLog->zPath);
      }
    }
    if( rc!=SQLITE_OK && rc!=ATTACH_RETRY ){
      log_lock(sys, fd, LOG_LOCK_USE, LOG_UNLOCKED);
      log_lock(sys, fd, LOG_LOCK_ACTIVE, LOG_UNLOCKED);
    }
    log_lock(sys, fd, LOG_LOCK_INIT, LOG_UNLOCKED);
    if( rc!=ATTACH_RETRY ) break;
    if( waited>=GROUP_WAIT_MS ){
      rc = waldio_error(SQLITE_BUSY, "%s: another process keeps this database"
          " in single-process group commit and did not give it up within %d s"
          " (is that process stopped, or using an older libwaldio?)",
          pLog->zPath, GROUP_WAIT_MS/1000);
      break;
    }
    /* A process in solo group mode holds USE: knock (log_group.h G5). */
    if( !knocking ) knocking = log_lock(sys, fd, LOG_LOCK_KNOCK, LOG_SHARED)==0;
    usleep(1000);
    waited += 1;
  }
  if( knocking ) log_lock(sys, fd, LOG_LOCK_KNOCK, LOG_UNLOCKED);
  return rc;
}

/* ------------------------------------------------------- the log object */

static void apply_owner(waldio_log *pLog, const log_request *req){
  pLog->sys->xFchmod(pLog->file.fd, req->mode);
  if( geteuid()==0 ) pLog->sys->xFchown(pLog->file.fd, req->uid, req->gid);
}

static waldio_log *log_new(const waldio_syscalls *sys, const char *zPath,
                           const log_request *req){
  const waldio_options *o = req->opts;
  waldio_log *pLog = calloc(1, sizeof(*pLog));
  if( !pLog ) return 0;
  pLog->zPath = strdup(zPath);
  if( !pLog->zPath ){ free(pLog); return 0; }
  pLog->sys = sys;
  pLog->file.fd = -1;
  pLog->leaderFd = -1;
  pLog->forkGen = g_forkGen;
  pLog->preallocInitial = o->prealloc_bytes;
  pLog->cacheBudget = o->cache_bytes;
  pLog->flushMs = o->flush_ms;
  pthread_mutex_init(&pLog->mutex, 0);
  pthread_mutex_init(&pLog->growMutex, 0);
  pthread_mutex_init(&pLog->leaderMutex, 0);
  flush_side_init(&pLog->side, req->mode, req->uid, req->gid);
  pLog->lastBlockOff = -1;
  group_init(&pLog->group);
  pLog->group.capBytes = o->group_bytes;
  pLog->group.intervalMs = o->group_ms;
  return pLog;
}

static void log_free(waldio_log *pLog){
  dio_close(&pLog->file);     /* drops this process's locks (L5) */
  flush_side_close(&pLog->side, pLog->sys);
  pthread_mutex_destroy(&pLog->side.mutex);
  free(pLog->aLastBlock);
  if( pLog->leaderFd>=0 ) pLog->sys->xClose(pLog->leaderFd);
  group_free(&pLog->group);
  frame_cache_free(&pLog->cache);
  pthread_mutex_destroy(&pLog->growMutex);
  pthread_mutex_destroy(&pLog->leaderMutex);
  pthread_mutex_destroy(&pLog->mutex);
  free(pLog->zPath);
  free(pLog);
}

/* Open the file, then either share an already-open log of the same inode
** or attach this one. Returns WALDIO_CONVERTED to ask for a retry. */
static int open_once(log_registry *r, waldio_log *pLog, const log_request *req,
                     waldio_log **ppLog){
  struct stat st;
  waldio_log *p;
  int created = 0, rc;

  rc = dio_open(&pLog->file, pLog->sys, pLog->zPath, req->opts->io, req->mode,
                &created);
  if( rc ) return rc;
  if( created ) apply_owner(pLog, req);
  if( pLog->sys->xFstat(pLog->file.fd, &st) ){
    return waldio_errno(SQLITE_CANTOPEN, errno, "cannot stat log", pLog->zPath);
  }
  for(p=r->pList; p; p=p->pNext){
    if( p->dev==st.st_dev && p->ino==st.st_ino && !log_inherited(p) ){
      p->nRef++;
      *ppLog = p;
      return SQLITE_OK;
    }
  }
  pLog->dev = st.st_dev;
  pLog->ino = st.st_ino;
  rc = attach_locked(pLog, req);
  if( rc ) return rc;
  pLog->nRef = 1;
  pLog->pNext = r->pList;
  r->pList = pLog;
  *ppLog = pLog;
  return SQLITE_OK;
}

int log_acquire(log_registry *r, const waldio_syscalls *sys, const char *zPath,
                const log_request *req, waldio_log **ppLog){
  int attempt, rc = SQLITE_OK;
  *ppLog = 0;
  pthread_mutex_lock(&r->mutex);
  for(attempt=0; attempt<8; attempt++){
    waldio_log *pLog = log_new(sys, zPath, req);
    if( !pLog ){ rc = SQLITE_NOMEM; break; }
    rc = open_once(r, pLog, req, ppLog);
    if( *ppLog!=pLog ) log_free(pLog);   /* shared an open log, or failed */
    if( rc!=WALDIO_CONVERTED ) break;
    *ppLog = 0;
  }
  pthread_mutex_unlock(&r->mutex);
  if( rc==WALDIO_CONVERTED ){
    rc = waldio_error(SQLITE_BUSY, "%s: the log kept being replaced (by"
                      " conversions in other processes) while it was being"
                      " opened", zPath);
  }
  return rc;
}

/* ------------------------------------------------------- the last close */

/* L8. SQLite (sqlite3WalClose) checkpoints and empties the log only in a
** close that gets the database lock exclusively, tried once, without the
** busy handler. When the workers of a server stop together, their closes
** overlap: each refused one holds its shared lock through its own close (a
** flush, in async mode: 10-60 ms measured with 8 gunicorn workers) and so
** refuses the next, and often nobody is let in -- the log then keeps its
** frames and its guard, which stock SQLite cannot open. Here one refused
** closer waits for the others instead, but only while every other process
** that has the log open is closing too (none holds ACTIVE): a process that
** is merely using the database makes a close return at once, as before.
** The other refused closers give up at once (they cannot get CLOSER), so
** that no two wait for each other's shared lock. The kernel releases the
** locks of a process that dies, so a killed closer is not waited for;
** one that is stopped is waited for CLOSE_WAIT_MS at most. */
#define CLOSE_WAIT_MS 2000

int log_last_close_lock(log_registry *r, waldio_log *pLog,
                        int (*xTry)(void*), void *pArg){
  const waldio_syscalls *sys = pLog->sys;
  int fd = pLog->file.fd, last, waited, rc = SQLITE_BUSY;
  if( log_inherited(pLog) || pLog->file.readonly ) return SQLITE_BUSY;
  pthread_mutex_lock(&r->mutex);
  last = pLog->nRef==1;          /* else this process's next close is later */
  pthread_mutex_unlock(&r->mutex);
  if( !last ) return SQLITE_BUSY;
  pthread_mutex_lock(&pLog->mutex);
  __atomic_store_n(&pLog->inactive, 1, __ATOMIC_RELAXED);
  log_lock(sys, fd, LOG_LOCK_ACTIVE, LOG_UNLOCKED);
  pthread_mutex_unlock(&pLog->mutex);
  if( log_lock(sys, fd, LOG_LOCK_CLOSER, LOG_EXCLUSIVE) ) return SQLITE_BUSY;
  for(waited=0; waited<CLOSE_WAIT_MS; waited++){
    if( log_lock_held_elsewhere(sys, fd, LOG_LOCK_ACTIVE, LOG_EXCLUSIVE) ) break;
    usleep(1000);
    rc = xTry(pArg);
    if( rc!=SQLITE_BUSY ) break;
  }
  log_lock(sys, fd, LOG_LOCK_CLOSER, LOG_UNLOCKED);
  return rc;
}

void log_reactivate(waldio_log *pLog){
  if( !__atomic_load_n(&pLog->inactive, __ATOMIC_RELAXED) ) return;   /* usual */
  pthread_mutex_lock(&pLog->mutex);
  if( pLog->inactive && !log_inherited(pLog)
   && log_lock(pLog->sys, pLog->file.fd, LOG_LOCK_ACTIVE, LOG_SHARED)==0 ){
    __atomic_store_n(&pLog->inactive, 0, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&pLog->mutex);
}

/* The last close after a clean checkpoint (wal_layout.h xCloseClean), under
** LOG_LOCK_INIT: nobody opens the log meanwhile. */
static int close_clean(waldio_log *pLog, i64 idleKeep){
  int fd = pLog->file.fd, rc;
  if( pLog->file.readonly ) return SQLITE_OK;
  if( log_lock_wait(pLog->sys, fd, LOG_LOCK_INIT, LOG_EXCLUSIVE, INIT_WAIT_MS) ){
    return SQLITE_OK;          /* advisory: the log stays as it is */
  }
  rc = pLog->pLayout->xCloseClean(pLog, idleKeep, log_alone(pLog));
  log_lock(pLog->sys, fd, LOG_LOCK_INIT, LOG_UNLOCKED);
  return rc;
}

void log_close_begins(log_registry *r, waldio_log *pLog){
  int last;
  if( log_inherited(pLog) ) return;
  pthread_mutex_lock(&r->mutex);
  last = pLog->nRef==1;
  pthread_mutex_unlock(&r->mutex);
  if( last ) flusher_stop(pLog);
  if( group_write_all(pLog)==SQLITE_OK ) log_sync_bound(pLog);
}

int log_release(log_registry *r, waldio_log *pLog, i64 idleKeep){
  waldio_log **pp;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&r->mutex);
  if( --pLog->nRef>0 ){
    pthread_mutex_unlock(&r->mutex);
    return SQLITE_OK;
  }
  for(pp=&r->pList; *pp; pp=&(*pp)->pNext){
    if( *pp==pLog ){ *pp = pLog->pNext; break; }
  }
  pthread_mutex_unlock(&r->mutex);
  if( log_inherited(pLog) ){
    /* L6: the parent's object. Its mutexes may have been copied locked and
    ** its flusher thread does not exist here: close the descriptor (the
    ** parent's open file and locks live on) and free the memory only. */
    dio_close(&pLog->file);
    flush_side_close(&pLog->side, pLog->sys);
    free(pLog->aLastBlock);
    dio_free(pLog->group.aBuf);
    dio_free(pLog->group.aFlight);
    frame_cache_free(&pLog->cache);
    free(pLog->zPath);
    free(pLog);
    return SQLITE_OK;
  }
  flusher_stop(pLog);
  rc = group_write_all(pLog);        /* G4: nothing buffered outlives the log */
  if( rc==SQLITE_OK ) rc = log_sync_bound(pLog);   /* the flush bound holds at close */
  if( rc==SQLITE_OK && idleKeep>=0 ) rc = close_clean(pLog, idleKeep);
  log_free(pLog);
  return rc;
}
