/*
** wal_convert.c — standard-format WAL to waldio log (see wal_convert.h).
*/
#include "wal_convert.h"
#include "errors.h"
#include "sqlite_api.h"
#include "wal_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct std_wal {
  int fd;                  /* buffered descriptor for reading */
  u8 aHdr[WAL_HDR_BYTES];
  u32 page;
  u32 nFrame;              /* frames present in the file */
  u32 mxCommit;            /* last valid commit frame, 0 if none */
} std_wal;

static int read_at(const waldio_syscalls *sys, int fd, void *buf, size_t n,
                   i64 off){
  size_t got = 0;
  while( got<n ){
    ssize_t r = sys->xPread(fd, (char*)buf + got, n - got, off + (i64)got);
    if( r<0 && errno==EINTR ) continue;
    if( r<=0 ) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* Walk the frames as walIndexRecover does; find the last commit frame. */
static int scan_frames(const waldio_syscalls *sys, std_wal *w, u8 *aFrame){
  u32 sum[2], i;
  int bigEnd = wf_get32(w->aHdr) & 1;
  sum[0] = wf_get32(w->aHdr+24);
  sum[1] = wf_get32(w->aHdr+28);
  for(i=1; i<=w->nFrame; i++){
    u32 frameBytes = w->page + WAL_FRAME_HDR_BYTES;
    if( read_at(sys, w->fd, aFrame, frameBytes,
                wf_logical_frame_offset(w->page, i)) ) break;
    if( wf_get32(aFrame)==0 ) break;
    if( memcmp(aFrame+8, w->aHdr+16, 8)!=0 ) break;
    wf_checksum(bigEnd, aFrame, 8, sum, sum);
    wf_checksum(bigEnd, aFrame + WAL_FRAME_HDR_BYTES, w->page, sum, sum);
    if( sum[0]!=wf_get32(aFrame+16) || sum[1]!=wf_get32(aFrame+20) ) break;
    if( wf_get32(aFrame+4)!=0 ) w->mxCommit = i;
  }
  return SQLITE_OK;
}

/* Open the standard WAL for buffered reading. It must be the very file the
** caller holds locked (oldFile): reading by path a file that another
** process has just replaced would convert the wrong file. */
static int open_std(const waldio_syscalls *sys, const char *zPath,
                    const dio_file *oldFile, std_wal *w){
  struct stat st, stOld;
  u32 version = 0;
  memset(w, 0, sizeof(*w));
  w->fd = sys->xOpen(zPath, O_RDONLY|O_CLOEXEC, 0);
  if( w->fd<0 ) return waldio_errno(SQLITE_CANTOPEN, errno, "cannot read", zPath);
  if( sys->xFstat(w->fd, &st) || sys->xFstat(oldFile->fd, &stOld)
   || st.st_dev!=stOld.st_dev || st.st_ino!=stOld.st_ino ){
    return waldio_error(SQLITE_BUSY, "%s: the log was replaced while it was"
                        " being converted", zPath);
  }
  if( read_at(sys, w->fd, w->aHdr, WAL_HDR_BYTES, 0)
   || !wf_parse_sqlite_header(w->aHdr, &version, &w->page)
   || version!=WAL_FORMAT_VERSION ){
    return waldio_error(SQLITE_CANTOPEN, "%s: cannot read its WAL header", zPath);
  }
  w->nFrame = (u32)((st.st_size - WAL_HDR_BYTES)
                    / (w->page + WAL_FRAME_HDR_BYTES));
  return SQLITE_OK;
}

/* Copy frames 1..mxCommit into the new file's slots. */
static int copy_frames(const waldio_syscalls *sys, const char *zPath,
                       std_wal *w, dio_file *out, const wal_geometry *g,
                       u8 *aFrame, u8 *aSlot){
  u32 i;
  for(i=1; i<=w->mxCommit; i++){
    int rc;
    if( read_at(sys, w->fd, aFrame, w->page + WAL_FRAME_HDR_BYTES,
                wf_logical_frame_offset(w->page, i)) ){
      return waldio_error(SQLITE_IOERR_READ, "%s: frame %u vanished while"
                          " converting", zPath, i);
    }
    memset(aSlot, 0, g->slot);
    if( wf_logical_to_slot(g, aSlot, 0, w->page + WAL_FRAME_HDR_BYTES, aFrame) ){
      return waldio_error(SQLITE_CANTOPEN, "%s: frame %u (page %u) uses the"
          " last 24 reserved bytes of its page, which header embedding needs."
          " Checkpoint this WAL with stock SQLite first (PRAGMA"
          " wal_checkpoint(TRUNCATE)) or open with waldio_layout=pad4k",
          zPath, i, wf_get32(aFrame));
    }
    rc = dio_write(out, aSlot, g->slot, wf_slot_offset(g, i), 0);
    if( rc ) return rc;
  }
  return SQLITE_OK;
}

static int write_new_log(const waldio_syscalls *sys, const char *zPath,
                         const char *zTmp, std_wal *w, const waldio_options *o,
                         int layout, mode_t mode){
  dio_file out;
  wal_superblock sb;
  const char *zWhy;
  u8 *aFrame = 0, *aSlot = 0, *aMeta = 0;
  i64 size;
  int created, rc;

  rc = dio_open(&out, sys, zTmp, o->io, mode, &created);
  if( rc ) return rc;
  memset(&sb, 0, sizeof(sb));
  zWhy = wf_geometry(&sb.geo, (u32)layout, out.block, w->page);
  if( zWhy ){
    rc = waldio_error(SQLITE_CANTOPEN, "%s: cannot convert a WAL of %u-byte"
                      " pages: %s", zPath, w->page, zWhy);
    goto done;
  }
  sb.flags = SB_FLAG_HAS_HEADER | SB_FLAG_GUARD;
  memcpy(sb.sqlite_hdr, w->aHdr, WAL_HDR_BYTES);
  size = wf_slot_offset(&sb.geo, w->mxCommit + 1);
  if( size<o->prealloc_bytes ) size = o->prealloc_bytes;
  size = (size + out.block - 1) / out.block * out.block;
  aFrame = malloc(w->page + WAL_FRAME_HDR_BYTES);
  aSlot = dio_alloc(&out, sb.geo.slot);
  aMeta = dio_alloc(&out, out.block);
  if( !aFrame || !aSlot || !aMeta ){ rc = SQLITE_NOMEM; goto done; }
  rc = dio_truncate(&out, 0);
  if( rc==SQLITE_OK ){ dio_set_nocow(&out); rc = dio_zero_fill(&out, 0, size, 0); }
  if( rc==SQLITE_OK ) rc = copy_frames(sys, zPath, w, &out, &sb.geo, aFrame, aSlot);
  if( rc==SQLITE_OK ){
    wf_encode_block0(&sb, aMeta);
    rc = dio_write(&out, aMeta, out.block, 0, 0);
  }
  if( rc==SQLITE_OK ) rc = dio_fdatasync(&out);
done:
  free(aFrame);
  dio_free(aSlot);
  dio_free(aMeta);
  dio_close(&out);
  if( rc ) sys->xUnlink(zTmp);
  return rc;
}

int wal_convert_standard(const waldio_syscalls *sys, const char *zPath,
                         dio_file *oldFile, const waldio_options *o,
                         int layout){
  std_wal w;
  struct stat st;
  char zTmp[4200];
  u8 *aFrame;
  int rc;

  rc = open_std(sys, zPath, oldFile, &w);
  if( rc==SQLITE_OK ){
    aFrame = malloc(w.page + WAL_FRAME_HDR_BYTES);
    rc = aFrame ? scan_frames(sys, &w, aFrame) : SQLITE_NOMEM;
    free(aFrame);
  }
  if( rc==SQLITE_OK && sys->xFstat(oldFile->fd, &st) ){
    rc = waldio_errno(SQLITE_CANTOPEN, errno, "cannot stat", zPath);
  }
  if( rc==SQLITE_OK ){
    snprintf(zTmp, sizeof(zTmp), "%s.waldio-convert", zPath);
    rc = write_new_log(sys, zPath, zTmp, &w, o, layout, st.st_mode & 0777);
  }
  if( rc==SQLITE_OK && sys->xRename(zTmp, zPath) ){
    rc = waldio_errno(SQLITE_CANTOPEN, errno, "cannot rename converted log to", zPath);
    sys->xUnlink(zTmp);
  }
  if( rc==SQLITE_OK ) rc = dio_sync_dir(sys, zPath);
  if( w.fd>=0 ) sys->xClose(w.fd);
  if( rc ) return rc;
  sqlite3_log(SQLITE_NOTICE, "waldio: converted the standard-format WAL %s"
              " (%u committed frames kept) to the waldio layout", zPath,
              w.mxCommit);
  return WALDIO_CONVERTED;
}
