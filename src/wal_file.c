/*
** wal_file.c — a connection's WAL handle: SQLite's logical WAL file mapped
** onto the physical waldio log.
**
** SQLite believes it is reading and writing a standard WAL (32-byte header,
** then frames of a 24-byte header and a page). Every call is translated:
**
**   write 32 @ 0                 new generation: block 0 (wal_log.c)
**   write 24 @ frame             frame header: held until its page arrives
**   write P  @ frame+24          page: joined with the held header into one
**                                slot image in the handle's batch of new
**                                frames; the commit frame writes the batch
**   anything else                (a page overwrite of an uncommitted frame,
**                                a held header whose page never came -- the
**                                checksum rewrites of walRewriteChecksums --,
**                                any other shape) written through the page
**                                cache, each part where the layout keeps it:
**                                no read, no alignment
**   read                         from the group buffer or the cache of
**                                directly written slots, else through the
**                                page cache, the embed tail zeroed, exactly
**                                as SQLite wrote it, so its checksums verify
**
** How the batch is written (the I/O policy, docs/durability.md):
**   - a small transaction's commit with synchronous=FULL (or persistent):
**     ONE aligned direct write of its frames into the zero-filled log, then
**     SQLite's xSync flushes -- the paper's commit, never journaled;
**   - the same while other processes have the log open (log_others_open)
**     or commit to it (log_others_commit): one write through the page cache
**     into the zero-filled log (LOG_PREALLOC: still no allocation, so
**     nothing journaled), then the same flush. Their transactions read
**     what this one wrote (SQLite re-reads pages another process changed),
**     and a direct write would have dropped those pages from the cache:
**     each such read went to the device, inside SQLite's write lock when a
**     writer made it (issue 27);
**   - a commit that would be written directly but begins in block 0
**     (the standard layout: a generation's first commit, or its first few
**     with pages under 4 KiB), where SQLite has just written and synced its
**     header through the page cache, as stock SQLite writes it: the same
**     whole blocks through the page cache (LOG_WHOLE_BLOCKS: the kernel
**     reads no partial page first), then the same flush. A direct write
**     would drop block 0 from the cache, and the next generation's 32-byte
**     header write made the kernel read it from the device inside that
**     commit (update x1's p99, issue 27);
**   - a transaction too large for one batch (256 KiB) spills its frames
**     through the page cache as it goes and commits the same way, as stock
**     SQLite does (a direct write would need a zero-filled, so twice
**     written, range);
**   - synchronous=NORMAL and OFF commit through the page cache; NORMAL arms
**     the flusher, which fdatasyncs within flush_ms (the loss bound), and
**     waldio_sync=ns keeps the paper's direct write without a flush.
**
** Invariants:
**   W1  Held state (a header awaiting its page, batched frames) never
**       outlives the commit frame or the next call: every method (a read:
**       if it reads held frames), and the database's xShmBarrier, writes it
**       out first, and a commit frame is written before its xWrite returns. So nothing a commit wrote is only
**       in memory when SQLite syncs or publishes it, and a failure is
**       reported by the call that wrote the commit.
**   W2  A page whose last 24 bytes are not zero is refused (embed layout):
**       storing the frame header there would change what SQLite checksummed.
**   W3  Direct writes are whole blocks at block-aligned offsets (D1).
**   W4  Held state belongs to the transaction that holds the WAL write lock.
**       A commit writes it before the commit returns, so whatever is still
**       held when the lock is released belongs to a transaction that rolled
**       back: it is discarded then (db_file.c, xShmLock), never written
**       later over frames another connection has committed since.
*/
#include "vfs_internal.h"
#include "dio_file.h"
#include "errors.h"
#include "options.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const sqlite3_io_methods wal_io_methods;

static const volatile void *shm_of(waldio_wal_file *p){
  return p->pDb ? p->pDb->shm0 : 0;
}

#define BATCH_BYTES (256u * 1024u)

/* The batch and one scratch slot for this geometry (the batch is empty when the
** geometry changes: a new generation flushes first). */
static int ensure_batch(waldio_wal_file *p, const wal_geometry *g){
  if( g->slot<=p->nSlot ) return SQLITE_OK;
  dio_free(p->aSlot);
  dio_free(p->aBatch);
  p->nBatchMax = BATCH_BYTES / g->slot ? BATCH_BYTES / g->slot : 1;
  p->aSlot = dio_alloc(&p->pLog->file, g->slot);
  p->aBatch = dio_alloc(&p->pLog->file, (size_t)p->nBatchMax * g->slot);
  if( !p->aSlot || !p->aBatch ){
    dio_free(p->aSlot);
    dio_free(p->aBatch);
    p->aSlot = p->aBatch = 0;
    p->nSlot = p->nBatchMax = 0;
    return SQLITE_NOMEM;
  }
  p->nSlot = g->slot;
  return SQLITE_OK;
}

/* Auto (log_group.h) is group commit off where there is no flush region
** to share: a wal-index in heap memory (locking_mode=EXCLUSIVE), or a side
** file that cannot be had (flush_side.h). Its commits are then written as
** off writes them, directly. */
static int auto_has_region(waldio_wal_file *p){
  int rc;
  return p->pDb->shm0 && waldio_db_flush_region(p->pDb, &rc)!=0;
}

/* A commit of shared group mode (log_group.h) waits for a flush it shares:
** its frames go through the page cache into the zero-filled log (an
** overwrite, no allocation), and the shared flush writes them back
** together with the other processes' commits. Under SQLite's write lock
** this costs a memory copy where a direct write would wait for the device.
** (Frames-to-flush order is flush_region.h F1/F2.) */
static int shared_group_commit(waldio_wal_file *p){
  return !p->spilled && p->pDb->opts.sync!=WALDIO_SYNC_PERSISTENT
      && log_group_mode(p->pLog)!=WALDIO_GROUP_OFF && !log_group_solo(p->pLog)
      && (!log_group_auto(p->pLog) || auto_has_region(p));
}

/* This opener's group option, applied to the log (one mode per log and
** process, log_group.h): the default (auto) only where nobody chose a
** mode, and an explicit off only over the default (as before auto, an
** opener never switches off what another connection switched on). Never
** refused (other processes join); it fails only if leaving another mode
** could not flush what that mode owed. */
static int apply_group_option(waldio_db_file *db, waldio_log *pLog){
  const waldio_options *o = &db->opts;
  if( o->group==WALDIO_GROUP_OFF && !log_group_by_default(pLog) ){
    return SQLITE_OK;
  }
  return log_set_group(pLog, o->group, o->group_bytes, o->group_ms,
                       db->zGroupFrom);
}

/* How this connection's commits are written (the policy above), but for
** the header's block. */
static int commit_path(waldio_wal_file *p, int *pDirect){
  int level = waldio_db_sync_level(p->pDb);
  int sync = p->pDb->opts.sync;
  if( sync==WALDIO_SYNC_PERSISTENT ){
    *pDirect = !p->spilled;
    return LOG_DSYNC;
  }
  if( level>=2 && shared_group_commit(p) && !p->flushAlone ){
    *pDirect = 0;
    return LOG_PREALLOC
         | (log_group_mode(p->pLog)==WALDIO_GROUP_ASYNC ? LOG_ARM : 0);
  }
  if( level>=2 && !p->spilled
   && (log_others_commit(p->pLog) || log_others_open(p->pLog)) ){
    *pDirect = 0;                 /* into the preallocated log, page cache */
    return LOG_PREALLOC;
  }
  if( level>=2 ){
    *pDirect = !p->spilled;
    return 0;
  }
  *pDirect = level==1 && sync==WALDIO_SYNC_NS && !p->spilled;
  return level==1 ? LOG_ARM : 0;
}

/* The policy above: a direct commit whose batch begins in block 0, beside
** SQLite's header, goes through the page cache as whole blocks. */
static int commit_flags(waldio_wal_file *p, int *pDirect){
  int flags = commit_path(p, pDirect);
  wal_geometry g = log_geometry(p->pLog);
  if( *pDirect && wf_slot_offset(&g, p->batchFirst)<(i64)p->pLog->file.block ){
    *pDirect = 0;
    flags |= LOG_PREALLOC | LOG_WHOLE_BLOCKS;
  }
  return flags;
}

/* persistent (O_DSYNC) and ns (direct, synchronous=NORMAL) make a commit
** survive an OS crash by how they write it, without a sync from SQLite. */
static int promises_without_sync(waldio_wal_file *p){
  int sync = p->pDb->opts.sync;
  return sync==WALDIO_SYNC_PERSISTENT
      || (sync==WALDIO_SYNC_NS && waldio_db_sync_level(p->pDb)==1);
}

/* A buffered write under such a promise: the commit must be flushed
** before SQLite publishes it (waldio_wal_barrier). */
static void note_buffered(waldio_wal_file *p){
  if( promises_without_sync(p) ) p->needsSync = 1;
}

int waldio_wal_barrier(waldio_wal_file *p){
  int rc = waldio_wal_flush(p);
  if( rc==SQLITE_OK && p->needsSync ){
    rc = log_sync(p->pLog);
    if( rc==SQLITE_OK ) p->needsSync = 0;
  }
  return rc;
}

/* What this connection's commit asks of the group write (log_group.h). */
static int group_needs(waldio_wal_file *p){
  int level = waldio_db_sync_level(p->pDb);
  if( p->pDb->opts.sync==WALDIO_SYNC_PERSISTENT ) return GROUP_DSYNC;
  return level>=2 ? GROUP_FLUSH : level==1 ? GROUP_ARM : 0;
}

/* W2, for a write that is not a new frame (a new frame asks the layout,
** xCheckFrame): the layout stores only page_stored bytes of each page. */
static int tail_error(waldio_wal_file *p, u32 pgno){
  return waldio_error(SQLITE_IOERR_WRITE, "%s: page %u has non-zero bytes in"
      " the part of the page the %s layout does not store (its last 24"
      " reserved bytes, where the frame header is kept). Another extension"
      " (checksums, encryption) is using them; open this database with"
      " waldio_layout=standard or pad4k", p->pLog->zPath, pgno,
      p->pLog->pLayout->zName);
}

/* W2: logical frame bytes [lo,hi) put nothing but zeros where the layout
** stores nothing. */
static int tail_is_clear(const wal_geometry *g, u32 lo, u32 hi, const u8 *data){
  wf_run aRun[3];
  int i, n = wf_frame_runs(g, lo, hi, aRun);
  for(i=0; i<n; i++){
    const u8 *z = data + (aRun[i].lo - lo);
    u32 k;
    if( aRun[i].inSlot>=0 ) continue;
    for(k=0; k<aRun[i].n; k++) if( z[k] ) return 0;
  }
  return 1;
}

/* Any write but a new frame: logical bytes [lo,hi) of frame, buffered. */
static int overwrite_frame(waldio_wal_file *p, u32 frame, u32 lo, u32 hi,
                           const u8 *data, int kind){
  wal_geometry g = log_geometry(p->pLog);
  int rc;
  if( !tail_is_clear(&g, lo, hi, data) ){
    return tail_error(p, lo==0 && hi>=4 ? wf_get32(data) : 0);
  }
  rc = group_write_all(p->pLog);          /* G4: no stale copy left behind */
  if( rc==SQLITE_OK ){
    int dsync = p->pDb->opts.sync==WALDIO_SYNC_PERSISTENT ? LOG_DSYNC : 0;
    rc = log_write_frame(p->pLog, frame, lo, hi, data, kind, dsync);
  }
  if( rc==SQLITE_OK ){
    p->wroteSinceBarrier = 1;
    note_buffered(p);
  }
  return rc;
}

/* flush_region.h F1, F5: a commit's ticket, taken once its frames are
** written, under the WAL write lock. None without a wal-index in shared
** memory (a heap-memory wal-index: no other process can open the
** database). Failing to map the region fails the commit: a published
** commit without a ticket could be skipped by another process's
** checkpoint sync. */
static int take_ticket(waldio_wal_file *p, int selfDurable){
  volatile flush_region *pFlush;
  int rc = SQLITE_OK;
  p->ticket = 0;
  if( !p->pDb->shm0 ) return SQLITE_OK;
  pFlush = waldio_db_flush_region(p->pDb, &rc);
  if( pFlush ){
    p->ticket = flush_region_ticket(pFlush);
    if( selfDurable ) flush_region_self_durable(pFlush, p->ticket);
  }
  return rc;
}

/* Auto (log_group.h): a commit below synchronous=FULL takes no ticket, so
** no strict reader waits for it, as a stock commit takes none in this
** layout (flush_region.h F5 does not hold in it). */
static int auto_skips_ticket(waldio_wal_file *p){
  return waldio_db_sync_level(p->pDb)<2 && log_group_auto(p->pLog);
}

/* Write the batched new frames with one system call: a commit (the policy
** above) or a spill of a large transaction (buffered). */
static int flush_batch(waldio_wal_file *p, int isCommit){
  u32 n = p->nBatch, slot;
  int flags = 0, direct = 0, rc;
  if( n==0 ) return SQLITE_OK;
  p->nBatch = 0;
  slot = log_geometry(p->pLog).slot;
  if( isCommit ){
    flags = commit_flags(p, &direct);
  }else{
    p->spilled = 1;
  }
  if( !direct ) flags |= LOG_BUFFERED;
  rc = log_write_slots(p->pLog, p->batchFirst, n, p->aBatch, 0, n * slot,
                       LOG_WRITE_FRAME, flags);
  if( rc==SQLITE_OK ) p->wroteSinceBarrier = 1;
  /* (A buffered O_DSYNC write is durable when it returns, as a direct one:
  ** persistent's commit beside the header. Earlier spills noted theirs.) */
  if( rc==SQLITE_OK && !direct && !(flags & LOG_DSYNC) ) note_buffered(p);
  /* An O_DSYNC commit (persistent) with nothing left to sync is durable
  ** as it stands: its ticket needs no flush. */
  if( rc==SQLITE_OK && isCommit && !p->flushAlone && !auto_skips_ticket(p) ){
    rc = take_ticket(p, (flags & LOG_DSYNC) && !p->needsSync);
  }
  if( isCommit ) p->spilled = 0;
  return rc;
}

/* A flush this connection makes in SQLite's sync, upto and mark read before
** it began: once it succeeds, every ticket up to upto (F2) and every frame
** the mark names (F6) is durable. */
static int flush_covering(waldio_wal_file *p, volatile flush_region *pFlush,
                          u64 upto, u64 mark){
  int flushed = 0;
  int rc = log_sync_published_ex(p->pLog, shm_of(p), &flushed);
  if( rc==SQLITE_OK && flushed ){
    flush_region_frames_durable(pFlush, mark);
    flush_region_covered(pFlush, upto);
  }
  return rc;
}

/* A durable or strict commit that no other commit is near (no other
** process committed lately, log_others_commit; nobody waits for the WAL
** write lock or for a flush, every ticket durable, flush_region_idle) has
** nobody to share a flush with: it is flushed before SQLite publishes it,
** by SQLite's own sync under the write lock, as `full` flushes, and takes
** its ticket after that flush, durable at once (flush_alone). No reader
** then sees it before it is durable -- a strict reader never waits for
** it -- and COMMIT_PHASETWO has nothing to wait for. One process in the
** standard layout (no solo buffer) paid the shared protocol for every
** commit (issue 27). Where other processes commit it does not: under the
** write lock its flush made theirs wait (embed, two processes: durable
** 0.69x waldio full against 1.01x on the shared path). Nor where SQLite
** pads a commit to the sector (psow=0): it writes padding after its sync. */
static int flushes_alone(waldio_wal_file *p){
  volatile flush_region *pFlush;
  sqlite3_file *pDbFile = &p->pDb->base;
  int rc = SQLITE_OK;
  if( !p->pDb->flushAlone || !p->pDb->shm0 || waldio_db_sync_level(p->pDb)<2
   || log_group_mode(p->pLog)<WALDIO_GROUP_DURABLE || !shared_group_commit(p)
   || !(pDbFile->pMethods->xDeviceCharacteristics(pDbFile)
        & SQLITE_IOCAP_POWERSAFE_OVERWRITE) ){
    return 0;
  }
  if( log_others_commit(p->pLog) ) return 0;
  pFlush = waldio_db_flush_region(p->pDb, &rc);
  return pFlush && flush_region_idle(pFlush);
}

/* The flush of a commit that flushes alone (above), in SQLite's sync of
** it: every ticket handed out before it began becomes durable (F2), the
** frames published before it too (F6), and the commit's own ticket, taken
** now, after the write it counts and under the write lock (F1), is
** durable at once. */
static int flush_alone(waldio_wal_file *p){
  volatile flush_region *pFlush;
  int rc = SQLITE_OK;
  p->flushAlone = 0;
  pFlush = waldio_db_flush_region(p->pDb, &rc);
  if( !pFlush ) return rc ? rc : SQLITE_IOERR_SHMMAP;
  rc = flush_covering(p, pFlush, flush_region_written(pFlush),
                      wal_index_end_mark(shm_of(p)));
  if( rc ) return rc;
  log_count_group(p->pLog, LOG_GROUP_ALONE);
  return take_ticket(p, 1);
}

/* Group commit, shared: write the frames (after what a solo buffer still
** holds, G4) and take the ticket; where the commit waits for a flush
** (synchronous=FULL), skip SQLite's sync of it: COMMIT_PHASETWO waits for
** the shared flush that covers the ticket, or the async deadline flushes
** it. Without a ticket (no wal-index in shared memory) SQLite's own sync
** makes the commit durable before it is published; so it does for a
** commit that flushes alone (above). */
static int commit_shared(waldio_wal_file *p){
  int rc = group_write_all(p->pLog);
  p->flushAlone = rc==SQLITE_OK && flushes_alone(p);
  if( rc==SQLITE_OK ) rc = flush_batch(p, 1);
  if( p->flushAlone ){
    if( rc==SQLITE_OK ) log_count_group(p->pLog, LOG_GROUP_COMMIT);
    return rc;
  }
  if( rc || p->ticket==0 || waldio_db_sync_level(p->pDb)<2
   || !shared_group_commit(p) ){
    return rc;
  }
  log_count_group(p->pLog, LOG_GROUP_COMMIT);
  p->commitSeq = p->ticket;
  p->commitShared = 1;
  p->commitWriteSeq = log_write_seq(p->pLog);
  p->inCommit = 1;
  if( log_group_mode(p->pLog)==WALDIO_GROUP_ASYNC ) group_arm_async(p->pLog);
  return SQLITE_OK;
}

void waldio_wal_discard(waldio_wal_file *p){
  p->nBatch = 0;
  p->pendingFrame = 0;
  p->inCommit = 0;
  p->flushAlone = 0;
  p->spilled = 0;
}

/* L6 (wal_log.h): a handle inherited through fork() does nothing at all. */
int waldio_wal_usable(waldio_wal_file *p){
  return log_inherited(p->pLog) ? log_inherited_error(p->pLog) : SQLITE_OK;
}

int waldio_wal_flush(waldio_wal_file *p){
  u32 frame = p->pendingFrame;
  int rc = waldio_wal_usable(p);
  if( rc ) return rc;
  rc = flush_batch(p, 0);
  if( rc || frame==0 ) return rc;
  p->pendingFrame = 0;          /* a header whose page never came: a rewrite */
  return overwrite_frame(p, frame, 0, WAL_FRAME_HDR_BYTES, p->aPending,
                         LOG_WRITE_HEADER);
}

/* The common case: the held header and its page become one slot image in
** the batch. The commit frame (nTruncate != 0) writes the batch out. */
static int write_new_frame(waldio_wal_file *p, const wal_geometry *g,
                           u32 frame, const u8 *page){
  int isCommit = wf_get32(p->aPending + 4)!=0;
  u8 *slot;
  int rc = p->pLog->pLayout->xCheckFrame(g, p->aPending, page, p->pLog->zPath);
  if( rc ){
    /* Refuse the page, but keep the header write SQLite was told
    ** succeeded: every successful xWrite is in the file. */
    int rc2 = waldio_wal_flush(p);
    return rc2 ? rc2 : rc;
  }
  if( p->nBatch
   && (frame!=p->batchFirst + p->nBatch || p->nBatch==p->nBatchMax) ){
    rc = flush_batch(p, 0);
    if( rc ) return rc;
  }
  if( p->nBatch==0 ) p->batchFirst = frame;
  slot = p->aBatch + (size_t)p->nBatch * g->slot;
  if( g->slot>g->page + WAL_FRAME_HDR_BYTES ) memset(slot, 0, g->slot);
  wf_logical_to_slot(g, slot, 0, WAL_FRAME_HDR_BYTES, p->aPending);
  wf_logical_to_slot(g, slot, WAL_FRAME_HDR_BYTES, WAL_FRAME_HDR_BYTES + g->page, page);
  p->nBatch++;
  p->pendingFrame = 0;
  if( !isCommit ) return SQLITE_OK;
  if( log_group_mode(p->pLog)==WALDIO_GROUP_OFF || p->spilled ){
    return flush_batch(p, 1);
  }
  /* Group commit, solo: the transaction's frames join the group buffer. */
  rc = group_append(p->pLog, p->batchFirst, frame - p->batchFirst + 1, p->aBatch,
                    group_needs(p), &p->commitSeq);
  if( rc==SQLITE_OK ){
    p->nBatch = 0;
    p->inCommit = 1;
    p->wroteSinceBarrier = 1;    /* its publication is this process's own */
  }
  return rc==GROUP_NOT_SOLO ? commit_shared(p) : rc;
}

/* Any other write shape: split by frame, each piece written in place. */
static int write_general(waldio_wal_file *p, const wal_geometry *g,
                         const u8 *z, int iAmt, i64 iOfst){
  i64 frameBytes = (i64)g->page + WAL_FRAME_HDR_BYTES;
  i64 pos = iOfst, end = iOfst + iAmt;
  while( pos<end ){
    u32 frame = (u32)((pos - WAL_HDR_BYTES) / frameBytes) + 1;
    i64 start = wf_logical_frame_offset(g->page, frame);
    u32 lo = (u32)(pos - start);
    u32 hi = (u32)((end - start) < frameBytes ? end - start : frameBytes);
    int rc = overwrite_frame(p, frame, lo, hi, z + (pos - iOfst), LOG_WRITE_OTHER);
    if( rc ) return rc;
    pos = start + hi;
  }
  return SQLITE_OK;
}

static int walWrite(sqlite3_file *pFile, const void *zBuf, int iAmt,
                    sqlite3_int64 iOfst){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  const u8 *z = zBuf;
  wal_geometry g;
  u32 frame, within;
  int rc, direct;

  rc = waldio_wal_usable(p);
  if( rc ) return rc;
  if( log_is_readonly(p->pLog) ){
    return waldio_error(SQLITE_READONLY, "%s: the log is read-only", p->pLog->zPath);
  }
  rc = log_begin_write(p->pLog, shm_of(p));
  if( rc ) return rc;
  p->wroteUnderLock = 1;
  p->pDb->leavingWal = 0;       /* still in WAL mode: a switch out failed */
  if( iOfst==0 && iAmt==WAL_HDR_BYTES ){
    p->inCommit = 0;
    rc = waldio_wal_flush(p);
    if( rc==SQLITE_OK ) rc = group_write_all(p->pLog);
    if( rc==SQLITE_OK ) rc = log_write_header(p->pLog, z, commit_path(p, &direct));
    return rc;
  }
  rc = log_frame_geometry(p->pLog, &g);
  if( rc ) return rc;
  if( iOfst<WAL_HDR_BYTES || g.page==0 ){
    return waldio_error(SQLITE_IOERR_WRITE, "%s: unsupported WAL write of %d"
        " bytes at offset %lld (no WAL header yet, or a partial header)",
        p->pLog->zPath, iAmt, (long long)iOfst);
  }
  rc = ensure_batch(p, &g);
  if( rc ) return rc;
  frame = (u32)((iOfst - WAL_HDR_BYTES) / (g.page + WAL_FRAME_HDR_BYTES)) + 1;
  within = (u32)((iOfst - WAL_HDR_BYTES) % (g.page + WAL_FRAME_HDR_BYTES));
  if( iAmt==WAL_FRAME_HDR_BYTES && within==0 ){
    /* A frame header is held for its page; a header already held whose
    ** page never came is written out first. */
    if( p->pendingFrame ){
      rc = waldio_wal_flush(p);
      if( rc ) return rc;
    }
    memcpy(p->aPending, z, WAL_FRAME_HDR_BYTES);
    p->pendingFrame = frame;
    return SQLITE_OK;
  }
  if( (u32)iAmt==g.page && within==WAL_FRAME_HDR_BYTES ){
    if( p->pendingFrame==frame ) return write_new_frame(p, &g, frame, z);
    rc = waldio_wal_flush(p);
    if( rc ) return rc;
    return overwrite_frame(p, frame, WAL_FRAME_HDR_BYTES,
                           WAL_FRAME_HDR_BYTES + g.page, z, LOG_WRITE_PAGE);
  }
  rc = waldio_wal_flush(p);
  if( rc==SQLITE_OK ) rc = write_general(p, &g, z, iAmt, iOfst);
  return rc;
}

/* Copy the logical bytes [pos,end) of frames into out. */
static int read_frames(waldio_wal_file *p, const wal_geometry *g, u8 *out,
                       i64 pos, i64 end){
  i64 frameBytes = (i64)g->page + WAL_FRAME_HDR_BYTES;
  i64 base = pos;
  while( pos<end ){
    u32 frame = (u32)((pos - WAL_HDR_BYTES) / frameBytes) + 1;
    i64 start = wf_logical_frame_offset(g->page, frame);
    u32 lo = (u32)(pos - start);
    u32 hi = (u32)((end - start) < frameBytes ? end - start : frameBytes);
    int isShort = 0;
    int rc = log_read_frame(p->pLog, frame, lo, hi, shm_of(p),
                            p->pDb ? &p->pDb->view : 0, p->aSlot,
                            out + (pos - base), &isShort);
    if( rc ) return rc;
    if( isShort ){
      memset(out + (pos - base), 0, (size_t)(end - pos));
      return SQLITE_IOERR_SHORT_READ;
    }
    pos = start + hi;
  }
  return SQLITE_OK;
}

/* A read needs held frames written only if it reads them. Rolling back,
** SQLite re-reads older pages while the transaction's frames are still
** batched: those are then never written at all (W4 discards them). */
static int flush_if_read(waldio_wal_file *p, i64 iOfst, int iAmt){
  wal_geometry g;
  i64 frameBytes, first, last;
  int rc = waldio_wal_usable(p);
  if( rc ) return rc;
  if( p->nBatch==0 && p->pendingFrame==0 ) return SQLITE_OK;
  g = log_geometry(p->pLog);
  frameBytes = (i64)g.page + WAL_FRAME_HDR_BYTES;
  if( g.page==0 || iOfst + iAmt<=WAL_HDR_BYTES ) return SQLITE_OK;
  first = iOfst<WAL_HDR_BYTES ? 1 : (iOfst - WAL_HDR_BYTES) / frameBytes + 1;
  last = (iOfst + iAmt - 1 - WAL_HDR_BYTES) / frameBytes + 1;
  if( (p->pendingFrame && p->pendingFrame>=first && p->pendingFrame<=last)
   || (p->nBatch && p->batchFirst<=last && p->batchFirst + p->nBatch>first) ){
    return waldio_wal_flush(p);
  }
  return SQLITE_OK;
}

static int walRead(sqlite3_file *pFile, void *zBuf, int iAmt,
                   sqlite3_int64 iOfst){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  u8 *out = zBuf;
  i64 pos = iOfst, end = iOfst + iAmt;
  wal_geometry g;
  int rc;

  p->inCommit = 0;
  if( p->pDb && p->pDb->releasedSlot ) return waldio_db_read_released(p->pDb);
  rc = flush_if_read(p, iOfst, iAmt);
  if( rc ) return rc;
  if( pos<WAL_HDR_BYTES ){
    u8 aHdr[WAL_HDR_BYTES];
    int has = 0;
    i64 n = (end<WAL_HDR_BYTES ? end : WAL_HDR_BYTES) - pos;
    rc = log_read_sqlite_header(p->pLog, aHdr, &has);
    if( rc ) return rc;
    if( !has ){
      memset(out, 0, (size_t)iAmt);
      return SQLITE_IOERR_SHORT_READ;
    }
    memcpy(out, aHdr + pos, (size_t)n);
    out += n;
    pos += n;
  }
  if( pos>=end ) return SQLITE_OK;
  rc = log_frame_geometry(p->pLog, &g);
  if( rc ) return rc;
  if( g.page==0 ){
    memset(out, 0, (size_t)(end - pos));
    return SQLITE_IOERR_SHORT_READ;
  }
  rc = ensure_batch(p, &g);
  if( rc==SQLITE_OK ){
    rc = waldio_db_strict_read(p->pDb, (u32)((pos - WAL_HDR_BYTES)
                                             / (g.page + WAL_FRAME_HDR_BYTES)) + 1);
  }
  if( rc==SQLITE_OK ) rc = read_frames(p, &g, out, pos, end);
  return rc;
}

/* SQLite's own sync (a checkpoint's, a new generation's, a commit outside
** group mode). A process whose own writes are all durable needs only the
** other processes' commits durable, which is what the shared group's flush
** gives (F5; the standard layout: F6); otherwise it flushes, and its flush
** counts for the group's waiters too, up to the tickets handed out before
** it began (F2), and for the frames published before it (F6). */
static int sync_and_share(waldio_wal_file *p){
  volatile flush_region *pFlush = 0;
  u64 upto, mark;
  int rc = SQLITE_OK;
  if( p->pDb->shm0 ) pFlush = waldio_db_flush_region(p->pDb, &rc);
  if( !pFlush ) return rc ? rc : log_sync_published(p->pLog, shm_of(p));
  upto = flush_region_written(pFlush);
  mark = wal_index_end_mark(shm_of(p));
  if( log_own_writes_flushed(p->pLog) ){
    if( !p->pDb->nativeShm ){
      /* F5: every published frame has a ticket <= upto: join the group's
      ** flush instead of making one more. */
      return flush_region_wait(p->pLog, pFlush, upto, shm_of(p));
    }
    /* Where stock processes share the log their commits take no ticket,
    ** but a flush that began after they were published covers them (F6):
    ** the group's next flush, which a ticket of this sync's own makes
    ** certain to begin after now. Nor is a flush owed where nobody
    ** published since this process's last flush or durable publication
    ** (L2): the commits of one process that writes with O_DSYNC
    ** (persistent), whose writes do not raise F6's mark. (A commit another
    ** process published before it was durable keeps its writer's read lock
    ** until it is, in this layout: no checkpoint copies it sooner,
    ** db_file.c.) */
    if( log_nothing_to_flush(p->pLog, shm_of(p)) ) return SQLITE_OK;
    if( flush_region_frames_cover(pFlush, mark) ) return SQLITE_OK;
    rc = flush_region_wait(p->pLog, pFlush, flush_region_ticket(pFlush), shm_of(p));
    if( rc ) return rc;
    if( flush_region_frames_cover(pFlush, mark) ) return SQLITE_OK;
  }
  return flush_covering(p, pFlush, upto, mark);
}

static int walSync(sqlite3_file *pFile, int flags){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  int rc;
  (void)flags;
  rc = waldio_wal_usable(p);
  if( rc ) return rc;
  if( p->inCommit ){
    /* A group commit's own sync: durability comes from the group write
    ** (async: its deadline; durable: COMMIT_PHASETWO waits for it). */
    return SQLITE_OK;
  }
  rc = waldio_wal_flush(p);
  if( rc==SQLITE_OK ) rc = group_write_all(p->pLog);
  if( rc==SQLITE_OK && p->flushAlone ) return flush_alone(p);
  return rc ? rc : sync_and_share(p);
}

/* The most the log of an idle database keeps (durability.md, "The log left
** beside an idle database"): the default bound, the preallocation if it is
** smaller, and PRAGMA journal_size_limit if that is smaller still. */
i64 waldio_db_idle_bound(const waldio_db_file *db){
  i64 keep = WALDIO_IDLE_LOG_BYTES;
  if( db->opts.prealloc_bytes<keep ) keep = db->opts.prealloc_bytes;
  if( db->journalSizeLimit>=0 && db->journalSizeLimit<keep ) keep = db->journalSizeLimit;
  return keep;
}

/* What a truncation by SQLite keeps at least, by who asks (sqlite-wal-io.md):
**   size 0, the wal-index just reset (mxFrame 0) or none: a TRUNCATE
**     checkpoint (walRestartHdr, then xTruncate(0)): the header block only,
**     as stock SQLite leaves 0 bytes;
**   size 0 otherwise, the database locked exclusively: the last connection
**     closes with journal_size_limit set (sqlite3WalClose, walLimitSize(0)):
**     the idle bound;
**   size > 0, the database locked exclusively (locking_mode=EXCLUSIVE): the
**     limit applies fully, as it does to stock SQLite's WAL;
**   size > 0 otherwise: journal_size_limit after the first commit of a new
**     generation, while the database is in use: the preallocation stays, so
**     that its commits never allocate.
** Guessing wrong here only keeps more or fewer bytes of dead frames. */
static i64 truncate_floor(waldio_wal_file *p, i64 size){
  const volatile void *shm = shm_of(p);
  int exclusive = p->pDb->lockLevel==SQLITE_LOCK_EXCLUSIVE;
  if( size==0 ){
    return (exclusive && shm && wal_index_mx_frame(shm)>0) ? waldio_db_idle_bound(p->pDb) : 0;
  }
  return exclusive ? 0 : p->pLog->preallocInitial;
}

static int walTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  int rc;
  p->inCommit = 0;
  rc = waldio_wal_flush(p);
  if( rc==SQLITE_OK ) rc = group_write_all(p->pLog);
  if( rc==SQLITE_OK ) rc = log_begin_write(p->pLog, shm_of(p));
  return rc ? rc : log_truncate(p->pLog, size, truncate_floor(p, size));
}

static int walFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  i64 size = 0;
  int rc;
  rc = waldio_wal_flush(p);
  if( rc==SQLITE_OK ) rc = log_logical_size(p->pLog, &size);
  *pSize = size;
  return rc;
}

static int walClose(sqlite3_file *pFile){
  waldio_wal_file *p = (waldio_wal_file*)pFile;
  waldio_vfs *v = p->pDb->pVfs;
  int inherited = log_inherited(p->pLog);
  int rc = inherited ? SQLITE_OK : waldio_wal_flush(p);
  int rc2;
  if( p->pDb->pWal==p ) p->pDb->pWal = 0;
  /* closeClean: fully checkpointed by the last connection anywhere; the
  ** log drops the generation (and the guard, wal_format.c F4), so the next
  ** open recovers nothing and stock SQLite may open the database, and
  ** keeps at most the idle bound. */
  rc2 = log_release(&v->registry, p->pLog,
                    rc==SQLITE_OK && p->closeClean && !inherited
                      ? waldio_db_idle_bound(p->pDb) : LOG_CLOSE_DIRTY);
  dio_free(p->aSlot);
  dio_free(p->aBatch);
  p->aSlot = p->aBatch = 0;
  return rc ? rc : rc2;
}

static int walLock(sqlite3_file *f, int l){ (void)f; (void)l; return SQLITE_OK; }
static int walCheckReserved(sqlite3_file *f, int *pOut){
  (void)f; *pOut = 0; return SQLITE_OK;
}
static int walFileControl(sqlite3_file *f, int op, void *pArg){
  (void)f; (void)op; (void)pArg; return SQLITE_NOTFOUND;
}
static int walSectorSize(sqlite3_file *pFile){
  return (int)log_geometry(((waldio_wal_file*)pFile)->pLog).block;
}
static int walDeviceCharacteristics(sqlite3_file *f){
  (void)f; return SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}

static const sqlite3_io_methods wal_io_methods = {
  1, walClose, walRead, walWrite, walTruncate, walSync, walFileSize,
  walLock, walLock, walCheckReserved, walFileControl, walSectorSize,
  walDeviceCharacteristics, 0, 0, 0, 0, 0, 0
};

/* The database header's page size and reserved bytes; 0 if it is empty. */
static int read_db_header(waldio_db_file *db, u32 *pPage, u32 *pReserve){
  sqlite3_file *f = ORIGFILE(db);
  u8 h[100];
  int rc = f->pMethods->xRead(f, h, sizeof(h), 0);
  *pPage = *pReserve = 0;
  if( rc==SQLITE_IOERR_SHORT_READ ) return SQLITE_OK;           /* new database */
  if( rc ) return rc;
  if( memcmp(h, "SQLite format 3", 16)!=0 ) return SQLITE_OK;  /* SQLite decides */
  *pPage = ((u32)h[16]<<8) | ((u32)h[17]<<16);
  *pReserve = h[20];
  return SQLITE_OK;
}

/* The layout a new log of this database gets (wal_format.c
** wf_choose_layout: auto means standard). The block size is the file
** system's, which the log will use too. An existing log keeps its own
** (log_open.c). */
static int choose_layout(waldio_db_file *db, log_request *req){
  u32 page, reserve, block = waldio_block_size(db->zName);
  int rc = read_db_header(db, &page, &reserve);
  if( rc ) return rc;
  req->layout = (int)wf_choose_layout((u32)db->opts.layout, block, page,
                                      reserve, &req->zLayoutWhy);
  if( req->layout==0 ){
    return waldio_error(SQLITE_CANTOPEN, "%s: waldio_layout=%s cannot be used"
        " with page size %u and %u reserved bytes on %u-byte blocks: %s."
        " Convert the database once with `waldio convert %s` (24 reserved"
        " bytes, VACUUM), or leave waldio_layout at auto (the standard layout)",
        db->zName, waldio_layout_name(db->opts.layout), page, reserve, block,
        req->zLayoutWhy, db->zName);
  }
  return SQLITE_OK;
}

/* After opening the log: its geometry must hold the database's pages. */
static int check_page_size(waldio_db_file *db, waldio_log *pLog){
  wal_geometry g = log_geometry(pLog), probe;
  const char *zWhy;
  u32 page, reserve;
  int rc = read_db_header(db, &page, &reserve);
  if( rc || page==0 ) return rc;
  zWhy = wf_geometry(&probe, g.layout, g.block, page);
  if( zWhy==0 && (pLog->pLayout->flags & LAYOUT_NEEDS_RESERVE)
   && reserve<WAL_FRAME_HDR_BYTES ){
    zWhy = "the database has fewer than 24 reserved bytes per page";
  }
  if( zWhy ){
    return waldio_error(SQLITE_CANTOPEN, "%s: page size %u does not fit the"
        " %s layout of its existing log on %u-byte blocks (%s); checkpoint"
        " and close it in the process that uses it, then reopen", db->zName,
        page, waldio_layout_name((int)g.layout), g.block, zWhy);
  }
  return SQLITE_OK;
}

int waldio_wal_open(waldio_vfs *v, const char *zName, waldio_wal_file *p,
                    int flags, int *pOutFlags){
  waldio_db_file *db = waldio_db_for_wal(v, zName);
  log_request req;
  struct stat st;
  char *zStockShm;
  int rc;

  memset(p, 0, sizeof(*p));
  if( !db ){
    return waldio_error(SQLITE_CANTOPEN, "%s: cannot find the database this"
                        " WAL belongs to among waldio's open files", zName);
  }
  rc = SQLITE_OK;
  if( waldio_db_passthrough(db, &rc) ){
    /* Opaque to waldio: the lower VFS's own WAL, on SQLite's file object. */
    db->slotted = 0;
    return v->pLower->xOpen(v->pLower, zName, (sqlite3_file*)p, flags, pOutFlags);
  }
  if( rc ) return rc;
  memset(&req, 0, sizeof(req));
  req.opts = &db->opts;
  req.pDb = ORIGFILE(db);
  req.mode = 0644;
  if( stat(db->zName, &st)==0 ){        /* the log gets the database's */
    req.mode = st.st_mode & 0777;
    req.uid = st.st_uid;
    req.gid = st.st_gid;
    waldio_log_conform(v, db, zName, &st, (flags & SQLITE_OPEN_READONLY)!=0);
  }
  rc = choose_layout(db, &req);
  if( rc ) return rc;
  db->zStockIo = 0;
  if( (wal_layout_find(req.layout)->flags & LAYOUT_NATIVE_SHM)
   && db->opts.io==WALDIO_IO_DIRECT
   && !waldio_db_has_slotted_log(db)
   && !dio_supported_at(&v->sys, db->zName, &db->zStockIo) ){
    /* A layout of SQLite's own files, where direct I/O cannot be had:
    ** nothing to gain, and on FUSE (LiteFS) much to break. The lower VFS's
    ** own WAL, exactly stock SQLite's I/O, with SQLite's own wal-index. */
    db->nativeShm = 1;
    db->slotted = 0;
    waldio_warning("%s: %s; its WAL is written as stock SQLite writes it",
                   db->zName, db->zStockIo);
    return v->pLower->xOpen(v->pLower, zName, (sqlite3_file*)p, flags, pOutFlags);
  }
  zStockShm = sqlite3_mprintf("%s-shm", db->zName);
  if( !zStockShm ) return SQLITE_NOMEM;
  req.zStockShm = zStockShm;
  rc = log_acquire(&v->registry, &v->sys, zName, &req, &p->pLog);
  sqlite3_free(zStockShm);
  if( rc ) return rc;
  rc = check_page_size(db, p->pLog);
  if( rc==SQLITE_OK ) rc = apply_group_option(db, p->pLog);
  if( rc ){
    log_release(&v->registry, p->pLog, LOG_CLOSE_DIRTY);
    return rc;
  }
  p->pDb = db;
  db->pWal = p;
  db->nativeShm = (p->pLog->pLayout->flags & LAYOUT_NATIVE_SHM)!=0;
  db->slotted = !db->nativeShm;
  p->base.pMethods = &wal_io_methods;
  if( pOutFlags ){
    *pOutFlags = flags;
    if( log_is_readonly(p->pLog) ){
      *pOutFlags = (flags & ~SQLITE_OPEN_READWRITE) | SQLITE_OPEN_READONLY;
    }
  }
  return SQLITE_OK;
}
