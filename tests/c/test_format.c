/*
** test_format.c — unit tests of the physical format (src/wal_format.c):
** geometry of every layout and page size, the logical<->slot mapping, the
** guard header (which stock SQLite must reject) and superblock encoding.
*/
#include "check.h"
#include "wal_format.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const u32 aLayout[] = { 1, 2, 3 };
static const u32 aPage[] = { 512, 1024, 4096, 8192, 16384, 32768, 65536 };

static void test_geometry(void){
  size_t i, j;
  for(i=0; i<3; i++){
    for(j=0; j<sizeof(aPage)/sizeof(aPage[0]); j++){
      wal_geometry g;
      const char *zWhy = wf_geometry(&g, aLayout[i], 4096, aPage[j]);
      if( aLayout[i]==1 && aPage[j]<4096 ){
        CHECK(zWhy!=0);                   /* embed needs whole blocks */
        continue;
      }
      CHECK(zWhy==0);
      CHECK(g.area % 4096==0);
      CHECK(g.slot % 4096==0);
      CHECK(g.page_in_slot % 4096==0);
      CHECK(g.slot >= g.page);
      if( aLayout[i]==1 ){
        CHECK_EQ(g.slot, aPage[j]);          /* one frame = one page */
        CHECK_EQ(g.hdr_in_slot, aPage[j] - 24);
      }else{
        u32 unit = aLayout[i]==2 ? 4096 : 8192;
        CHECK_EQ(g.area, unit);
        CHECK(g.slot % unit==0);
        CHECK(g.slot >= 4096 + aPage[j]);
        CHECK(g.slot < 4096 + aPage[j] + unit);
      }
      /* Frames never overlap and stay aligned. */
      CHECK_EQ(wf_slot_offset(&g, 2) - wf_slot_offset(&g, 1), g.slot);
      CHECK_EQ(wf_slot_offset(&g, 1), g.area);
    }
  }
  {
    wal_geometry g;
    CHECK(wf_geometry(&g, 1, 3000, 4096)!=0);   /* block not a power of 2 */
    CHECK(wf_geometry(&g, 1, 4096, 5000)!=0);
    CHECK(wf_geometry(&g, 9, 4096, 4096)!=0);
    CHECK(wf_geometry(&g, 1, 4096, 0)==0);      /* page not known yet */
    CHECK_EQ(g.slot, 0);
  }
}

static void test_paper_sizes(void){
  /* The WALDIO paper's figures: 4 KiB pages, 4 KiB blocks. */
  wal_geometry g;
  wf_geometry(&g, 1, 4096, 4096);
  CHECK_EQ(g.slot, 4096);                       /* header embedding */
  wf_geometry(&g, 2, 4096, 4096);
  CHECK_EQ(g.slot, 8192);                       /* 4 KiB padding */
  wf_geometry(&g, 3, 4096, 4096);
  CHECK_EQ(g.slot, 8192);                       /* 8 KiB padding ... */
  CHECK_EQ(wf_slot_offset(&g, 2) % 8192, 0);    /* ... frames 8 KiB aligned */
  wf_geometry(&g, 2, 4096, 8192);
  CHECK_EQ(g.slot, 12288);
  wf_geometry(&g, 3, 4096, 8192);
  CHECK_EQ(g.slot, 16384);
}

static void fill_random(u8 *p, size_t n, unsigned *seed){
  size_t i;
  for(i=0; i<n; i++) p[i] = (u8)rand_r(seed);
}

static void test_round_trip(void){
  size_t i, j;
  unsigned seed = 7;
  for(i=0; i<3; i++){
    for(j=2; j<sizeof(aPage)/sizeof(aPage[0]); j++){
      wal_geometry g;
      u32 P = aPage[j], lo, hi, k;
      /* size_t: P + 24 in u32 could wrap for all the compiler knows, and it
      ** then warned that memset(frame + P, ...) might leave the buffer. */
      size_t nFrame = (size_t)P + 24;
      u8 *frame = malloc(nFrame), *back = malloc(nFrame), *slot = calloc(1, 16 * 65536);
      if( !frame || !back || !slot ){ perror("malloc"); exit(2); }
      CHECK(wf_geometry(&g, aLayout[i], 4096, P)==0);
      fill_random(frame, P + 24, &seed);
      memset(frame + P, 0, 24);                    /* SQLite's zero tail (logical P..P+24) */
      CHECK(wf_logical_to_slot(&g, slot, 0, P + 24, frame)==0);
      wf_slot_to_logical(&g, slot, 0, P + 24, back);
      CHECK(memcmp(frame, back, P + 24)==0);
      /* Every sub-range reads back the same bytes. */
      for(k=0; k<200; k++){
        lo = (u32)rand_r(&seed) % (P + 24);
        hi = lo + 1 + (u32)rand_r(&seed) % (P + 24 - lo);
        wf_slot_to_logical(&g, slot, lo, hi, back);
        CHECK(memcmp(frame + lo, back, hi - lo)==0);
      }
      /* Page-only and header-only updates keep the other part. */
      fill_random(frame, 24, &seed);
      CHECK(wf_logical_to_slot(&g, slot, 0, 24, frame)==0);
      wf_slot_to_logical(&g, slot, 0, P + 24, back);
      CHECK(memcmp(frame, back, P + 24)==0);
      fill_random(frame + 24, P - 24, &seed);
      CHECK(wf_logical_to_slot(&g, slot, 24, P + 24, frame + 24)==0);
      wf_slot_to_logical(&g, slot, 0, P + 24, back);
      CHECK(memcmp(frame, back, P + 24)==0);
      /* A non-zero tail is refused by embed, stored by the pad layouts. */
      frame[24 + P - 1] = 0x5a;
      if( g.layout==1 ){
        CHECK(wf_logical_to_slot(&g, slot, 24, P + 24, frame + 24)!=0);
      }else{
        CHECK(wf_logical_to_slot(&g, slot, 24, P + 24, frame + 24)==0);
        wf_slot_to_logical(&g, slot, 0, P + 24, back);
        CHECK(memcmp(frame, back, P + 24)==0);
      }
      free(frame); free(back); free(slot);
    }
  }
}

/* A WAL header made by SQLite itself, read back from a real -wal file. */
static int sqlite_wal_header(u8 *aHdr){
  char zPath[] = "/tmp/waldio-format-XXXXXX";
  char zDb[64], zWal[80];
  sqlite3 *db;
  FILE *f;
  int fd = mkstemp(zPath), ok;
  close(fd);
  snprintf(zDb, sizeof(zDb), "%s", zPath);
  unlink(zDb);
  sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, "unix");
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, 0);
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0);
  snprintf(zWal, sizeof(zWal), "%s-wal", zDb);
  f = fopen(zWal, "rb");
  ok = f && fread(aHdr, 1, 32, f)==32;
  if( f ) fclose(f);
  sqlite3_close(db);
  unlink(zDb); unlink(zWal);
  snprintf(zWal, sizeof(zWal), "%s-shm", zDb);
  unlink(zWal);
  return ok;
}

static void test_headers(void){
  u8 aHdr[32], aGuard[32];
  u32 version = 0, page = 0;
  CHECK(sqlite_wal_header(aHdr));
  CHECK(wf_parse_sqlite_header(aHdr, &version, &page));   /* our checksum == SQLite's */
  CHECK_EQ(version, WAL_FORMAT_VERSION);
  CHECK_EQ(page, 4096);
  /* The guard is a valid header SQLite's recovery would reject on version. */
  wf_make_guard(aHdr, 0, aGuard);
  CHECK(wf_parse_sqlite_header(aGuard, &version, &page));
  CHECK(version!=WAL_FORMAT_VERSION);
  CHECK_EQ(page, 4096);
  CHECK(memcmp(aGuard+8, aHdr+8, 16)==0);                 /* page, ckpt, salts */
  wf_make_guard(0, 8192, aGuard);
  CHECK(wf_parse_sqlite_header(aGuard, &version, &page));
  CHECK_EQ(page, 8192);
  aHdr[17] ^= 1;                                          /* damaged salt */
  CHECK(!wf_parse_sqlite_header(aHdr, &version, &page));
}

static void test_superblock(void){
  wal_superblock sb, back;
  u8 meta[WALDIO_META_BYTES];
  int i;
  memset(&sb, 0, sizeof(sb));
  CHECK(wf_geometry(&sb.geo, 2, 4096, 8192)==0);
  sb.flags = SB_FLAG_HAS_HEADER | SB_FLAG_GUARD;
  CHECK(sqlite_wal_header(sb.sqlite_hdr));
  wf_put32(sb.sqlite_hdr+8, 8192);        /* any page size, checksum unused here */
  wf_encode_block0(&sb, meta);
  CHECK_EQ(wf_decode_block0(meta, &back), 1);
  CHECK(memcmp(&back.geo, &sb.geo, sizeof(sb.geo))==0);
  CHECK_EQ(back.flags, sb.flags);
  CHECK(memcmp(back.sqlite_hdr, sb.sqlite_hdr, 32)==0);
  CHECK_EQ(wf_get32(meta+4), WALDIO_GUARD_VERSION);     /* F4 */
  /* Empty and unused: no guard, so stock SQLite may open the database. */
  sb.flags = 0;
  wf_encode_block0(&sb, meta);
  for(i=0; i<32; i++) CHECK(meta[i]==0);
  CHECK_EQ(wf_decode_block0(meta, &back), 1);
  /* Any damaged byte of the superblock is detected. */
  for(i=32; i<SB_END; i++){
    wf_encode_block0(&sb, meta);
    meta[i] ^= 0x10;
    CHECK(wf_decode_block0(meta, &back)!=1);
  }
  memset(meta, 0, sizeof(meta));
  CHECK_EQ(wf_decode_block0(meta, &back), 0);            /* none at all */
}

static void test_logical_sizes(void){
  wal_geometry g;
  wf_geometry(&g, 1, 4096, 4096);
  CHECK_EQ(wf_logical_size(&g, 4096 + 10*4096, 1), 32 + 10*4120);
  CHECK_EQ(wf_logical_size(&g, 4096 + 10*4096, 0), 0);
  CHECK_EQ(wf_physical_for_logical(&g, 32 + 3*4120), 4096 + 3*4096);
  CHECK_EQ(wf_physical_for_logical(&g, 32 + 3*4120 + 1), 4096 + 4*4096);
  CHECK_EQ(wf_physical_for_logical(&g, 0), 4096);
}

int main(void){
  test_geometry();
  test_paper_sizes();
  test_round_trip();
  test_headers();
  test_superblock();
  test_logical_sizes();
  return CHECK_DONE();
}
