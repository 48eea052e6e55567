/*
** wal_format.c — the physical waldio log format (see wal_format.h and
** docs/format.md). Pure functions: no I/O, no allocation, no locks.
**
** Invariants this file defines and every other file relies on:
**   F1  Frame i (1-based) occupies the slot [A + (i-1)*S, A + i*S). In the
**       slotted layouts (embed, pad4k, pad8k) A, S and every slot offset
**       are multiples of the block size B; the standard layout keeps
**       SQLite's own offsets (A = 32, S = P+24). Where each layout puts the
**       header and the page inside a slot is its own file's story
**       (wal_layout.h); wf_frame_runs() reads it from the geometry alone.
**   F2  (slotted layouts) Block 0 holds the guard header and superblock:
**   F3  All block-0 metadata fits in the first 512-byte sector, so a torn
**       block-0 write leaves either the old or the new metadata.
**   F4  Bytes 0..31 hold a guard header -- a WAL header whose version is not
**       3007000 -- whenever the log holds frames or a waldio process may be
**       using it; stock SQLite then fails with SQLITE_CANTOPEN instead of
**       reading the physical layout as a WAL. Only a clean close of the last
**       connection, with every frame checkpointed, leaves them zero.
*/
#include "wal_format.h"
#include "wal_layout.h"

#include <string.h>

u32 wf_get32(const u8 *p){
  return ((u32)p[0]<<24) | ((u32)p[1]<<16) | ((u32)p[2]<<8) | (u32)p[3];
}

void wf_put32(u8 *p, u32 v){
  p[0] = (u8)(v>>24); p[1] = (u8)(v>>16); p[2] = (u8)(v>>8); p[3] = (u8)v;
}

static u32 get32le(const u8 *p){
  return (u32)p[0] | ((u32)p[1]<<8) | ((u32)p[2]<<16) | ((u32)p[3]<<24);
}

void wf_checksum(int bigEndian, const u8 *a, size_t n, const u32 *in, u32 *out){
  u32 s1 = in ? in[0] : 0;
  u32 s2 = in ? in[1] : 0;
  size_t i;
  for(i=0; i+8<=n; i+=8){
    u32 x0 = bigEndian ? wf_get32(a+i) : get32le(a+i);
    u32 x1 = bigEndian ? wf_get32(a+i+4) : get32le(a+i+4);
    s1 += x0 + s2;
    s2 += x1 + s1;
  }
  out[0] = s1;
  out[1] = s2;
}

static int is_pow2(u32 x){ return x && (x & (x-1))==0; }

const char *wf_geometry(wal_geometry *g, u32 layout, u32 block, u32 page){
  const wal_layout *pLayout = wal_layout_find((int)layout);
  memset(g, 0, sizeof(*g));
  if( !is_pow2(block) || block<512 || block>65536 ){
    return "block size must be a power of two between 512 and 65536";
  }
  if( page!=0 && (!is_pow2(page) || page<512 || page>65536) ){
    return "page size must be a power of two between 512 and 65536";
  }
  if( !pLayout ) return "unknown layout";
  g->layout = layout;
  g->block = block;
  g->page = page;
  g->page_stored = page;
  return pLayout->xGeometry(g, block, page);
}

u32 wf_choose_layout(u32 asked, u32 block, u32 page, u32 reserve,
                     const char **pzWhy){
  wal_geometry g;
  if( asked==WALDIO_LAYOUT_AUTO_ || asked==WALDIO_LAYOUT_STANDARD_ ){
    *pzWhy = asked ? "asked for (waldio_layout)"
                   : "a new log: SQLite's own WAL format, which stock SQLite"
                     " and tools that read -wal share";
    return WALDIO_LAYOUT_STANDARD_;
  }
  if( asked!=WALDIO_LAYOUT_EMBED_ ){
    *pzWhy = "asked for (waldio_layout)";
    return asked;
  }
  if( page!=0 && (wf_geometry(&g, WALDIO_LAYOUT_EMBED_, block, page)
                  || page % block) ){
    *pzWhy = "the page size is smaller than the file system block or not a"
             " multiple of it, so a page cannot carry its frame header in"
             " whole blocks";
    return 0;
  }
  if( page!=0 && reserve<WAL_FRAME_HDR_BYTES ){
    *pzWhy = "the database has fewer than 24 reserved bytes per page, where"
             " embedding stores the frame header (`waldio convert` adds them)";
    return 0;
  }
  *pzWhy = page ? "asked for (waldio_layout); the pages fill whole blocks and"
                  " have 24 reserved bytes for the frame header"
                : "asked for (waldio_layout); a new database gets 24 reserved"
                  " bytes per page";
  return WALDIO_LAYOUT_EMBED_;
}

i64 wf_slot_offset(const wal_geometry *g, u32 frame){
  return (i64)g->area + (i64)(frame-1) * (i64)g->slot;
}

i64 wf_logical_frame_offset(u32 page, u32 frame){
  return WAL_HDR_BYTES + (i64)(frame-1) * (i64)(page + WAL_FRAME_HDR_BYTES);
}

i64 wf_logical_size(const wal_geometry *g, i64 phys, int hasHeader){
  i64 nSlot;
  if( !hasHeader || g->slot==0 || phys<g->area ) return 0;
  nSlot = (phys - g->area) / g->slot;
  return WAL_HDR_BYTES + nSlot * (i64)(g->page + WAL_FRAME_HDR_BYTES);
}

i64 wf_physical_for_logical(const wal_geometry *g, i64 logical){
  i64 frameBytes, nFrame;
  if( logical<=WAL_HDR_BYTES || g->slot==0 ) return g->area;
  frameBytes = g->page + WAL_FRAME_HDR_BYTES;
  nFrame = (logical - WAL_HDR_BYTES + frameBytes - 1) / frameBytes;
  return g->area + nFrame * (i64)g->slot;
}

int wf_parse_sqlite_header(const u8 *h, u32 *version, u32 *page){
  u32 magic = wf_get32(h);
  u32 sum[2];
  u32 pg;
  if( magic!=WAL_MAGIC_LE && magic!=WAL_MAGIC_BE ) return 0;
  pg = wf_get32(h+8);
  if( pg==1 ) pg = 65536;     /* never written by SQLite, but harmless */
  if( !is_pow2(pg) || pg<512 || pg>65536 ) return 0;
  wf_checksum(magic & 1, h, 24, 0, sum);
  if( sum[0]!=wf_get32(h+24) || sum[1]!=wf_get32(h+28) ) return 0;
  *version = wf_get32(h+4);
  *page = pg;
  return 1;
}

void wf_make_guard(const u8 *sqliteHdr, u32 page, u8 *guard){
  u32 sum[2];
  if( sqliteHdr ){
    memcpy(guard, sqliteHdr, WAL_HDR_BYTES);
  }else{
    memset(guard, 0, WAL_HDR_BYTES);
    wf_put32(guard, WAL_MAGIC_LE);
    wf_put32(guard+8, page ? page : 4096);
  }
  wf_put32(guard+4, WALDIO_GUARD_VERSION);
  wf_checksum(wf_get32(guard) & 1, guard, 24, 0, sum);
  wf_put32(guard+24, sum[0]);
  wf_put32(guard+28, sum[1]);
}

static void sb_checksum(const u8 *meta, u32 *sum){
  wf_checksum(1, meta+SB_OFF_MAGIC, SB_OFF_CKSUM-SB_OFF_MAGIC, 0, sum);
}

void wf_encode_block0(const wal_superblock *sb, u8 *meta){
  u32 sum[2];
  memset(meta, 0, WALDIO_META_BYTES);
  if( sb->flags & SB_FLAG_HAS_HEADER ){
    wf_make_guard(sb->sqlite_hdr, 0, meta+SB_OFF_GUARD);
    memcpy(meta+SB_OFF_SQLHDR, sb->sqlite_hdr, WAL_HDR_BYTES);
  }else if( sb->flags & SB_FLAG_GUARD ){
    wf_make_guard(0, sb->geo.page, meta+SB_OFF_GUARD);
  }
  memcpy(meta+SB_OFF_MAGIC, WALDIO_SB_MAGIC, 8);
  wf_put32(meta+SB_OFF_FORMAT, WALDIO_FORMAT);
  wf_put32(meta+SB_OFF_LAYOUT, sb->geo.layout);
  wf_put32(meta+SB_OFF_BLOCK, sb->geo.block);
  wf_put32(meta+SB_OFF_AREA, sb->geo.area);
  wf_put32(meta+SB_OFF_PAGE, sb->geo.page);
  wf_put32(meta+SB_OFF_SLOT, sb->geo.slot);
  wf_put32(meta+SB_OFF_FLAGS, sb->flags);
  sb_checksum(meta, sum);
  wf_put32(meta+SB_OFF_CKSUM, sum[0]);
  wf_put32(meta+SB_OFF_CKSUM+4, sum[1]);
}

int wf_decode_block0(const u8 *meta, wal_superblock *sb){
  u32 sum[2];
  wal_geometry g;
  memset(sb, 0, sizeof(*sb));
  if( memcmp(meta+SB_OFF_MAGIC, WALDIO_SB_MAGIC, 8)!=0 ) return 0;
  sb_checksum(meta, sum);
  if( sum[0]!=wf_get32(meta+SB_OFF_CKSUM)
   || sum[1]!=wf_get32(meta+SB_OFF_CKSUM+4) ){
    return -1;
  }
  sb->format = wf_get32(meta+SB_OFF_FORMAT);
  sb->flags = wf_get32(meta+SB_OFF_FLAGS);
  if( sb->format!=WALDIO_FORMAT ) return 1;   /* caller reports the version */
  if( wf_geometry(&g, wf_get32(meta+SB_OFF_LAYOUT), wf_get32(meta+SB_OFF_BLOCK),
                  wf_get32(meta+SB_OFF_PAGE))
   || g.area!=wf_get32(meta+SB_OFF_AREA)
   || g.slot!=wf_get32(meta+SB_OFF_SLOT) ){
    return -1;
  }
  sb->geo = g;
  if( sb->flags & SB_FLAG_HAS_HEADER ){
    memcpy(sb->sqlite_hdr, meta+SB_OFF_SQLHDR, WAL_HDR_BYTES);
    if( g.page==0 || wf_get32(sb->sqlite_hdr+8)!=g.page ) return -1;
  }
  return 1;
}

int wf_decode_block0_torn(const u8 *meta, wal_superblock *sb){
  u8 copy[WALDIO_META_BYTES];
  u32 sum[2], version = 0, page = 0;
  int hasHeader;
  static const u8 zero[WAL_HDR_BYTES];
  /* The fields a block-0 write changes are the flags, the SQLite header
  ** copy and the checksum. The copy carries SQLite's own checksum: whole,
  ** or all zero (no generation), it is what the log holds; then the flags
  ** follow from it, and the rest must be as wf_decode_block0 wants it. */
  if( memcmp(meta+SB_OFF_SQLHDR, zero, WAL_HDR_BYTES)==0 ){
    hasHeader = 0;
  }else if( wf_parse_sqlite_header(meta+SB_OFF_SQLHDR, &version, &page)
         && version==WAL_FORMAT_VERSION ){
    hasHeader = 1;
  }else{
    return 0;
  }
  memcpy(copy, meta, sizeof(copy));
  wf_put32(copy+SB_OFF_FLAGS, hasHeader ? SB_FLAG_HAS_HEADER : 0);
  sb_checksum(copy, sum);
  wf_put32(copy+SB_OFF_CKSUM, sum[0]);
  wf_put32(copy+SB_OFF_CKSUM+4, sum[1]);
  return wf_decode_block0(copy, sb)>0 && sb->format==WALDIO_FORMAT;
}

const char *wf_block0_damage(const u8 *meta){
  wal_superblock sb;
  u32 sum[2], version = 0, page = 0;
  if( memcmp(meta+SB_OFF_MAGIC, WALDIO_SB_MAGIC, 8)!=0 ){
    if( wf_parse_sqlite_header(meta, &version, &page)
     && version==WALDIO_GUARD_VERSION ){
      return "bytes 32..39 should hold the superblock magic \"WALDIOSB\" (bytes"
             " 0..31 hold waldio's guard header)";
    }
    return 0;
  }
  sb_checksum(meta, sum);
  if( sum[0]!=wf_get32(meta+SB_OFF_CKSUM)
   || sum[1]!=wf_get32(meta+SB_OFF_CKSUM+4) ){
    return "the superblock checksum (bytes 104..111) does not match bytes"
           " 32..103: at least one byte of the superblock changed";
  }
  if( wf_decode_block0(meta, &sb)>0 ) return 0;
  if( wf_get32(meta+SB_OFF_FLAGS) & SB_FLAG_HAS_HEADER ){
    return "the superblock's geometry (layout, block, header area, page or"
           " slot size, bytes 44..63) or its copy of SQLite's header (bytes"
           " 72..103) is inconsistent";
  }
  return "the superblock's geometry (layout, block, header area, page or slot"
         " size, bytes 44..63) is inconsistent";
}

int wf_tail_is_zero(const u8 *page, u32 pageSize){
  static const u8 zero[WAL_FRAME_HDR_BYTES];
  return memcmp(page + pageSize - WAL_FRAME_HDR_BYTES, zero,
                WAL_FRAME_HDR_BYTES)==0;
}

/* Where logical frame byte x (0 <= x < P+24) lives in the slot, or -1 for
** a page byte the slot does not store (past page_stored: the embed
** layout's tail, logically always zero). */
static i64 slot_pos(const wal_geometry *g, u32 x){
  u32 j;
  if( x<WAL_FRAME_HDR_BYTES ) return g->hdr_in_slot + x;
  j = x - WAL_FRAME_HDR_BYTES;
  if( j>=g->page_stored ) return -1;
  return g->page_in_slot + j;
}

/* Split [lo,hi) into runs that are contiguous in the slot (or all tail). */
static u32 run_end(const wal_geometry *g, u32 x, u32 hi){
  u32 tailStart = WAL_FRAME_HDR_BYTES + g->page_stored;
  u32 end = hi;
  if( x<WAL_FRAME_HDR_BYTES ){
    if( end>WAL_FRAME_HDR_BYTES ) end = WAL_FRAME_HDR_BYTES;
  }else if( x<tailStart ){
    if( end>tailStart ) end = tailStart;
  }
  return end;
}

int wf_frame_runs(const wal_geometry *g, u32 lo, u32 hi, wf_run *aRun){
  int n = 0;
  u32 x = lo;
  while( x<hi ){
    u32 end = run_end(g, x, hi);
    aRun[n].lo = x;
    aRun[n].n = end - x;
    aRun[n].inSlot = slot_pos(g, x);
    n++;
    x = end;
  }
  return n;
}

void wf_slot_to_logical(const wal_geometry *g, const u8 *slot, u32 lo, u32 hi,
                        u8 *out){
  u32 x = lo;
  while( x<hi ){
    u32 end = run_end(g, x, hi);
    i64 pos = slot_pos(g, x);
    if( pos<0 ){
      memset(out + (x-lo), 0, end - x);
    }else{
      memcpy(out + (x-lo), slot + pos, end - x);
    }
    x = end;
  }
}

int wf_logical_to_slot(const wal_geometry *g, u8 *slot, u32 lo, u32 hi,
                       const u8 *in){
  u32 x = lo;
  while( x<hi ){
    u32 end = run_end(g, x, hi);
    i64 pos = slot_pos(g, x);
    if( pos<0 ){
      u32 k;
      for(k=x; k<end; k++){
        if( in[k-lo]!=0 ) return 1;
      }
    }else{
      memcpy(slot + pos, in + (x-lo), end - x);
    }
    x = end;
  }
  return 0;
}
