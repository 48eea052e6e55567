/*
** layout_embed.c — header embedding: one frame = one page = whole blocks
** (docs/format.md §3).
**
**   block 0        guard header + superblock (log_superblock.c)
**   frame i        the page's first P-24 bytes, then the 24-byte frame
**                  header where the page's last 24 bytes would be
**
** SQLite's checksum covers the whole page, so the last 24 bytes of every
** page must be zero as SQLite wrote them (the database reserves them: 24
** reserved bytes per page, vfs.c gives a new database that asked for this
** layout its reserve); a read returns them as zeros again. A page whose
** tail is not zero belongs to another extension (checksums, encryption)
** and is refused, never stored (W2 in wal_file.c).
**
** Invariant E1: P is a multiple of the block size, so slots are whole
** blocks and a commit of n frames is one aligned direct write of n*P bytes.
*/
#include "wal_layout.h"
#include "log_superblock.h"
#include "errors.h"
#include "sqlite_api.h"

static const char *embed_geometry(wal_geometry *g, u32 block, u32 page){
  g->area = block;
  if( page && page<block ){
    return "header embedding needs a page size that is a multiple of the"
           " block size (page smaller than block)";
  }
  g->slot = page;
  g->hdr_in_slot = page ? page - WAL_FRAME_HDR_BYTES : 0;
  g->page_in_slot = 0;
  g->page_stored = page ? page - WAL_FRAME_HDR_BYTES : 0;
  return 0;
}

static int embed_check_frame(const wal_geometry *g, const u8 *aHdr,
                             const u8 *aPage, const char *zPath){
  u32 pgno = wf_get32(aHdr);
  if( pgno==1 && aPage[20]<WAL_FRAME_HDR_BYTES ){
    return waldio_error(SQLITE_IOERR_WRITE, "%s: the database has %u reserved"
        " bytes per page; header embedding needs at least 24. Convert it with"
        " `waldio convert` or use waldio_layout=pad4k", zPath,
        (unsigned)aPage[20]);
  }
  if( !wf_tail_is_zero(aPage, g->page) ){
    return waldio_error(SQLITE_IOERR_WRITE, "%s: page %u has non-zero bytes in"
        " its last 24 reserved bytes. Another extension (checksums, encryption)"
        " is using the reserved space that waldio's header embedding needs;"
        " open this database with waldio_layout=pad4k", zPath, pgno);
  }
  return SQLITE_OK;
}

const wal_layout wal_layout_embed = {
  WALDIO_LAYOUT_EMBED, "embed", LAYOUT_NEEDS_RESERVE,
  embed_geometry, embed_check_frame, sb_attach, sb_write_header,
  sb_read_header, sb_logical_size, sb_write_direct, sb_truncate,
  sb_close_clean
};
