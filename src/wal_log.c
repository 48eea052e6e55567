/*
** wal_log.c — a running waldio log shared by the connections of this
** process (see wal_log.h for the invariants L1-L5; log_open.c opens and
** closes it).
**
** Growth. When a direct write would land beyond durableEnd (L1) the writer
** (there is one writer per database at a time: SQLite's WAL write lock)
** makes the range durable first: bytes already in the file (written through
** the page cache by a large transaction or a NORMAL commit) need only an
** fdatasync; beyond the file's end it zero-fills an extension and
** fdatasyncs it, adding a runway for the direct commits to come that
** doubles at each growth, from 256 KiB up to the configured preallocation.
** The extension is journaled once, the commits that use it never are.
** Buffered writes that may extend the file take growMutex too, so that a
** fill never lands on frames written meanwhile (L7).
**
** Read-ahead. Frames this process did not write, or wrote directly (a
** direct write drops the cached pages it covers), are read from the device
** one slot at a time, in the order SQLite asks for pages: a reader process
** scanning a table after a writer's FULL commits made 1,104 such reads (0.18
** s on a virtio disk; stock SQLite's reader finds its WAL in the page cache).
** Each read first asks the page cache alone (RWF_NOWAIT); after RA_MISSES
** misses within one snapshot, the log asks the kernel to read ahead, in the
** background (POSIX_FADV_WILLNEED), the frames that hold the newest copy of
** their page (read from the wal-index, wal_index.h; at most RA_MAX bytes of
** them): the reads SQLite is about to make, all queued at once instead of
** one after another. Without the wal-index regions, the snapshot's frames
** around the miss (RA_MAX bytes). A point lookup misses too rarely to
** trigger it.
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
#include "log_lock.h"
#include "options.h"
#include "sqlite_api.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GROW_MIN   (256LL << 10)
#define RA_MISSES  8
#define RA_MAX     (32LL << 20)

i64 log_round_up(i64 x, i64 unit){ return (x + unit - 1) / unit * unit; }

/* ---------------------------------------------------------------- block 0 */

/* Read block 0's metadata from disk. */
int log_read_meta(waldio_log *pLog, u8 *aMeta, size_t *pGot){
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

/* Adopt new metadata; resize the cache when the slot size changes.
** Mutex held. */
void log_adopt_meta(waldio_log *pLog, const wal_superblock *sb){
  if( sb->geo.slot!=pLog->sb.geo.slot || pLog->cache.nSlot==0 ){
    frame_cache_init(&pLog->cache, pLog->cacheBudget, sb->geo.slot,
                     pLog->file.memAlign > 4096 ? pLog->file.memAlign : 4096);
  }
  pLog->sb = *sb;
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
  pLog->lastBlockOff = -1;
}

int log_last_block_get(waldio_log *pLog, i64 off, u8 *out){
  int have;
  pthread_mutex_lock(&pLog->mutex);
  have = pLog->aLastBlock && pLog->lastBlockOff==off && off>=0;
  if( have ) memcpy(out, pLog->aLastBlock, pLog->file.block);
  pthread_mutex_unlock(&pLog->mutex);
  return have;
}

void log_last_block_put(waldio_log *pLog, i64 off, const u8 *img){
  pthread_mutex_lock(&pLog->mutex);
  if( off>=0 && !pLog->aLastBlock ){
    pLog->aLastBlock = malloc(pLog->file.block);
  }
  if( off>=0 && pLog->aLastBlock ){
    memcpy(pLog->aLastBlock, img, pLog->file.block);
    pLog->lastBlockOff = off;
  }else{
    pLog->lastBlockOff = -1;
  }
  pthread_mutex_unlock(&pLog->mutex);
}

static int poisoned_error(waldio_log *pLog){
  return waldio_error(SQLITE_IOERR, "%s: an earlier write or flush of this log"
      " failed; nothing more is read or written until every connection closes"
      " it", pLog->zPath);
}

/* mxFrame: bytes 16-19 of SQLite's WalIndexHdr, native order. */
static u32 mxFrame_of(const volatile void *shm0){
  u32 mx;
  memcpy(&mx, (const u8*)shm0 + 16, 4);
  return mx;
}

/* Did the wal-index header move to a new generation (its salts, bytes
** 32-39 of SQLite's WalIndexHdr) since the epoch? Unknown counts as yes. */
static int new_generation(const waldio_log *pLog, const volatile void *shm0){
  return !pLog->epochValid
      || memcmp((const u8*)shm0 + 32, pLog->aEpoch + 32, 8)!=0;
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
    /* Another process restarted the log: it may have shrunk the file and
    ** extended it again through the page cache (L1): read the size again.
    ** Within a generation the file only grows (SQLite and waldio cut it only
    ** when a generation starts, before the first commit of it is published,
    ** or with the database to themselves), and a growth that physSize misses
    ** is found by make_durable, which reads the size before it fills: no
    ** fstat for the commits of other processes in the same generation. */
    if( new_generation(pLog, shm0) ){
      pLog->durableEnd = 0;
      pLog->sizeCuts++;
      changed = 1;
    }else if( mxFrame_of(shm0)!=mxFrame_of(pLog->aEpoch) ){
      pLog->othersSeq = pLog->writeSeq + 1;     /* another process committed */
    }
    memcpy(pLog->aEpoch, (const void*)shm0, WALINDEX_HDR_BYTES);
    pLog->epochValid = 1;
  }
  pthread_mutex_unlock(&pLog->mutex);
  if( changed && dio_file_size(&pLog->file, &size)==SQLITE_OK ){
    pthread_mutex_lock(&pLog->mutex);
    pLog->physSize = size / pLog->file.block * pLog->file.block;
    if( pLog->durableEnd>pLog->physSize ) pLog->durableEnd = pLog->physSize;
    pLog->sizeCuts++;
    pthread_mutex_unlock(&pLog->mutex);
  }
  return SQLITE_OK;
}

int log_others_commit(waldio_log *pLog){
  int recent;
  pthread_mutex_lock(&pLog->mutex);
  recent = pLog->othersSeq!=0
        && pLog->writeSeq + 1 - pLog->othersSeq<LOG_OTHERS_WRITES;
  pthread_mutex_unlock(&pLog->mutex);
  return recent;
}

int log_others_open(waldio_log *pLog){
  return log_lock_held_elsewhere(pLog->sys, pLog->file.fd, LOG_LOCK_USE,
                                 LOG_EXCLUSIVE);
}

void log_publish(waldio_log *pLog, const volatile void *aHdr){
  pthread_mutex_lock(&pLog->mutex);
  memcpy(pLog->aEpoch, (const void*)aHdr, WALINDEX_HDR_BYTES);
  pLog->epochValid = 1;
  if( pLog->flushedSeq>=pLog->writeSeq ){      /* published what is durable */
    memcpy(pLog->aSynced, (const void*)aHdr, WALINDEX_HDR_BYTES);
    pLog->syncedValid = 1;
  }
  pthread_mutex_unlock(&pLog->mutex);
}

/* The end of the snapshot's frames in the file: after mxFrame, or the
** file's extent without a wal-index. Mutex held. */
static i64 snapshot_end(const waldio_log *pLog, const volatile void *shm0,
                        const wal_geometry *g){
  if( !shm0 ) return pLog->physSize;
  return wf_slot_offset(g, mxFrame_of(shm0) + 1);
}

/* Ask for the newest frame of every page of the snapshot, in runs of
** consecutive slots. Returns 0 if the wal-index could not tell. Scratch
** memory from libc, not SQLite: whether a read misses the page cache is the
** kernel's affair, and an SQLite allocation here would make the number of
** allocations of a statement (SQLite's OOM fault loops) vary run to run. */
static int prefetch_newest(waldio_log *pLog, const wal_index_view *pView,
                           const wal_geometry *g, u32 mxFrame){
  int nMax = (int)(RA_MAX / g->slot), n, i, j;
  u32 *aFrame = pView ? malloc((size_t)nMax * sizeof(u32)) : 0;
  if( !aFrame ) return 0;
  n = wal_index_newest_frames(pView, mxFrame, aFrame, nMax);
  for(i=0; i<n; i=j){
    for(j=i+1; j<n && aFrame[j]==aFrame[j-1]+1; j++){}
    dio_prefetch(&pLog->file, wf_slot_offset(g, aFrame[i]),
                 (i64)(j - i) * g->slot);
  }
  free(aFrame);
  return n>0;
}

/* A read at off found its bytes outside the page cache: count it, and
** start a read-ahead when they keep missing (the comment at the top). */
static void missed(waldio_log *pLog, const volatile void *shm0,
                   const wal_index_view *pView, const wal_geometry *g,
                   i64 off){
  u8 aSnap[12];
  i64 lo = 0, hi = 0, end;
  memset(aSnap, 0, sizeof(aSnap));
  if( shm0 ){
    memcpy(aSnap, (const u8*)shm0 + 16, 4);         /* mxFrame */
    memcpy(aSnap + 4, (const u8*)shm0 + 32, 8);     /* salts */
  }
  pthread_mutex_lock(&pLog->mutex);
  pLog->stats.device_reads++;
  if( memcmp(aSnap, pLog->aRaSnap, sizeof(aSnap))!=0 ){
    memcpy(pLog->aRaSnap, aSnap, sizeof(aSnap));    /* a new snapshot */
    pLog->raLo = pLog->raHi = 0;
    pLog->raMisses = 0;
  }
  if( (off<pLog->raLo || off>=pLog->raHi) && ++pLog->raMisses>=RA_MISSES ){
    end = snapshot_end(pLog, shm0, g);
    lo = off - RA_MAX/2;
    if( lo>end - RA_MAX ) lo = end - RA_MAX;
    if( lo<(i64)g->area ) lo = g->area;
    hi = lo + RA_MAX < end ? lo + RA_MAX : end;
    pLog->raLo = lo;
    pLog->raHi = hi;
    pLog->raMisses = 0;
    pLog->stats.readaheads++;
  }
  pthread_mutex_unlock(&pLog->mutex);
  if( hi>lo && (!shm0 || !prefetch_newest(pLog, pView, g, mxFrame_of(shm0))) ){
    dio_prefetch(&pLog->file, lo, hi - lo);
  }
}

int log_read_frame(waldio_log *pLog, u32 frame, u32 lo, u32 hi,
                   const volatile void *shm0, const wal_index_view *pView,
                   u8 *scratch, u8 *out, int *pShort){
  wf_run aRun[3];
  const u8 *p;
  wal_geometry g;
  size_t got = 0;
  i64 off;
  int i, n, rc = SQLITE_OK;
  *pShort = 0;
  pthread_mutex_lock(&pLog->mutex);
  g = pLog->sb.geo;
  if( pLog->poisoned ){
    pthread_mutex_unlock(&pLog->mutex);
    return poisoned_error(pLog);
  }
  if( !epoch_matches(pLog, shm0) ) drop_cache(pLog);
  p = group_lookup(pLog, frame, scratch) ? scratch     /* committed, buffered */
                                         : frame_cache_get(&pLog->cache, frame);
  if( p ){
    wf_slot_to_logical(&g, p, lo, hi, out);
    pLog->stats.cache_hits++;
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  pLog->stats.cache_misses++;
  pLog->stats.disk_reads++;
  pLog->stats.bytes_read += (u64)(hi - lo);
  pthread_mutex_unlock(&pLog->mutex);
  n = wf_frame_runs(&g, lo, hi, aRun);
  for(i=0; i<n && rc==SQLITE_OK && !*pShort; i++){
    u8 *dst = out + (aRun[i].lo - lo);
    if( aRun[i].inSlot<0 ){
      memset(dst, 0, aRun[i].n);        /* the embed tail: logically zero */
      continue;
    }
    off = wf_slot_offset(&g, frame) + aRun[i].inSlot;
    if( dio_read_cached(&pLog->file, dst, aRun[i].n, off) ) continue;
    missed(pLog, shm0, pView, &g, off);
    rc = dio_read(&pLog->file, dst, aRun[i].n, off, &got);
    if( rc==SQLITE_OK && got<aRun[i].n ) *pShort = 1;
  }
  return rc;
}

/* ------------------------------------------------------------ the writes */

/* Where a log of `size` bytes grows to, to hold [0, end): by a runway for
** the direct commits to come that doubles at each growth, from 256 KiB up
** to the configured preallocation, in multiples of 256 KiB (or of the
** preallocation, if smaller). It does not double with the file: a log that
** a large transaction extended through the page cache gets the same runway
** as one that only direct commits grew. growMutex held. */
static i64 grow_target(waldio_log *pLog, i64 size, i64 end){
  i64 runway = pLog->runway ? pLog->runway*2 : GROW_MIN, unit;
  if( runway>pLog->preallocInitial ) runway = pLog->preallocInitial;
  unit = runway<GROW_MIN ? runway : GROW_MIN;
  pLog->runway = runway;
  return (end>size ? end : size) / unit * unit + runway;   /* > end */
}

/* Make [0, end) durable before a direct write lands there (L1), one
** extension at a time (L7): a group flusher and a spilling transaction of
** this process may both get here, and the second must find the first one's
** extension, not fill the same range again over frames written meanwhile.
** Between processes the WAL write lock (or group mode's exclusive use)
** keeps one writer. growMutex held. */
static int make_durable(waldio_log *pLog, i64 end){
  i64 have, size, target;
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  have = pLog->durableEnd;                 /* re-checked under growMutex */
  pthread_mutex_unlock(&pLog->mutex);
  if( end<=have ) return SQLITE_OK;
  rc = dio_file_size(&pLog->file, &size);
  if( rc==SQLITE_OK && size % pLog->file.block ){
    /* Never fill over written bytes: end the file at its last block's end
    ** (that block is allocated; only the size changes, made durable below). */
    size = log_round_up(size, pLog->file.block);
    rc = dio_truncate(&pLog->file, size);
  }
  if( rc ) return rc;
  target = end<=size ? size : grow_target(pLog, size, end);
  rc = dio_zero_fill(&pLog->file, size, target - size,
                     (pLog->pLayout->flags & LAYOUT_PARTIAL_PAGES)!=0);
  if( rc ) return rc;                 /* a full disk: nothing is lost */
  rc = dio_fdatasync(&pLog->file);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    if( target>size ){
      pLog->stats.prealloc_extends++;
      pLog->stats.prealloc_bytes += (u64)(target - size);
    }else{
      pLog->stats.prealloc_syncs++;
    }
    if( target>pLog->physSize ) pLog->physSize = target;
    pLog->durableEnd = target;
  }else{
    pLog->poisoned = 1;     /* L4: buffered frames below may be lost */
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

static int ensure_allocated(waldio_log *pLog, i64 end){
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  rc = end<=pLog->durableEnd;
  pthread_mutex_unlock(&pLog->mutex);
  if( rc ) return SQLITE_OK;
  pthread_mutex_lock(&pLog->growMutex);
  rc = make_durable(pLog, end);
  pthread_mutex_unlock(&pLog->growMutex);
  return rc;
}

/* LOG_PREALLOC: a buffered overwrite needs the range to exist (so that it
** allocates nothing), not to be durable: the flush that will make it
** durable comes after it. Only growth zero-fills, as for direct writes. */
static int ensure_exists(waldio_log *pLog, i64 end){
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  rc = end<=pLog->physSize;
  pthread_mutex_unlock(&pLog->mutex);
  return rc ? SQLITE_OK : ensure_allocated(pLog, end);
}

/* Statistics and flush bookkeeping (L2) of any write. Mutex held. */
static void count_bytes(waldio_log *pLog, u64 bytes, int flags){
  pLog->stats.log_writes++;
  pLog->stats.bytes_written += bytes;
  if( flags & LOG_BUFFERED ){
    pLog->stats.buffered_writes++;
    /* layout_standard.c T2: whole blocks keep the copy of the last one */
    if( !(flags & LOG_WHOLE_BLOCKS) ) pLog->lastBlockOff = -1;
  }
  if( flags & LOG_DSYNC ){
    pLog->stats.dsync_writes++;
  }else{
    pLog->writeSeq++;
    if( flags & LOG_ARM ){
      pLog->armedSeq = pLog->writeSeq;
      flusher_arm(pLog);
    }
  }
}

static void count_write(waldio_stats *s, int kind){
  switch( kind ){
    case LOG_WRITE_FRAME:  s->frames_written++;  break;
    case LOG_WRITE_PAGE:   s->page_overwrites++; break;
    case LOG_WRITE_HEADER: s->header_rewrites++; break;
    default:               s->other_writes++;    break;
  }
}

/* After a write that succeeded: statistics, flush bookkeeping (L2), and
** the cache (C1). Mutex held. */
static void wrote(waldio_log *pLog, u32 frame, u32 nSlot, const u8 *img,
                  u64 bytes, int kind, int flags){
  u32 i, slot = pLog->sb.geo.slot;
  for(i=0; i<nSlot; i++){
    if( (flags & (LOG_BUFFERED|LOG_WHOLE_BLOCKS))==LOG_BUFFERED ){
      frame_cache_forget(&pLog->cache, frame + i);
    }else{
      frame_cache_put(&pLog->cache, frame + i, img + (size_t)i * slot);
    }
    count_write(&pLog->stats, kind);
  }
  count_bytes(pLog, bytes, flags);
}

/* A buffered write may extend the file (a large transaction appends as
** stock SQLite does: no zero-fill, whose bytes it would double). */
static void note_extent(waldio_log *pLog, i64 end){
  i64 blockEnd = end / pLog->file.block * pLog->file.block;
  if( blockEnd>pLog->physSize ) pLog->physSize = blockEnd;
}

/* A buffered write ending beyond durableEnd holds growMutex (L7): a fill
** by another thread of this process must not land on it. Returns whether
** it took the mutex. */
static int hold_growth(waldio_log *pLog, i64 end){
  int beyond;
  pthread_mutex_lock(&pLog->mutex);
  beyond = end>pLog->durableEnd;
  pthread_mutex_unlock(&pLog->mutex);
  if( beyond ) pthread_mutex_lock(&pLog->growMutex);
  return beyond;
}

int log_write_slots(waldio_log *pLog, u32 frame, u32 nSlot, const u8 *img,
                    u32 lo, u32 hi, int kind, int flags){
  wal_geometry g = log_geometry(pLog);
  i64 off = wf_slot_offset(&g, frame);
  int buffered = (flags & LOG_BUFFERED)!=0 || !pLog->file.direct;
  i64 end = off + (i64)nSlot * g.slot;
  int rc = !buffered ? ensure_allocated(pLog, end)
         : (flags & LOG_PREALLOC) ? ensure_exists(pLog, end) : SQLITE_OK;
  int held = rc==SQLITE_OK && buffered && hold_growth(pLog, off + hi);
  int dioFlags = ((flags & LOG_DSYNC) ? DIO_DSYNC : 0)
               | ((flags & LOG_BUFFERED) ? DIO_BUFFERED : 0);
  if( rc==SQLITE_OK && buffered && !(flags & LOG_WHOLE_BLOCKS) ){
    rc = dio_write(&pLog->file, img + lo, hi - lo, off + lo, dioFlags);
  }else if( rc==SQLITE_OK ){
    rc = pLog->pLayout->xWriteDirect(pLog, off + lo, img + lo, hi - lo,
                                     dioFlags);
  }
  if( held ) pthread_mutex_unlock(&pLog->growMutex);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    wrote(pLog, frame, nSlot, img, hi - lo, kind, flags);
    if( buffered ) note_extent(pLog, off + hi);
  }else{
    /* The slots' content on disk is unknown now: never serve them cached. */
    drop_cache(pLog);
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

int log_write_frame(waldio_log *pLog, u32 frame, u32 lo, u32 hi,
                    const u8 *data, int kind, int flags){
  wal_geometry g = log_geometry(pLog);
  i64 off = wf_slot_offset(&g, frame), end = off;
  wf_run aRun[3];
  int i, held, n = wf_frame_runs(&g, lo, hi, aRun), rc = SQLITE_OK;
  for(i=0; i<n; i++){
    if( aRun[i].inSlot>=0 && off + aRun[i].inSlot + aRun[i].n>end ){
      end = off + aRun[i].inSlot + aRun[i].n;
    }
  }
  held = hold_growth(pLog, end);
  for(i=0; i<n && rc==SQLITE_OK; i++){
    if( aRun[i].inSlot<0 ) continue;     /* the embed tail: checked zero */
    rc = dio_write(&pLog->file, data + (aRun[i].lo - lo), aRun[i].n,
                   off + aRun[i].inSlot, DIO_BUFFERED
                   | ((flags & LOG_DSYNC) ? DIO_DSYNC : 0));
  }
  if( held ) pthread_mutex_unlock(&pLog->growMutex);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    wrote(pLog, frame, 1, 0, hi - lo, kind, flags | LOG_BUFFERED);
    note_extent(pLog, end);
  }else{
    drop_cache(pLog);
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

int log_write_bytes(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                    int flags){
  int buffered = (flags & LOG_BUFFERED)!=0 || !pLog->file.direct;
  int rc = dio_write(&pLog->file, buf, n, off,
                     ((flags & LOG_DSYNC) ? DIO_DSYNC : 0)
                     | (buffered ? DIO_BUFFERED : 0));
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    count_bytes(pLog, n, flags);
    pLog->lastBlockOff = -1;
    if( buffered ) note_extent(pLog, off + (i64)n);
  }else{
    drop_cache(pLog);
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

/* ------------------------------------------- what the layout decides */

int log_write_header(waldio_log *pLog, const u8 *aSqliteHdr, int flags){
  return pLog->pLayout->xWriteHeader(pLog, aSqliteHdr, flags);
}

int log_frame_geometry(waldio_log *pLog, wal_geometry *g){
  u8 aHdr[WAL_HDR_BYTES];
  int has = 0, rc = SQLITE_OK;
  *g = log_geometry(pLog);
  if( g->page==0 ){
    rc = pLog->pLayout->xReadHeader(pLog, aHdr, &has);
    if( rc==SQLITE_OK ) *g = log_geometry(pLog);
  }
  return rc;
}

int log_read_sqlite_header(waldio_log *pLog, u8 *aOut, int *pHas){
  return pLog->pLayout->xReadHeader(pLog, aOut, pHas);
}

int log_logical_size(waldio_log *pLog, i64 *pSize){
  return pLog->pLayout->xLogicalSize(pLog, pSize);
}

int log_truncate(waldio_log *pLog, i64 size, i64 keepAtLeast){
  return pLog->pLayout->xTruncate(pLog, size, keepAtLeast);
}

/* Cut the file to `keep` bytes if it is longer. growMutex held (L7). */
int log_cut_locked(waldio_log *pLog, i64 phys, i64 keep){
  int rc = SQLITE_OK;
  if( phys>keep ){
    rc = dio_truncate(&pLog->file, keep);
    if( rc==SQLITE_OK ){
      pthread_mutex_lock(&pLog->mutex);
      pLog->physSize = keep;
      if( pLog->durableEnd>keep ) pLog->durableEnd = keep;
      pLog->sizeCuts++;
      pthread_mutex_unlock(&pLog->mutex);
    }
  }
  return rc;
}

int log_truncate_physical(waldio_log *pLog, i64 keep){
  i64 phys;
  int rc;
  pthread_mutex_lock(&pLog->growMutex);
  rc = dio_file_size(&pLog->file, &phys);
  if( rc==SQLITE_OK ) rc = log_cut_locked(pLog, phys, keep);
  pthread_mutex_unlock(&pLog->growMutex);
  return rc;
}

/* ------------------------------------------------------------ durability */

/* May a sync be skipped? Only when every write of this process is flushed
** AND no other process has published anything since this process's last
** flush (or own durable publication): a checkpoint in a process that wrote
** nothing must still flush the frames another process left in the page
** cache before it copies them (SQLite's sync before backfill). Mutex held. */
static int nothing_to_flush(const waldio_log *pLog, const volatile void *shm0){
  if( pLog->flushedSeq<pLog->writeSeq ) return 0;
  return !shm0 || (pLog->syncedValid
                   && memcmp((const void*)shm0, pLog->aSynced, WALINDEX_HDR_BYTES)==0);
}

/* Who asks for a flush, which decides when it may be skipped. */
enum { SYNC_SQLITE, SYNC_FLUSHER, SYNC_FORCED };

static int do_sync(waldio_log *pLog, const volatile void *shm0, int who,
                   int *pFlushed){
  u8 aHdr[WALINDEX_HDR_BYTES];
  u64 target;
  i64 size;
  u32 cuts;
  int rc, skip;
  if( pFlushed ) *pFlushed = 0;
  pthread_mutex_lock(&pLog->mutex);
  if( pLog->poisoned ){
    pthread_mutex_unlock(&pLog->mutex);
    return poisoned_error(pLog);
  }
  target = pLog->writeSeq;
  /* The flusher owes a flush only to commits written since the last one
  ** (armedSeq): a checkpoint's sync may have covered them, and what came
  ** after (the next transaction's spills) would be written back early, and
  ** again when SQLite overwrites it. A forced flush (a shared group flush,
  ** flush_region.c) covers other processes' writes: never skipped. */
  skip = who==SYNC_FLUSHER ? pLog->flushedSeq>=pLog->armedSeq
       : who==SYNC_SQLITE ? nothing_to_flush(pLog, shm0) : 0;
  if( skip ){
    if( who==SYNC_SQLITE ) pLog->stats.flushes_skipped++;
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  if( shm0 ) memcpy(aHdr, (const void*)shm0, WALINDEX_HDR_BYTES);
  size = pLog->physSize;
  cuts = pLog->sizeCuts;
  pthread_mutex_unlock(&pLog->mutex);
  rc = dio_fdatasync(&pLog->file);
  pthread_mutex_lock(&pLog->mutex);
  if( rc==SQLITE_OK ){
    if( target>pLog->flushedSeq ) pLog->flushedSeq = target;
    /* L1: as make_durable's own flush. A generation's first direct commit
    ** then needs no flush of its own after SQLite's sync of the header:
    ** stock's two flushes, where it made three (issue 27). */
    if( size>pLog->durableEnd && cuts==pLog->sizeCuts ) pLog->durableEnd = size;
    if( shm0 ){
      memcpy(pLog->aSynced, aHdr, WALINDEX_HDR_BYTES);  /* all it published */
      pLog->syncedValid = 1;
    }
    pLog->stats.flushes++;
    if( who==SYNC_FLUSHER ) pLog->stats.timer_flushes++;
    if( pFlushed ) *pFlushed = 1;
  }else{
    pLog->poisoned = 1;
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

u64 log_write_seq(waldio_log *pLog){
  u64 seq;
  pthread_mutex_lock(&pLog->mutex);
  seq = pLog->writeSeq;
  pthread_mutex_unlock(&pLog->mutex);
  return seq;
}

void log_note_flushed(waldio_log *pLog, u64 seq){
  pthread_mutex_lock(&pLog->mutex);
  if( seq>pLog->flushedSeq ) pLog->flushedSeq = seq;
  pthread_mutex_unlock(&pLog->mutex);
}

int log_own_writes_flushed(waldio_log *pLog){
  int flushed;
  pthread_mutex_lock(&pLog->mutex);
  flushed = !pLog->poisoned && pLog->flushedSeq>=pLog->writeSeq;
  pthread_mutex_unlock(&pLog->mutex);
  return flushed;
}

int log_nothing_to_flush(waldio_log *pLog, const volatile void *shm0){
  int none;
  pthread_mutex_lock(&pLog->mutex);
  none = !pLog->poisoned && nothing_to_flush(pLog, shm0);
  pthread_mutex_unlock(&pLog->mutex);
  return none;
}

int log_sync(waldio_log *pLog){ return do_sync(pLog, 0, SYNC_SQLITE, 0); }

int log_sync_bound(waldio_log *pLog){
  int owed;
  pthread_mutex_lock(&pLog->mutex);
  owed = pLog->flushedSeq<pLog->armedSeq;
  pthread_mutex_unlock(&pLog->mutex);
  return owed ? log_sync(pLog) : SQLITE_OK;
}
int log_sync_published(waldio_log *pLog, const volatile void *shm0){
  return do_sync(pLog, shm0, SYNC_SQLITE, 0);
}
int log_sync_published_ex(waldio_log *pLog, const volatile void *shm0,
                          int *pFlushed){
  return do_sync(pLog, shm0, SYNC_SQLITE, pFlushed);
}
int log_sync_from_flusher(waldio_log *pLog){
  return do_sync(pLog, 0, SYNC_FLUSHER, 0);
}
int log_flush_now(waldio_log *pLog){ return do_sync(pLog, 0, SYNC_FORCED, 0); }

/* ------------------------------------------------------------- reporting */

void log_get_stats(waldio_log *pLog, waldio_stats *pOut){
  pthread_mutex_lock(&pLog->mutex);
  *pOut = pLog->stats;
  pthread_mutex_unlock(&pLog->mutex);
}

void log_count_group(waldio_log *pLog, int what){
  pthread_mutex_lock(&pLog->mutex);
  switch( what ){
    case LOG_GROUP_COMMIT: pLog->stats.group_commits++; break;
    case LOG_GROUP_WRITE:  pLog->stats.group_writes++;  break;
    case LOG_GROUP_EARLY_RELEASE: pLog->stats.early_releases++; break;
    case LOG_GROUP_SHARER_COUNT:  pLog->stats.sharer_counts++;  break;
    case LOG_GROUP_ALONE:  pLog->stats.alone_flushes++; break;
    default:               pLog->stats.group_waits++;   break;
  }
  pthread_mutex_unlock(&pLog->mutex);
}

void log_reset_stats(waldio_log *pLog){
  pthread_mutex_lock(&pLog->mutex);
  memset(&pLog->stats, 0, sizeof(pLog->stats));
  pthread_mutex_unlock(&pLog->mutex);
}

void log_set_flush_ms(waldio_log *pLog, int ms){
  pthread_mutex_lock(&pLog->mutex);
  pLog->flushMs = ms;
  pthread_mutex_unlock(&pLog->mutex);
}
