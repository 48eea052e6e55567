/*
** log_superblock.c — block 0 of the slotted layouts (log_superblock.h):
** formatting a fresh log, adopting an existing one, the generation
** SQLite's header starts, logical truncation and the last clean close.
**
** A fresh log holds block 0 only (guard header, superblock, zeros); the
** first direct write preallocates (wal_log.c, L1), so a database whose
** commits all go through the page cache never zero-fills anything. The
** guard (wal_format.c F4) is set by every read-write opener and cleared
** only by the last one, at a clean close: a clear guard seen under
** LOG_LOCK_INIT means no read-write process has the log open.
*/
#include "log_superblock.h"
#include "errors.h"
#include "log_flusher.h"
#include "options.h"
#include "sqlite_api.h"
#include "stock_guard.h"
#include "wal_layout.h"

#include <string.h>

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
      if( flags & META_ARM ){
        pLog->armedSeq = pLog->writeSeq;
        flusher_arm(pLog);
      }
    }
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}


/* ------------------------------------------------------------- opening */

static int is_slotted(int layout){
  const wal_layout *p = wal_layout_find(layout);
  return p && !(p->flags & LAYOUT_NATIVE_SHM);
}

static int format_fresh(waldio_log *pLog, const log_request *req){
  wal_superblock sb;
  const char *zWhy;
  i64 size, area;
  int rc;

  if( !log_alone(pLog) ) return log_in_use_error(pLog, "initialize");
  memset(&sb, 0, sizeof(sb));
  sb.flags = SB_FLAG_GUARD;
  zWhy = wf_geometry(&sb.geo, (u32)req->layout, pLog->file.block, 0);
  if( zWhy ) return waldio_error(SQLITE_CANTOPEN, "%s: %s", pLog->zPath, zWhy);
  rc = dio_file_size(&pLog->file, &size);
  if( rc==SQLITE_OK && size>0 ) rc = dio_truncate(&pLog->file, 0);
  if( rc ) return rc;
  dio_set_nocow(&pLog->file);
  /* Block 0 (the header area) only: the first direct write preallocates
  ** (wal_log.c, L1); a database whose commits all go through the page
  ** cache (large transactions, NORMAL, OFF) never zero-fills anything. */
  area = log_round_up(sb.geo.area, pLog->file.block);
  rc = dio_zero_fill(&pLog->file, 0, area, 0);
  if( rc==SQLITE_OK ) rc = write_meta(pLog, &sb, META_ADVISORY);
  if( rc==SQLITE_OK ) rc = dio_fdatasync(&pLog->file);
  /* Always: a creator killed before its directory fsync leaves a name that
  ** a crash could lose, whoever formats the file afterwards. */
  if( rc==SQLITE_OK ) rc = dio_sync_dir(pLog->sys, pLog->zPath);
  if( rc ) return rc;
  pLog->physSize = pLog->durableEnd = area;
  pLog->zLayoutWhy = req->zLayoutWhy;
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
  return write_meta(pLog, sb, META_ADVISORY);
}

static int use_existing(waldio_log *pLog, const log_request *req,
                        wal_superblock *sb, i64 size){
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
  pLog->zLayoutWhy = req->opts->layout==WALDIO_LAYOUT_AUTO
      ? "an existing log keeps its layout (`waldio convert` changes it)"
      : "the log already has this layout (it holds frames, or another process"
        " has it open)";
  if( !pLog->file.readonly ){
    if( !(sb->flags & SB_FLAG_HAS_HEADER) && sb->geo.layout!=(u32)req->layout
     && req->opts->layout!=WALDIO_LAYOUT_AUTO && is_slotted(req->layout)
     && log_alone(pLog) ){
      rc = relayout_empty(pLog, sb, req->layout);
      pLog->zLayoutWhy = req->zLayoutWhy;
    }else if( !(sb->flags & SB_FLAG_GUARD) ){
      sb->flags |= SB_FLAG_GUARD;          /* F4: in use from now on */
      rc = write_meta(pLog, sb, META_ADVISORY);
    }
    if( sb->geo.layout==(u32)req->layout ) pLog->zLayoutWhy = req->zLayoutWhy;
  }
  pLog->physSize = size / sb->geo.block * sb->geo.block;
  pLog->durableEnd = 0;     /* L1: a killed process may have left bytes unflushed */
  pLog->sizeCuts++;
  log_adopt_meta(pLog, sb);
  return rc;
}


int sb_attach(waldio_log *pLog, const log_request *req,
              const wal_superblock *pFound, i64 size){
  wal_superblock sb;
  if( req->zStockShm && stock_sqlite_active(req->zStockShm) ){
    return waldio_stock_refusal(req->zStockShm);
  }
  if( pFound ){
    sb = *pFound;
    return use_existing(pLog, req, &sb, size);
  }
  if( pLog->file.readonly ){
    memset(&sb, 0, sizeof(sb));
    sb.geo.block = pLog->file.block;
    sb.geo.layout = (u32)req->layout;
    log_adopt_meta(pLog, &sb);
    return SQLITE_OK;
  }
  /* Empty, or nothing SQLite would recover either: start afresh. */
  return format_fresh(pLog, req);
}

/* ------------------------------------------------- a running generation */

int sb_write_header(waldio_log *pLog, const u8 *aSqliteHdr, int flags){
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
  log_adopt_meta(pLog, &sb);
  frame_cache_clear(&pLog->cache);      /* a new generation begins */
  pthread_mutex_unlock(&pLog->mutex);
  return write_meta(pLog, &sb, ((flags & LOG_DSYNC) ? META_DSYNC : 0)
                                   | ((flags & LOG_ARM) ? META_ARM : 0));
}

/* Re-read block 0 and adopt it (another process may have written it). */
static int refresh_meta(waldio_log *pLog, wal_superblock *pOut){
  u8 aMeta[WALDIO_META_BYTES];
  size_t got = 0;
  int d, rc;
  memset(aMeta, 0, sizeof(aMeta));
  rc = log_read_meta(pLog, aMeta, &got);
  if( rc ) return rc;
  d = wf_decode_block0(aMeta, pOut);
  if( d==0 && got==0 ){
    pthread_mutex_lock(&pLog->mutex);
    *pOut = pLog->sb;                   /* read-only log of an empty file */
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  if( d<0 ) return log_damaged_error(pLog->zPath, aMeta);
  if( d==0 || pOut->format!=WALDIO_FORMAT ){
    return waldio_error(SQLITE_CORRUPT, "%s: block 0 no longer holds a waldio"
        " superblock: was the log written by SQLite without waldio while this"
        " connection had it open?", pLog->zPath);
  }
  pthread_mutex_lock(&pLog->mutex);
  log_adopt_meta(pLog, pOut);
  pthread_mutex_unlock(&pLog->mutex);
  return SQLITE_OK;
}


int sb_read_header(waldio_log *pLog, u8 *aOut, int *pHas){
  wal_superblock sb;
  int rc = refresh_meta(pLog, &sb);
  if( rc ) return rc;
  *pHas = (sb.flags & SB_FLAG_HAS_HEADER)!=0;
  if( *pHas ) memcpy(aOut, sb.sqlite_hdr, WAL_HDR_BYTES);
  return SQLITE_OK;
}

int sb_logical_size(waldio_log *pLog, i64 *pSize){
  wal_superblock sb;
  i64 phys;
  int rc = refresh_meta(pLog, &sb);
  if( rc==SQLITE_OK ) rc = dio_file_size(&pLog->file, &phys);
  if( rc ) return rc;
  *pSize = wf_logical_size(&sb.geo, phys, (sb.flags & SB_FLAG_HAS_HEADER)!=0);
  return SQLITE_OK;
}

static int set_empty(waldio_log *pLog, int keepGuard){
  wal_superblock sb;
  pthread_mutex_lock(&pLog->mutex);
  sb = pLog->sb;
  sb.flags &= ~SB_FLAG_HAS_HEADER;
  if( !keepGuard ) sb.flags &= ~SB_FLAG_GUARD;
  memset(sb.sqlite_hdr, 0, sizeof(sb.sqlite_hdr));
  log_adopt_meta(pLog, &sb);
  frame_cache_clear(&pLog->cache);
  pLog->stats.logical_truncates++;
  pthread_mutex_unlock(&pLog->mutex);
  /* Advisory: if it is lost in a crash, recovery replays frames that are
  ** already in the database, which changes nothing. */
  return write_meta(pLog, &sb, META_ADVISORY);
}


int sb_write_direct(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                    int dioFlags){
  return dio_write(&pLog->file, buf, n, off, dioFlags);   /* whole slots (F1) */
}

/* ---------------------------------------------------------- truncation */

/* Cut an empty log (block 0 says: no generation) to `keep` bytes. The
** empty block 0 must be durable before the file shrinks: a crash could
** otherwise keep the shrink and lose the block-0 write, and recovery would
** replay the prefix of a generation that survived the cut -- frames already
** copied into the database, older page images over newer ones. So one
** fdatasync first, and only when there is something to cut. */
static int trim_empty(waldio_log *pLog, i64 keep){
  i64 phys;
  int rc;
  pthread_mutex_lock(&pLog->growMutex);            /* L7 */
  rc = dio_file_size(&pLog->file, &phys);
  if( rc==SQLITE_OK && phys>keep ) rc = dio_fdatasync(&pLog->file);
  if( rc==SQLITE_OK ) rc = log_cut_locked(pLog, phys, keep);
  pthread_mutex_unlock(&pLog->growMutex);
  return rc;
}

/* What to keep of the file: `need` bytes (frames: rounded up to whole
** blocks), or more up to `bound` (a limit: rounded down), and never less
** than the header area. */
static i64 keep_bytes(const wal_geometry *g, i64 need, i64 bound){
  i64 keep = log_round_up(need, g->block);
  i64 limit = bound / g->block * g->block;
  if( keep<limit ) keep = limit;
  return keep<(i64)g->area ? (i64)g->area : keep;
}

static int trim(waldio_log *pLog, i64 keep){
  wal_geometry g = log_geometry(pLog);
  return trim_empty(pLog, keep_bytes(&g, 0, keep));
}

int sb_truncate(waldio_log *pLog, i64 size, i64 keepAtLeast){
  wal_geometry g = log_geometry(pLog);
  i64 keep = keep_bytes(&g, wf_physical_for_logical(&g, size), keepAtLeast);
  int rc;
  if( size<WAL_HDR_BYTES ){
    rc = set_empty(pLog, 1);
    return rc ? rc : trim_empty(pLog, keep);
  }
  /* A limit on a log that holds a generation: what lies beyond `size` is
  ** older generations' frames, which recovery never reads. */
  return log_truncate_physical(pLog, keep);
}


/* Frames this process left to the kernel (synchronous=OFF writes nobody
** flushed) are all in the database now: drop them before write-back, as
** stock SQLite does by deleting its WAL, by cutting the file to block 0.
** Before block 0 is emptied: a crash in between finds a generation with no
** frames, and recovery replays nothing. */
static int drop_unflushed(waldio_log *pLog){
  i64 area;
  int unflushed;
  pthread_mutex_lock(&pLog->mutex);
  unflushed = pLog->flushedSeq<pLog->writeSeq;
  area = log_round_up(pLog->sb.geo.area, pLog->file.block);
  pthread_mutex_unlock(&pLog->mutex);
  return unflushed ? log_truncate_physical(pLog, area) : SQLITE_OK;
}

/* The last close after a clean checkpoint: drop the generation; if no
** other process has the log open, also the guard (F4) and every byte beyond
** idleKeep, so that an idle database leaves a bounded log whatever its
** transactions were (stock SQLite deletes its WAL here). What is kept is
** allocated and written: the next session's first direct commits need only
** one fdatasync, no zero-fill (durability.md, "The log left beside an idle
** database"). Another process with the log open may still need any of it:
** then nothing is cut. */
int sb_close_clean(waldio_log *pLog, i64 idleKeep, int alone){
  int rc = SQLITE_OK;
  if( alone ) rc = drop_unflushed(pLog);
  if( rc==SQLITE_OK ) rc = set_empty(pLog, !alone);
  if( rc==SQLITE_OK && alone ) rc = trim(pLog, idleKeep);
  return rc;
}

