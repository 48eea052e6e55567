/*
** layout_standard.c — the standard layout: SQLite's own WAL bytes at
** SQLite's own offsets (docs/format.md §4).
**
**   bytes 0..31    SQLite's WAL header, as SQLite wrote it
**   frame i        at 32 + (i-1)*(P+24): its 24-byte header, then the page
**   past the last  zeros (preallocation) or older generations' frames,
**   frame          which SQLite's salts reject, as in any reused WAL
**
** The wal-index is SQLite's own "<db>-shm" with SQLite's own locks
** (db_file.c, LAYOUT_NATIVE_SHM), so stock SQLite, the sqlite3 shell,
** Litestream and every tool that parses -wal may share the database at any
** time. waldio changes only how the bytes reach the disk: a small commit's
** frames are one aligned direct write into zero-filled, durable blocks
** (wal_log.c L1: no allocation, no file-system journal commit), flushed as
** the synchronous setting asks, or shared by group commit.
**
** Frames straddle blocks (P+24 bytes from offset 32), so a direct write of
** a commit covers the blocks around it whole: the bytes before its first
** frame in its first block are the previous commit's (or the header), and
** the bytes after its last frame in its last block lie past every frame.
** A commit that begins in block 0 writes the same whole blocks through the
** page cache (wal_file.c, LOG_WHOLE_BLOCKS), where SQLite keeps the header:
** block 0 stays cached for the next generation's 32-byte header write, and
** the kernel reads no partial page.
**
** Invariants:
**   T1  The file never holds 32 bytes or more without a valid header
**       (Litestream, for one, fails on a zero header). waldio extends the
**       file only for a direct commit (zero-fill, wal_log.c) or a group
**       commit's write into the preallocated range, and SQLite writes a
**       generation's header before its first frame -- synced first in
**       every synchronous mode whose commits waldio writes directly or for
**       the group (FULL and NORMAL sync the header: wal.c sqlite3WalFrames,
**       CKPT_SYNC_FLAGS); synchronous=OFF commits go through the page cache
**       and extend nothing. A cut that keeps bytes keeps the header.
**   T2  The bytes before a commit's first frame are rewritten as they are:
**       read back under SQLite's WAL write lock, which every writer, stock
**       or waldio, holds while it writes frames. The copy of the block this
**       process wrote last (lastBlock) stands in for the read only while
**       the wal-index header is the one this process last saw (wal_log.c
**       drops it with the frame cache) and this process wrote nothing else.
**   T3  The bytes after a commit's last frame in its last block become
**       zeros. They lie past mxFrame: readers stop at their snapshot,
**       recovery at the first frame whose salt or checksum fails.
**   T4  A cut that keeps part of a generation's frames comes after a
**       durable header that no longer matches them (new salts): a crash
**       then never leaves a replayable prefix of frames the database
**       already holds newer copies of (as log_superblock.h S2).
*/
#include "wal_layout.h"
#include "errors.h"
#include "options.h"
#include "sqlite_api.h"
#include "wal_log.h"

#include <string.h>

static const char *std_geometry(wal_geometry *g, u32 block, u32 page){
  (void)block;
  g->area = WAL_HDR_BYTES;
  g->slot = page ? page + WAL_FRAME_HDR_BYTES : 0;
  g->hdr_in_slot = 0;
  g->page_in_slot = WAL_FRAME_HDR_BYTES;
  return 0;
}

static int std_check_frame(const wal_geometry *g, const u8 *aHdr,
                           const u8 *aPage, const char *zPath){
  (void)g; (void)aHdr; (void)aPage; (void)zPath;
  return SQLITE_OK;                 /* SQLite's bytes, stored as they are */
}

/* A header SQLite would accept: magic, page size, checksum and version. */
static int valid_header(const u8 *h, u32 *pPage){
  u32 version = 0;
  return wf_parse_sqlite_header(h, &version, pPage) && version==WAL_FORMAT_VERSION;
}

/* A header SQLite wrote as it is, whatever its fields: its magic, and its
** checksum over its first 24 bytes. SQLite decides what such a header's
** page size or version means (an empty log, or SQLITE_CANTOPEN). */
static int header_whole(const u8 *h){
  u32 magic = wf_get32(h), sum[2];
  if( magic!=WAL_MAGIC_LE && magic!=WAL_MAGIC_BE ) return 0;
  wf_checksum(magic & 1, h, 24, 0, sum);
  return sum[0]==wf_get32(h+24) && sum[1]==wf_get32(h+28);
}

int wal_standard_holds_nothing(const u8 *a, size_t n){
  if( n<WAL_HDR_BYTES ) return 1;
  if( !header_whole(a) ) return 0;
  if( n<WAL_HDR_BYTES + WAL_FRAME_HDR_BYTES ) return 1;
  return memcmp(a + WAL_HDR_BYTES + 8, a + 16, 8)!=0;
}

static int damaged_error(waldio_log *pLog){
  size_t n = strlen(pLog->zPath);
  int nDb = (int)(n>4 && strcmp(pLog->zPath+n-4, "-wal")==0 ? n-4 : n);
  return waldio_error(SQLITE_CORRUPT, "%s: the WAL header (bytes 0..31) is"
      " damaged (magic, version or checksum), yet the file holds data after"
      " it: frames of committed transactions, perhaps. Stock SQLite would"
      " ignore every one of them; waldio refuses to open the database. Close"
      " every connection to it, then run `waldio recover %.*s`: it rebuilds"
      " the header from the first frame, keeps every frame that can be proven"
      " committed, and keeps the damaged file as %s.damaged"
      " (docs/format.md section 8)", pLog->zPath, nDb, pLog->zPath, pLog->zPath);
}

/* Adopt header h (valid) or none (h NULL) as the log's generation. */
static void adopt_header(waldio_log *pLog, const u8 *h, u32 page){
  wal_superblock sb;
  pthread_mutex_lock(&pLog->mutex);
  sb = pLog->sb;
  if( h && page!=sb.geo.page ){
    wf_geometry(&sb.geo, WALDIO_LAYOUT_STANDARD, pLog->file.block, page);
  }
  if( h ){
    sb.flags |= SB_FLAG_HAS_HEADER;
    memcpy(sb.sqlite_hdr, h, WAL_HDR_BYTES);
  }else{
    sb.flags &= ~SB_FLAG_HAS_HEADER;
    memset(sb.sqlite_hdr, 0, WAL_HDR_BYTES);
  }
  log_adopt_meta(pLog, &sb);
  pthread_mutex_unlock(&pLog->mutex);
}

static int std_attach(waldio_log *pLog, const log_request *req,
                      const wal_superblock *pFound, i64 size){
  u8 aHead[WAL_HDR_BYTES + WAL_FRAME_HDR_BYTES];
  wal_superblock sb;
  size_t got = 0;
  u32 page = 0;
  int rc = SQLITE_OK, has;
  (void)pFound;
  memset(aHead, 0, sizeof(aHead));
  if( size>0 ) rc = dio_read(&pLog->file, aHead, sizeof(aHead), 0, &got);
  if( rc ) return rc;
  has = got>=WAL_HDR_BYTES && valid_header(aHead, &page);
  /* No header: stock SQLite reads an empty WAL. Data after a broken one
  ** (its magic or checksum fails) is damage, never an empty log (T1: waldio
  ** never leaves that), unless every committed frame behind it is in the
  ** database already (a header torn at a restart). "Data" is a frame 1
  ** with a page number: without one, no header could make SQLite read a
  ** frame (wal.c walDecodeFrame), as after a header torn over a log that a
  ** TRUNCATE checkpoint emptied (the file is 32 bytes). A whole header
  ** with fields SQLite cannot use is SQLite's to judge. */
  if( !has && wf_get32(aHead + WAL_HDR_BYTES)!=0
   && !header_whole(aHead)
   && !log_settled(pLog, WALDIO_LAYOUT_STANDARD, req->pDb, size) ){
    return damaged_error(pLog);
  }
  if( !has && !pLog->file.readonly ){
    /* A new (or never written) log: as the unix VFS syncs the directory
    ** of a WAL it creates, before any commit can depend on its name. */
    if( size==0 ) dio_set_nocow(&pLog->file);
    rc = dio_sync_dir(pLog->sys, pLog->zPath);
    if( rc ) return rc;
  }
  memset(&sb, 0, sizeof(sb));
  wf_geometry(&sb.geo, WALDIO_LAYOUT_STANDARD, pLog->file.block, 0);
  pLog->zLayoutWhy = has && req->opts->layout==WALDIO_LAYOUT_AUTO
      ? "an existing log keeps its layout (SQLite's own WAL; `waldio convert`"
        " changes it)"
      : req->zLayoutWhy;
  pLog->physSize = size / pLog->file.block * pLog->file.block;
  pLog->durableEnd = 0;     /* L1: whatever is there may be unflushed */
  pLog->sizeCuts++;
  pthread_mutex_lock(&pLog->mutex);
  log_adopt_meta(pLog, &sb);
  pthread_mutex_unlock(&pLog->mutex);
  adopt_header(pLog, has ? aHead : 0, page);
  return SQLITE_OK;
}

static int std_write_header(waldio_log *pLog, const u8 *aHdr, int flags){
  u32 page = 0;
  int rc;
  if( !valid_header(aHdr, &page) ){
    return waldio_error(SQLITE_IOERR_WRITE, "%s: SQLite wrote a WAL header"
                        " waldio does not understand", pLog->zPath);
  }
  rc = log_write_bytes(pLog, 0, aHdr, WAL_HDR_BYTES, flags | LOG_BUFFERED);
  if( rc ) return rc;
  adopt_header(pLog, aHdr, page);
  pthread_mutex_lock(&pLog->mutex);
  frame_cache_clear(&pLog->cache);      /* a new generation begins */
  pLog->stats.block0_writes++;
  pthread_mutex_unlock(&pLog->mutex);
  return SQLITE_OK;
}

static int std_read_header(waldio_log *pLog, u8 *aOut, int *pHas){
  u8 h[WAL_HDR_BYTES];
  size_t got = 0;
  u32 page = 0;
  int rc = dio_read(&pLog->file, h, sizeof(h), 0, &got);
  if( rc ) return rc;
  /* The bytes as they are: SQLite decides what a header it cannot use
  ** means (an empty log), as it does reading a stock WAL. */
  *pHas = got==sizeof(h);
  if( *pHas ) memcpy(aOut, h, WAL_HDR_BYTES);
  if( *pHas && valid_header(h, &page) ) adopt_header(pLog, h, page);
  return SQLITE_OK;
}

static int std_logical_size(waldio_log *pLog, i64 *pSize){
  return dio_file_size(&pLog->file, pSize);
}

/* T2: the first block of a direct write, up to off, as the file holds it:
** this process's copy of the block it wrote last, or a read. */
static int head_block(waldio_log *pLog, i64 lo, u8 *img){
  u32 B = pLog->file.block;
  size_t got = 0;
  int rc;
  if( log_last_block_get(pLog, lo, img) ) return SQLITE_OK;
  rc = dio_read(&pLog->file, img, B, lo, &got);
  if( rc==SQLITE_OK && got<B ) memset(img + got, 0, B - got);
  pthread_mutex_lock(&pLog->mutex);
  pLog->stats.edge_reads++;
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

static int std_write_direct(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                            int dioFlags){
  u32 B = pLog->file.block;
  i64 lo = off / B * B, hi = log_round_up(off + (i64)n, B);
  size_t len = (size_t)(hi - lo);
  u8 *img = dio_alloc(&pLog->file, len);
  int rc = SQLITE_OK;
  if( !img ) return SQLITE_NOMEM;
  if( off>lo ) rc = head_block(pLog, lo, img);
  if( rc==SQLITE_OK ){
    memcpy(img + (off - lo), buf, n);
    memset(img + (off - lo) + n, 0, (size_t)(hi - off) - n);       /* T3 */
    rc = dio_write(&pLog->file, img, len, lo, dioFlags);
  }
  if( rc==SQLITE_OK ){
    log_last_block_put(pLog, hi - B, img + len - B);
  }else{
    log_last_block_put(pLog, -1, 0);
  }
  dio_free(img);
  return rc;
}

/* Make the generation's frames unreplayable: the header again with salt-1
** + 1 (as wal.c walRestartHdr makes a generation's: every frame in the file
** carries this salt-1 or an older one), its checkpoint sequence + 1 and its
** checksum; durably if `durable` (T4, before a cut). No header: nothing to
** do. (Not SQLite's PRNG for a new salt-2: drawing from it here would change
** what the application's own randomness gives.) */
static int invalidate_frames(waldio_log *pLog, int durable){
  u8 h[WAL_HDR_BYTES];
  u32 sum[2], page = 0;
  size_t got = 0;
  int rc = dio_read(&pLog->file, h, sizeof(h), 0, &got);
  if( rc || got<sizeof(h) || !valid_header(h, &page) ) return rc;
  wf_put32(h+12, wf_get32(h+12) + 1);
  wf_put32(h+16, wf_get32(h+16) + 1);
  wf_checksum(wf_get32(h) & 1, h, 24, 0, sum);
  wf_put32(h+24, sum[0]);
  wf_put32(h+28, sum[1]);
  rc = log_write_bytes(pLog, 0, h, WAL_HDR_BYTES, LOG_BUFFERED);
  if( rc==SQLITE_OK && durable ) rc = dio_fdatasync(&pLog->file);
  if( rc==SQLITE_OK ) adopt_header(pLog, h, page);
  return rc;
}

/* Cut the file to keep bytes (T1: none, or at least the header). */
static int cut(waldio_log *pLog, i64 keep){
  i64 size;
  int rc = dio_file_size(&pLog->file, &size);
  if( rc || size<=keep ) return rc;
  if( keep>=WAL_HDR_BYTES ) rc = invalidate_frames(pLog, 1);       /* T4 */
  if( rc==SQLITE_OK ) rc = log_truncate_physical(pLog, keep);
  if( rc==SQLITE_OK && keep<WAL_HDR_BYTES ) adopt_header(pLog, 0, 0);
  pthread_mutex_lock(&pLog->mutex);
  frame_cache_clear(&pLog->cache);
  pLog->stats.logical_truncates++;
  pthread_mutex_unlock(&pLog->mutex);
  log_last_block_put(pLog, -1, 0);
  return rc;
}

static int std_truncate(waldio_log *pLog, i64 size, i64 keepAtLeast){
  u32 B = pLog->file.block;
  i64 limit = keepAtLeast / B * B;
  if( size<WAL_HDR_BYTES ){
    /* A TRUNCATE checkpoint (keep nothing, as stock SQLite), or the last
    ** close with journal_size_limit (the idle bound): SQLite reset the
    ** wal-index, so the frames are dead. */
    return cut(pLog, limit<WAL_HDR_BYTES ? 0 : limit);
  }
  /* journal_size_limit after a restart: what lies past `size` is older
  ** generations' frames, which SQLite's salts already reject. */
  size = log_round_up(size, B);
  return log_truncate_physical(pLog, size>limit ? size : limit);
}

/* Frames this process left to the kernel (synchronous=OFF) are in the
** database now: drop them before write-back, as stock SQLite deletes its
** WAL. Otherwise keep idleKeep bytes with their frames made unreplayable, so
** the next open recovers nothing, as after stock SQLite deleted its WAL:
** durably where bytes are cut (T4), else as advice (lost in a crash, the
** whole generation is replayed: frames the database holds already). */
static int std_close_clean(waldio_log *pLog, i64 idleKeep, int alone){
  u32 B = pLog->file.block;
  i64 keep = idleKeep / B * B, size;
  int rc;
  if( !alone ) return SQLITE_OK;
  if( !log_own_writes_flushed(pLog) ) keep = 0;
  if( keep<WAL_HDR_BYTES ) return cut(pLog, 0);
  rc = dio_file_size(&pLog->file, &size);
  if( rc ) return rc;
  return size>keep ? cut(pLog, keep) : invalidate_frames(pLog, 0);
}

const wal_layout wal_layout_standard = {
  WALDIO_LAYOUT_STANDARD, "standard", LAYOUT_NATIVE_SHM | LAYOUT_PARTIAL_PAGES,
  std_geometry, std_check_frame, std_attach, std_write_header,
  std_read_header, std_logical_size, std_write_direct, std_truncate,
  std_close_clean
};
