/*
** wal_log.c — one physical waldio log shared by the connections of this
** process (see wal_log.h for the invariants L1-L4).
**
** Opening (log_acquire). Under flock(LOCK_EX) on the log, so two processes
** never initialize or convert the same file at once, block 0 decides:
**   - empty or unrecognized file      -> format fresh: zero-fill the initial
**                                        preallocation, write the superblock,
**                                        fdatasync, fsync the directory;
**   - waldio superblock                -> use it;
**   - standard SQLite WAL header       -> wal_convert.c re-lays the committed
**                                        frames into a new file and renames
**                                        it over the old one; reopen;
**   - guard header, broken superblock  -> refuse (fail closed: the log may
**                                        hold committed transactions).
**
** Growth. When a frame would land beyond physSize the writer (there is one
** writer per database at a time: SQLite's WAL write lock) extends the file
** by max(initial preallocation, 1/4 of its size), rounded up to 1 MiB,
** zero-fills the new range and fdatasyncs it before the frame is written:
** the extension is journaled once, the commits that use it never are.
**
** Cache trust (L3). The cache holds slots this process wrote. Another
** process can overwrite a slot only by committing (or restarting the log),
** and every commit changes SQLite's wal-index header. So the log records
** the header as an "epoch" whenever this process writes (log_begin_write)
** or publishes its own commit (log_publish, from xShmBarrier), and a cached
** slot is served only while the header still equals the epoch. A false
** mismatch (say, another connection's publication in progress) only costs
** a disk read. Without a wal-index (heap-memory mode) no other process can
** open the database, so the cache is always trusted. The same mismatch also
** re-reads the physical size, which another process may have changed.
*/
#include "wal_log.h"
#include "errors.h"
#include "log_flusher.h"
#include "options.h"
#include "stock_guard.h"
#include "sqlite_api.h"
#include "wal_convert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define GROW_ROUND (1LL << 20)
#define NEEDS_EXCLUSIVE 0x57455843   /* not an SQLite code: "retry under LOCK_EX" */
#define LOCK_WAIT_MS 5000

static i64 round_up64(i64 x, i64 unit){ return (x + unit - 1) / unit * unit; }

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

/* ---------------------------------------------------------------- block 0 */

/* Read block 0's metadata from disk. */
static int read_meta(waldio_log *pLog, u8 *aMeta, size_t *pGot){
  u32 n = pLog->file.block;
  u8 *buf = dio_alloc(&pLog->file, n);
  int rc;
  if( !buf ) return SQLITE_NOMEM;
  rc = dio_read(&pLog->file, buf, n, 0, pGot);
  if( rc==SQLITE_OK ){
    memcpy(aMeta, buf, WALDIO_META_BYTES);
    if( *pGot>WALDIO_META_BYTES ) *pGot = WALDIO_META_BYTES;
  }
  dio_free(buf);
  return rc;
}

/* How write_meta writes block 0. */
#define META_DSYNC    0x1   /* O_DSYNC write (persistent mode) */
#define META_ARM      0x2   /* arm the normal-mode flush timer */
#define META_ADVISORY 0x4   /* nothing SQLite relies on: needs no flush */

/* Write block 0 from sb (mutex not held). */
static int write_meta(waldio_log *pLog, const wal_superblock *sb, int flags){
  u32 n = pLog->file.block;
  u8 *buf = dio_alloc(&pLog->file, n);
  int rc;
  if( !buf ) return SQLITE_NOMEM;
  wf_encode_block0(sb, buf);
  rc = dio_write(&pLog->file, buf, n, 0, flags & META_DSYNC);
  dio_free(buf);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    pLog->stats.block0_writes++;
    pLog->stats.log_writes++;
    pLog->stats.bytes_written += n;
    if( flags & META_DSYNC ){
      pLog->stats.dsync_writes++;
    }else if( !(flags & META_ADVISORY) ){
      pLog->writeSeq++;
      if( flags & META_ARM ) flusher_arm(pLog);
    }
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

/* Adopt new metadata; resize the cache when the slot size changes.
** Mutex held. */
static void adopt_meta(waldio_log *pLog, const wal_superblock *sb){
  if( sb->geo.slot!=pLog->sb.geo.slot || pLog->cache.nSlot==0 ){
    frame_cache_init(&pLog->cache, pLog->cacheBudget, sb->geo.slot,
                     pLog->file.memAlign > 4096 ? pLog->file.memAlign : 4096);
  }
  pLog->sb = *sb;
}

/* ------------------------------------------------------- opening a file */

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
  prealloc = round_up64(o->prealloc_bytes, pLog->file.block);
  if( prealloc<(i64)sb.geo.area + 8*(i64)pLog->file.block ){
    prealloc = sb.geo.area + 8*(i64)pLog->file.block;
  }
  rc = dio_zero_fill(&pLog->file, 0, prealloc);
  if( rc==SQLITE_OK ) rc = write_meta(pLog, &sb, META_ADVISORY);
  if( rc==SQLITE_OK ) rc = dio_fdatasync(&pLog->file);
  if( rc==SQLITE_OK && created ) rc = dio_sync_dir(pLog->sys, pLog->zPath);
  if( rc ) return rc;
  pLog->physSize = prealloc;
  pLog->stats.prealloc_bytes += (u64)prealloc;
  adopt_meta(pLog, &sb);
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
  return write_meta(pLog, sb, META_ADVISORY);
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
      rc = write_meta(pLog, sb, META_ADVISORY);
    }
  }
  pLog->physSize = size / sb->geo.block * sb->geo.block;
  adopt_meta(pLog, sb);
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
    rc = read_meta(pLog, aMeta, &got);
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
    adopt_meta(pLog, &sb);
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

wal_geometry log_geometry(waldio_log *pLog){
  wal_geometry g;
  pthread_mutex_lock(&pLog->mutex);
  g = pLog->sb.geo;
  pthread_mutex_unlock(&pLog->mutex);
  return g;
}

int log_is_readonly(waldio_log *pLog){ return pLog->file.readonly; }

int log_holds_generation(waldio_log *pLog){
  int has;
  pthread_mutex_lock(&pLog->mutex);
  has = (pLog->sb.flags & SB_FLAG_HAS_HEADER)!=0;
  pthread_mutex_unlock(&pLog->mutex);
  return has;
}

/* ------------------------------------------------------------- the cache */

static int epoch_matches(const waldio_log *pLog, const volatile void *shm0){
  if( !shm0 ) return 1;
  return pLog->epochValid
      && memcmp((const void*)shm0, pLog->aEpoch, WALINDEX_HDR_BYTES)==0;
}

static void drop_cache(waldio_log *pLog){
  if( pLog->cache.nSlot ){
    frame_cache_clear(&pLog->cache);
    pLog->stats.cache_invalidations++;
  }
}

static int poisoned_error(waldio_log *pLog){
  return waldio_error(SQLITE_IOERR, "%s: an earlier write or flush of this log"
      " failed; nothing more is read or written until every connection closes"
      " it", pLog->zPath);
}

int log_begin_write(waldio_log *pLog, const volatile void *shm0){
  int changed = 0;
  i64 size;
  pthread_mutex_lock(&pLog->mutex);
  if( pLog->poisoned ){
    pthread_mutex_unlock(&pLog->mutex);
    return poisoned_error(pLog);
  }
  if( !epoch_matches(pLog, shm0) ){
    drop_cache(pLog);
    memcpy(pLog->aEpoch, (const void*)shm0, WALINDEX_HDR_BYTES);
    pLog->epochValid = 1;
    changed = 1;
  }
  pthread_mutex_unlock(&pLog->mutex);
  if( changed && dio_file_size(&pLog->file, &size)==SQLITE_OK ){
    pthread_mutex_lock(&pLog->mutex);
    pLog->physSize = size / pLog->file.block * pLog->file.block;
    pthread_mutex_unlock(&pLog->mutex);
  }
  return SQLITE_OK;
}

void log_publish(waldio_log *pLog, const volatile void *aHdr){
  pthread_mutex_lock(&pLog->mutex);
  memcpy(pLog->aEpoch, (const void*)aHdr, WALINDEX_HDR_BYTES);
  pLog->epochValid = 1;
  pthread_mutex_unlock(&pLog->mutex);
}

int log_read_slot(waldio_log *pLog, u32 frame, const volatile void *shm0,
                  u8 *out, size_t *pGot){
  const u8 *p;
  wal_geometry g;
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  g = pLog->sb.geo;
  if( pLog->poisoned ){
    pthread_mutex_unlock(&pLog->mutex);
    return poisoned_error(pLog);
  }
  if( group_lookup(pLog, frame, out) ){       /* written by a commit, buffered */
    pLog->stats.cache_hits++;
    pthread_mutex_unlock(&pLog->mutex);
    *pGot = g.slot;
    return SQLITE_OK;
  }
  if( !epoch_matches(pLog, shm0) ) drop_cache(pLog);
  p = frame_cache_get(&pLog->cache, frame);
  if( p ){
    memcpy(out, p, g.slot);
    pLog->stats.cache_hits++;
    pthread_mutex_unlock(&pLog->mutex);
    *pGot = g.slot;
    return SQLITE_OK;
  }
  pLog->stats.cache_misses++;
  pthread_mutex_unlock(&pLog->mutex);
  rc = dio_read(&pLog->file, out, g.slot, wf_slot_offset(&g, frame), pGot);
  pthread_mutex_lock(&pLog->mutex);
  pLog->stats.disk_reads++;
  pLog->stats.bytes_read += *pGot;
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

/* ------------------------------------------------------------ the writes */

/* Make sure [0, end) is preallocated (L1). Only the database's single
** writer grows the log, so no two extensions race. */
static int ensure_allocated(waldio_log *pLog, i64 end){
  i64 have, size, target, grow;
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  have = pLog->physSize;
  pthread_mutex_unlock(&pLog->mutex);
  if( end<=have ) return SQLITE_OK;
  rc = dio_file_size(&pLog->file, &size);
  if( rc ) return rc;
  size = size / pLog->file.block * pLog->file.block;
  if( end<=size ){
    have = size;
  }else{
    grow = have / 4;
    if( grow<pLog->preallocInitial ) grow = pLog->preallocInitial;
    target = round_up64(have + grow, GROW_ROUND);
    if( target<end ) target = round_up64(end, GROW_ROUND);
    rc = dio_zero_fill(&pLog->file, have, target - have);
    if( rc==SQLITE_OK ) rc = dio_fdatasync(&pLog->file);
    if( rc ) return rc;
    pthread_mutex_lock(&pLog->mutex);
    pLog->stats.prealloc_extends++;
    pLog->stats.prealloc_bytes += (u64)(target - have);
    pthread_mutex_unlock(&pLog->mutex);
    have = target;
  }
  pthread_mutex_lock(&pLog->mutex);
  if( have>pLog->physSize ) pLog->physSize = have;
  pthread_mutex_unlock(&pLog->mutex);
  return SQLITE_OK;
}

static void count_write(waldio_stats *s, int kind){
  switch( kind ){
    case LOG_WRITE_FRAME:  s->frames_written++;  break;
    case LOG_WRITE_PAGE:   s->page_overwrites++; break;
    case LOG_WRITE_HEADER: s->header_rewrites++; break;
    default:               s->other_writes++;    break;
  }
}

int log_write_slots(waldio_log *pLog, u32 frame, u32 nSlot, const u8 *img,
                    u32 lo, u32 hi, int kind, int dsync, int armFlush){
  wal_geometry g = log_geometry(pLog);
  i64 off = wf_slot_offset(&g, frame);
  u32 i;
  int rc = ensure_allocated(pLog, off + (i64)nSlot * g.slot);
  if( rc==SQLITE_OK ) rc = dio_write(&pLog->file, img + lo, hi - lo, off + lo, dsync);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    for(i=0; i<nSlot; i++){
      frame_cache_put(&pLog->cache, frame + i, img + (size_t)i * g.slot);
      count_write(&pLog->stats, kind);
    }
    pLog->stats.log_writes++;
    pLog->stats.bytes_written += hi - lo;
    if( dsync ){
      pLog->stats.dsync_writes++;
    }else{
      pLog->writeSeq++;
      if( armFlush ) flusher_arm(pLog);
    }
  }else{
    /* The slots' content on disk is unknown now: never serve them cached. */
    drop_cache(pLog);
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

int log_write_header(waldio_log *pLog, const u8 *aSqliteHdr, int dsync,
                     int armFlush){
  wal_superblock sb;
  u32 version, page;
  const char *zWhy;
  if( !wf_parse_sqlite_header(aSqliteHdr, &version, &page)
   || version!=WAL_FORMAT_VERSION ){
    return waldio_error(SQLITE_IOERR_WRITE, "%s: SQLite wrote a WAL header"
                        " waldio does not understand", pLog->zPath);
  }
  pthread_mutex_lock(&pLog->mutex);
  sb = pLog->sb;
  pthread_mutex_unlock(&pLog->mutex);
  if( sb.geo.page!=page ){
    zWhy = wf_geometry(&sb.geo, sb.geo.layout, sb.geo.block, page);
    if( zWhy ){
      return waldio_error(SQLITE_IOERR_WRITE, "%s: page size %u cannot be"
          " stored with the %s layout on blocks of %u bytes: %s. Use a page"
          " size of at least %u, or waldio_layout=pad4k", pLog->zPath, page,
          waldio_layout_name((int)sb.geo.layout), sb.geo.block, zWhy,
          sb.geo.block);
    }
  }
  sb.flags |= SB_FLAG_HAS_HEADER;
  memcpy(sb.sqlite_hdr, aSqliteHdr, WAL_HDR_BYTES);
  pthread_mutex_lock(&pLog->mutex);
  adopt_meta(pLog, &sb);
  frame_cache_clear(&pLog->cache);      /* a new generation begins */
  pthread_mutex_unlock(&pLog->mutex);
  return write_meta(pLog, &sb, (dsync ? META_DSYNC : 0) | (armFlush ? META_ARM : 0));
}

/* Re-read block 0 and adopt it (another process may have written it). */
static int refresh_meta(waldio_log *pLog, wal_superblock *pOut){
  u8 aMeta[WALDIO_META_BYTES];
  size_t got = 0;
  int d, rc;
  memset(aMeta, 0, sizeof(aMeta));
  rc = read_meta(pLog, aMeta, &got);
  if( rc ) return rc;
  d = wf_decode_block0(aMeta, pOut);
  if( d==0 && got==0 ){
    pthread_mutex_lock(&pLog->mutex);
    *pOut = pLog->sb;                   /* read-only log of an empty file */
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  if( d<=0 || pOut->format!=WALDIO_FORMAT ){
    return waldio_error(SQLITE_CORRUPT, "%s: block 0 no longer holds a waldio"
        " superblock: was the log written by SQLite without waldio while this"
        " connection had it open?", pLog->zPath);
  }
  pthread_mutex_lock(&pLog->mutex);
  adopt_meta(pLog, pOut);
  pthread_mutex_unlock(&pLog->mutex);
  return SQLITE_OK;
}

int log_read_sqlite_header(waldio_log *pLog, u8 *aOut, int *pHas){
  wal_superblock sb;
  int rc = refresh_meta(pLog, &sb);
  if( rc ) return rc;
  *pHas = (sb.flags & SB_FLAG_HAS_HEADER)!=0;
  if( *pHas ) memcpy(aOut, sb.sqlite_hdr, WAL_HDR_BYTES);
  return SQLITE_OK;
}

int log_logical_size(waldio_log *pLog, i64 *pSize){
  wal_superblock sb;
  i64 phys;
  int rc = refresh_meta(pLog, &sb);
  if( rc==SQLITE_OK ) rc = dio_file_size(&pLog->file, &phys);
  if( rc ) return rc;
  *pSize = wf_logical_size(&sb.geo, phys, (sb.flags & SB_FLAG_HAS_HEADER)!=0);
  return SQLITE_OK;
}

int log_set_empty(waldio_log *pLog, int keepGuard){
  wal_superblock sb;
  pthread_mutex_lock(&pLog->mutex);
  sb = pLog->sb;
  sb.flags &= ~SB_FLAG_HAS_HEADER;
  if( !keepGuard ) sb.flags &= ~SB_FLAG_GUARD;
  memset(sb.sqlite_hdr, 0, sizeof(sb.sqlite_hdr));
  adopt_meta(pLog, &sb);
  frame_cache_clear(&pLog->cache);
  pLog->stats.logical_truncates++;
  pthread_mutex_unlock(&pLog->mutex);
  /* Advisory: if it is lost in a crash, recovery replays frames that are
  ** already in the database, which changes nothing. */
  return write_meta(pLog, &sb, META_ADVISORY);
}

int log_truncate(waldio_log *pLog, i64 size){
  wal_geometry g = log_geometry(pLog);
  i64 keep, phys;
  int rc = SQLITE_OK;
  if( size<WAL_HDR_BYTES ) rc = log_set_empty(pLog, 1);
  if( rc ) return rc;
  /* Give back space beyond both the requested size and the configured
  ** preallocation; the preallocation itself is never returned. */
  keep = wf_physical_for_logical(&g, size);
  if( keep<pLog->preallocInitial ) keep = pLog->preallocInitial;
  keep = round_up64(keep, g.block);
  rc = dio_file_size(&pLog->file, &phys);
  if( rc==SQLITE_OK && phys>keep ){
    rc = dio_truncate(&pLog->file, keep);
    if( rc==SQLITE_OK ){
      pthread_mutex_lock(&pLog->mutex);
      pLog->physSize = keep;
      pthread_mutex_unlock(&pLog->mutex);
    }
  }
  return rc;
}

/* ------------------------------------------------------------ durability */

static int do_sync(waldio_log *pLog, int fromFlusher){
  u64 target;
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  if( pLog->poisoned ){
    pthread_mutex_unlock(&pLog->mutex);
    return poisoned_error(pLog);
  }
  target = pLog->writeSeq;
  if( pLog->flushedSeq>=target ){
    if( !fromFlusher ) pLog->stats.flushes_skipped++;
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  pthread_mutex_unlock(&pLog->mutex);
  rc = dio_fdatasync(&pLog->file);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    if( target>pLog->flushedSeq ) pLog->flushedSeq = target;
    pLog->stats.flushes++;
    if( fromFlusher ) pLog->stats.timer_flushes++;
  }else{
    pLog->poisoned = 1;
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

int log_sync(waldio_log *pLog){ return do_sync(pLog, 0); }
int log_sync_from_flusher(waldio_log *pLog){ return do_sync(pLog, 1); }

/* ------------------------------------------------------------- reporting */

void log_get_stats(waldio_log *pLog, waldio_stats *pOut){
  pthread_mutex_lock(&pLog->mutex);
  *pOut = pLog->stats;
  pthread_mutex_unlock(&pLog->mutex);
}

void log_reset_stats(waldio_log *pLog){
  pthread_mutex_lock(&pLog->mutex);
  memset(&pLog->stats, 0, sizeof(pLog->stats));
  pthread_mutex_unlock(&pLog->mutex);
}

int log_group_mode(waldio_log *pLog){
  int mode;
  pthread_mutex_lock(&pLog->mutex);
  mode = pLog->group.mode;
  pthread_mutex_unlock(&pLog->mutex);
  return mode;
}

int log_set_group(waldio_log *pLog, int mode, long long bytes, int ms){
  int was = log_group_mode(pLog), rc = SQLITE_OK;
  if( mode!=WALDIO_GROUP_OFF && was==WALDIO_GROUP_OFF && !pLog->file.readonly
   && pLog->sys->xFlock(pLog->file.fd, LOCK_EX|LOCK_NB) ){
    return waldio_error(SQLITE_BUSY, "%s: waldio_group=%s needs this process to"
        " be the only one using the database (its group buffer is invisible to"
        " other processes), and another process has it open",
        pLog->zPath, waldio_group_name(mode));
  }
  if( mode==WALDIO_GROUP_OFF && was!=WALDIO_GROUP_OFF ){
    rc = group_write_all(pLog);
    if( rc==SQLITE_OK ) rc = log_sync(pLog);
    if( rc==SQLITE_OK && !pLog->file.readonly ) pLog->sys->xFlock(pLog->file.fd, LOCK_SH);
  }
  if( rc==SQLITE_OK ){
    pthread_mutex_lock(&pLog->mutex);
    pLog->group.mode = mode;
    pLog->group.capBytes = bytes;
    pLog->group.intervalMs = ms;
    pthread_mutex_unlock(&pLog->mutex);
  }
  return rc;
}

void log_set_flush_ms(waldio_log *pLog, int ms){
  pthread_mutex_lock(&pLog->mutex);
  pLog->flushMs = ms;
  pthread_mutex_unlock(&pLog->mutex);
}
