/*
** layout_pad.c — the padding layouts, pad4k and pad8k (docs/format.md §3),
** for databases that cannot embed (no reserved bytes, pages smaller than a
** block) and for the paper's Fig. 13.
**
**   block 0        guard header + superblock (log_superblock.c)
**   frame i        the 24-byte frame header alone in the slot's first
**                  block, the page from the next block on, the slot padded
**                  to a multiple of 4 KiB (pad4k) or 8 KiB (pad8k), and of
**                  the block size
**
** Invariant P1: area and slot are multiples of the block size, so a commit
** of n frames is one aligned direct write of n slots. Any page size fits.
*/
#include "wal_layout.h"
#include "log_superblock.h"
#include "sqlite_api.h"

static u32 round_up(u32 x, u32 unit){ return (x + unit - 1) / unit * unit; }

static const char *pad_geometry(wal_geometry *g, u32 block, u32 page,
                                u32 unit){
  if( unit<block ) unit = block;
  g->area = unit;
  g->slot = page ? round_up(block + page, unit) : 0;
  g->hdr_in_slot = 0;
  g->page_in_slot = block;
  return 0;
}

static const char *pad4k_geometry(wal_geometry *g, u32 block, u32 page){
  return pad_geometry(g, block, page, 4096);
}

static const char *pad8k_geometry(wal_geometry *g, u32 block, u32 page){
  return pad_geometry(g, block, page, 8192);
}

static int pad_check_frame(const wal_geometry *g, const u8 *aHdr,
                           const u8 *aPage, const char *zPath){
  (void)g; (void)aHdr; (void)aPage; (void)zPath;
  return SQLITE_OK;                 /* the slot holds every byte as it is */
}

const wal_layout wal_layout_pad4k = {
  WALDIO_LAYOUT_PAD4K, "pad4k", 0,
  pad4k_geometry, pad_check_frame, sb_attach, sb_write_header,
  sb_read_header, sb_logical_size, sb_write_direct, sb_truncate,
  sb_close_clean
};

const wal_layout wal_layout_pad8k = {
  WALDIO_LAYOUT_PAD8K, "pad8k", 0,
  pad8k_geometry, pad_check_frame, sb_attach, sb_write_header,
  sb_read_header, sb_logical_size, sb_write_direct, sb_truncate,
  sb_close_clean
};
