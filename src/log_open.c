/*
** log_open.c — opening and closing a waldio log: the per-process registry
** (one waldio_log per inode), the flock discipline between processes
** (wal_log.h, L5), and what block 0 says the file is.
**
** Block 0 decides (under LOCK_SH; anything that must write block 0 retries
** under LOCK_EX, so two processes never initialize or convert a file at once):
**   - empty or unrecognized file      -> format fresh: zero-fill the initial
**                                        preallocation, write the superblock,
**                                        fdatasync, fsync the directory;
**   - waldio superblock                -> use it (set the guard, or switch
**                                        an empty log to the asked layout);
**   - standard SQLite WAL header       -> wal_convert.c re-lays the committed
**                                        frames into a new file and renames
**                                        it over the old one; reopen;
**   - guard header, broken superblock  -> refuse (fail closed: the log may
**                                        hold committed transactions).
*/
#include "wal_log.h"
#include "errors.h"
#include "log_flusher.h"
#include "sqlite_api.h"
#include "stock_guard.h"
#include "wal_convert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define NEEDS_EXCLUSIVE 0x57455843   /* not an SQLite code: "retry under LOCK_EX" */
#define LOCK_WAIT_MS 5000

void log_registry_init(log_registry *r){
  pthread_mutex_init(&r->mutex, 0);
  r->pList = 0;
}

void log_registry_flush(log_registry *r){
  waldio_log *p;
  pthread_mutex_lock(&r->mutex);
  for(p=r->pList; p; p=p->pNext){
    if( group_write_all(p)==SQLITE_OK ) log_sync(p);
  }
  pthread_mutex_unlock(&r->mutex);
}


static int format_fresh(waldio_log *pLog, const waldio_options *o,
                        int created){
  wal_superblock sb;
  const char *zWhy;
  i64 size, prealloc;
  int rc;

  memset(&sb, 0, sizeof(sb));
  sb.flags = SB_FLAG_GUARD;
  zWhy = wf_geometry(&sb.geo, (u32)o->layout, pLog->file.block, 0);
  if( zWhy ) return waldio_error(SQLITE_CANTOPEN, "%s: %s", pLog->zPath, zWhy);
  rc = dio_file_size(&pLog->file, &size);
  if( rc==SQLITE_OK && size>0 ) rc = dio_truncate(&pLog->file, 0);
  if( rc ) return rc;
  dio_set_nocow(&pLog->file);
  prealloc = log_round_up(o->prealloc_bytes, pLog->file.block);
  if( prealloc<(i64)sb.geo.area + 8*(i64)pLog->file.block ){
    prealloc = sb.geo.area + 8*(i64)pLog->file.block;
  }
  rc = dio_zero_fill(&pLog->file, 0, prealloc);
  if( rc==SQLITE_OK ) rc = log_write_meta(pLog, &sb, META_ADVISORY);
  if( rc==SQLITE_OK ) rc = dio_fdatasync(&pLog->file);
  if( rc==SQLITE_OK && created ) rc = dio_sync_dir(pLog->sys, pLog->zPath);
  if( rc ) return rc;
  pLog->physSize = prealloc;
  pLog->stats.prealloc_bytes += (u64)prealloc;
  log_adopt_meta(pLog, &sb);
  return SQLITE_OK;
}

/* Switch an empty log to the layout this opener asked for. */
static int relayout_empty(waldio_log *pLog, wal_superblock *sb, int layout){
  wal_superblock n;
  const char *zWhy;
  memset(&n, 0, sizeof(n));
  n.flags = SB_FLAG_GUARD;
  zWhy = wf_geometry(&n.geo, (u32)layout, sb->geo.block, sb->geo.page);
  if( zWhy ) return waldio_error(SQLITE_CANTOPEN, "%s: %s", pLog->zPath, zWhy);
  *sb = n;
  return log_write_meta(pLog, sb, META_ADVISORY);
}

static int use_existing(waldio_log *pLog, const waldio_options *o,
                        wal_superblock *sb, i64 size, int canWrite){
  int rc = SQLITE_OK;
  if( sb->format!=WALDIO_FORMAT ){
    return waldio_error(SQLITE_CANTOPEN, "%s: written by a waldio with log"
        " format %u; this libwaldio reads format %u", pLog->zPath, sb->format,
        WALDIO_FORMAT);
  }
  if( pLog->file.direct && sb->geo.block % pLog->file.offAlign ){
    return waldio_error(SQLITE_CANTOPEN, "%s: the log's block size %u is not a"
        " multiple of this device's direct-I/O alignment %u; detach it"
        " (waldio detach) where it was created", pLog->zPath, sb->geo.block,
        pLog->file.offAlign);
  }
  if( !pLog->file.readonly ){
    int relayout = !(sb->flags & SB_FLAG_HAS_HEADER) && sb->geo.layout!=(u32)o->layout;
    int guard = !(sb->flags & SB_FLAG_GUARD);
    if( (relayout || guard) && !canWrite ) return NEEDS_EXCLUSIVE;
    if( relayout ){
      rc = relayout_empty(pLog, sb, o->layout);
    }else if( guard ){
      sb->flags |= SB_FLAG_GUARD;          /* F4: in use from now on */
      rc = log_write_meta(pLog, sb, META_ADVISORY);
    }
  }
  pLog->physSize = size / sb->geo.block * sb->geo.block;
  log_adopt_meta(pLog, sb);
  return rc;
}

/* Inspect block 0 and bring the file into waldio format. Returns SQLITE_OK,
** WALDIO_CONVERTED (reopen: the file was replaced), NEEDS_EXCLUSIVE (a write
** is needed and !canWrite) or an error. canWrite: the caller holds LOCK_EX. */
static int init_file(waldio_log *pLog, const waldio_options *o, int created,
                     int canWrite){
  u8 aMeta[WALDIO_META_BYTES];
  wal_superblock sb;
  size_t got = 0;
  i64 size;
  u32 version = 0, page = 0;
  int rc, d;

  rc = dio_file_size(&pLog->file, &size);
  if( rc ) return rc;
  if( size>0 ){
    memset(aMeta, 0, sizeof(aMeta));
    rc = log_read_meta(pLog, aMeta, &got);
    if( rc ) return rc;
    d = wf_decode_block0(aMeta, &sb);
    if( d>0 ) return use_existing(pLog, o, &sb, size, canWrite);
    if( d<0 ){
      return waldio_error(SQLITE_CORRUPT, "%s: the waldio superblock is damaged;"
          " refusing to open a log that may hold committed transactions."
          " Inspect it with `waldio info`", pLog->zPath);
    }
    if( wf_parse_sqlite_header(aMeta, &version, &page) ){
      if( version==WAL_FORMAT_VERSION ){
        if( pLog->file.readonly ){
          return waldio_error(SQLITE_READONLY, "%s: a standard-format WAL that"
              " this read-only connection cannot convert; open the database"
              " read-write once (or checkpoint it with stock SQLite)",
              pLog->zPath);
        }
        if( !canWrite ) return NEEDS_EXCLUSIVE;
        return wal_convert_standard(pLog->sys, pLog->zPath, &pLog->file, o);
      }
      if( version==WALDIO_GUARD_VERSION ){
        return waldio_error(SQLITE_CORRUPT, "%s: waldio guard header without a"
            " superblock; refusing to open", pLog->zPath);
      }
    }
  }
  if( pLog->file.readonly ){
    memset(&sb, 0, sizeof(sb));
    sb.geo.block = pLog->file.block;
    log_adopt_meta(pLog, &sb);
    return SQLITE_OK;
  }
  /* Empty, or nothing SQLite would recover either: start afresh. */
  if( !canWrite ) return NEEDS_EXCLUSIVE;
  return format_fresh(pLog, o, created || size==0);
}

/* flock with a bounded wait: 0, or the errno that stopped it. */
static int flock_wait(waldio_log *pLog, int op, int ms){
  int waited = 0;
  while( pLog->sys->xFlock(pLog->file.fd, op|LOCK_NB) ){
    if( errno!=EWOULDBLOCK && errno!=EINTR ) return errno;
    if( waited++>=ms ) return EWOULDBLOCK;
    usleep(1000);
  }
  return 0;
}

/* L5: hold LOCK_SH; take LOCK_EX only while block 0 must be written. */
static int init_locked(waldio_log *pLog, const waldio_options *o, int created){
  int rc, err;
  if( pLog->file.readonly ) return init_file(pLog, o, created, 0);
  if( (err = flock_wait(pLog, LOCK_SH, LOCK_WAIT_MS))!=0 ){
    return waldio_error(SQLITE_CANTOPEN, "%s: another process uses this"
        " database with waldio group commit, which needs it alone (%s);"
        " close it there first", pLog->zPath, strerror(err));
  }
  rc = init_file(pLog, o, created, 0);
  if( rc!=NEEDS_EXCLUSIVE ) return rc;
  if( (err = flock_wait(pLog, LOCK_EX, LOCK_WAIT_MS))!=0 ){
    return waldio_error(SQLITE_CANTOPEN, "%s: cannot get exclusive use of the"
        " log to initialize it (%s)", pLog->zPath, strerror(err));
  }
  rc = init_file(pLog, o, created, 1);
  if( rc==SQLITE_OK ) pLog->sys->xFlock(pLog->file.fd, LOCK_SH);
  return rc;
}

static void apply_owner(waldio_log *pLog, mode_t mode, uid_t uid, gid_t gid){
  pLog->sys->xFchmod(pLog->file.fd, mode);
  if( geteuid()==0 ) pLog->sys->xFchown(pLog->file.fd, uid, gid);
}

static waldio_log *log_new(const waldio_syscalls *sys, const char *zPath,
                           const waldio_options *o){
  waldio_log *pLog = calloc(1, sizeof(*pLog));
  if( !pLog ) return 0;
  pLog->zPath = strdup(zPath);
  if( !pLog->zPath ){ free(pLog); return 0; }
  pLog->sys = sys;
  pLog->file.fd = -1;
  pLog->preallocInitial = o->prealloc_bytes;
  pLog->cacheBudget = o->cache_bytes;
  pLog->flushMs = o->flush_ms;
  pthread_mutex_init(&pLog->mutex, 0);
  group_init(&pLog->group);
  pLog->group.capBytes = o->group_bytes;
  pLog->group.intervalMs = o->group_ms;
  return pLog;
}

static void log_free(waldio_log *pLog){
  dio_close(&pLog->file);
  group_free(&pLog->group);
  frame_cache_free(&pLog->cache);
  pthread_mutex_destroy(&pLog->mutex);
  free(pLog->zPath);
  free(pLog);
}

/* Open the file, then either share an already-open log of the same inode
** or initialize this one. Returns WALDIO_CONVERTED to ask for a retry. */
static int open_once(log_registry *r, waldio_log *pLog, const waldio_options *o,
                     const char *zStockShm, mode_t mode, uid_t uid, gid_t gid,
                     waldio_log **ppLog){
  struct stat st;
  waldio_log *p;
  int created = 0, rc;

  rc = dio_open(&pLog->file, pLog->sys, pLog->zPath, o->io, mode, &created);
  if( rc ) return rc;
  if( created ) apply_owner(pLog, mode, uid, gid);
  if( pLog->sys->xFstat(pLog->file.fd, &st) ){
    return waldio_errno(SQLITE_CANTOPEN, errno, "cannot stat log", pLog->zPath);
  }
  for(p=r->pList; p; p=p->pNext){
    if( p->dev==st.st_dev && p->ino==st.st_ino ){
      p->nRef++;
      *ppLog = p;
      return SQLITE_OK;
    }
  }
  pLog->dev = st.st_dev;
  pLog->ino = st.st_ino;
  if( zStockShm && stock_sqlite_active(zStockShm) ){
    return waldio_error(SQLITE_CANTOPEN, "%s: the database is open in SQLite"
        " without waldio (a process holds %s); close it there first: waldio"
        " and stock SQLite cannot share a database at the same time",
        pLog->zPath, zStockShm);
  }
  rc = init_locked(pLog, o, created);
  if( rc ) return rc;
  pLog->nRef = 1;
  pLog->pNext = r->pList;
  r->pList = pLog;
  *ppLog = pLog;
  return SQLITE_OK;
}

int log_acquire(log_registry *r, const waldio_syscalls *sys, const char *zPath,
                const char *zStockShm, const waldio_options *o, mode_t mode,
                uid_t uid, gid_t gid, waldio_log **ppLog){
  int attempt, rc = SQLITE_OK;
  *ppLog = 0;
  pthread_mutex_lock(&r->mutex);
  for(attempt=0; attempt<4; attempt++){
    waldio_log *pLog = log_new(sys, zPath, o);
    if( !pLog ){ rc = SQLITE_NOMEM; break; }
    rc = open_once(r, pLog, o, zStockShm, mode, uid, gid, ppLog);
    if( *ppLog!=pLog ) log_free(pLog);   /* shared an open log, or failed */
    if( rc!=WALDIO_CONVERTED ) break;
    *ppLog = 0;
  }
  pthread_mutex_unlock(&r->mutex);
  if( rc==WALDIO_CONVERTED ){
    rc = waldio_error(SQLITE_CANTOPEN, "%s: the log kept changing while it was"
                      " being opened", zPath);
  }
  return rc;
}

void log_release(log_registry *r, waldio_log *pLog){
  waldio_log **pp;
  pthread_mutex_lock(&r->mutex);
  if( --pLog->nRef>0 ){
    pthread_mutex_unlock(&r->mutex);
    return;
  }
  for(pp=&r->pList; *pp; pp=&(*pp)->pNext){
    if( *pp==pLog ){ *pp = pLog->pNext; break; }
  }
  pthread_mutex_unlock(&r->mutex);
  flusher_stop(pLog);
  group_write_all(pLog);   /* G4: nothing buffered outlives the log */
  log_sync(pLog);          /* keep the flush bound even at close */
  log_free(pLog);
}
