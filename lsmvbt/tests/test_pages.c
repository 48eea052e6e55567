/*
** test_pages.c — what a commit writes, counted at the system-call table:
** the slides' claim that LS-MVBT "flushes only one dirty page" per insert.
**
** With all optimizations on, a single-row commit that does not split writes
** exactly one page (one pwrite of page_size bytes) and calls fdatasync
** once; ascending inserts of Mobibench's 100-byte rows split a leaf every
** ~30 rows, and such a commit writes two pages (new leaf + parent: the old
** leaf is not written). Updates stay at one page thanks to the reserved
** space and lazy GC. Each optimization switched off costs what the slides
** say it costs: metadata embedding off adds the header page to every
** commit; the legacy split writes the old node too; without the reserve,
** updates of full leaves split.
**
** Usage: lsmvbt_test_pages
*/
#include "test_util.h"

#include <fcntl.h>

static char g_watch[512];
static int g_fd = -1;
static uint64_t g_page_writes, g_other_writes, g_syncs, g_zero_bytes;
static uint32_t g_ps;

static int rec_open(const char *path, int flags, mode_t mode){
  int fd = open(path, flags, mode);
  if( fd>=0 && strcmp(path, g_watch)==0 ) g_fd = fd;
  return fd;
}
static ssize_t rec_pwrite(int fd, const void *buf, size_t n, off_t off){
  if( fd==g_fd ){
    size_t i;
    int zero = 1;
    for(i=0; i<n && zero; i++) if( ((const uint8_t*)buf)[i] ) zero = 0;
    if( zero ) g_zero_bytes += n;                       /* preallocation */
    else if( n==g_ps && off%g_ps==0 ) g_page_writes++;
    else g_other_writes++;
  }
  return pwrite(fd, buf, n, off);
}
static int rec_fdatasync(int fd){
  if( fd==g_fd ) g_syncs++;
  return 0;      /* counted, not done: this test is about what is written */
}

typedef struct dist { uint64_t n[8]; uint64_t syncs_max, commits; } dist;

static void dist_print(const char *name, const dist *d){
  int i;
  fprintf(stderr, "%-44s commits by pages written:", name);
  for(i=1; i<8; i++) if( d->n[i] ) fprintf(stderr, " %d:%llu", i, (unsigned long long)d->n[i]);
  fprintf(stderr, "  (max %llu fdatasync/commit)\n", (unsigned long long)d->syncs_max);
}

/* One autocommit operation; returns the pages it wrote, checks the rest. */
static int one_commit(lsmvbt_db *db, int kind, int64_t key, dist *d){
  static uint8_t val[100];
  uint64_t p0 = g_page_writes, s0 = g_syncs, z0 = g_zero_bytes, o0 = g_other_writes, pages, syncs;
  lsmvbt_stats st;
  int i;
  for(i=0; i<100; i++) val[i] = (uint8_t)('a' + (key + i) % 26);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  if( kind==0 ) CHECK_RC(db, lsmvbt_put(db, key, val, 100, LSMVBT_INSERT), LSMVBT_OK);
  if( kind==1 ){ val[0] ^= 1; CHECK_RC(db, lsmvbt_put(db, key, val, 100, LSMVBT_UPDATE), LSMVBT_OK); }
  if( kind==2 ) CHECK_RC(db, lsmvbt_delete(db, key), LSMVBT_OK);
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
  pages = g_page_writes - p0;
  syncs = g_syncs - s0;
  if( g_zero_bytes>z0 ) syncs--;          /* the preallocation's own flush */
  CHECK_EQ(g_other_writes - o0, 0);
  CHECK_EQ(syncs, 1);
  lsmvbt_get_stats(db, &st);
  CHECK_EQ(st.last_commit_pages, pages);
  if( pages<8 ) d->n[pages]++;
  if( syncs>d->syncs_max ) d->syncs_max = syncs;
  d->commits++;
  return (int)pages;
}

static void workload(const char *name, lsmvbt_options *o, dist *ins, dist *upd, dist *del){
  lsmvbt_db *db = 0;
  char path[600];
  int i, rc;
  snprintf(path, sizeof(path), "%s", g_watch);
  memset(ins, 0, sizeof(*ins));
  memset(upd, 0, sizeof(*upd));
  memset(del, 0, sizeof(*del));
  rc = lsmvbt_open(path, LSMVBT_OPEN_TRUNCATE, o, &db);
  CHECK_RC(db, rc, LSMVBT_OK);
  if( rc ){ lsmvbt_close(db); return; }
  g_ps = o->page_size;
  /* Mobibench: 1,000 single-row inserts of 100 bytes, ascending ids. */
  for(i=1; i<=1000; i++) one_commit(db, 0, i, ins);
  /* Then 1,000 updates and 300 deletes of random rows. */
  for(i=0; i<1000; i++) one_commit(db, 1, 1 + rng_below(1000), upd);
  for(i=0; i<300; i++){
    int64_t k = 1 + rng_below(1000);
    const void *v;
    uint32_t n;
    if( lsmvbt_get(db, k, &v, &n)==LSMVBT_OK ) one_commit(db, 2, k, del);
  }
  CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
  lsmvbt_close(db);
  {
    char label[128];
    snprintf(label, sizeof(label), "%s, inserts", name); dist_print(label, ins);
    snprintf(label, sizeof(label), "%s, updates", name); dist_print(label, upd);
    snprintf(label, sizeof(label), "%s, deletes", name); dist_print(label, del);
  }
}

int main(void){
  char dir[300];
  lsmvbt_options o;
  dist ins, upd, del, ins2, upd2, del2;
  lsmvbt_io io = *lsmvbt_io_default();
  io.xOpen = rec_open;
  io.xPwrite = rec_pwrite;
  io.xFdatasync = rec_fdatasync;
  rng_seed(99);
  test_dir(dir, sizeof(dir), "pages");
  snprintf(g_watch, sizeof(g_watch), "%s/pages.lsmvbt", dir);

  /* All optimizations on (the defaults). */
  lsmvbt_options_default(&o);
  o.io = &io;
  workload("all optimizations", &o, &ins, &upd, &del);
  /* Splits are the only multi-page commits: 1,000 rows of ~128 bytes in
  ** 4 KiB leaves split about 1000/29 times, each writing new leaf + parent. */
  CHECK(ins.n[1] >= 950);
  CHECK_EQ(ins.n[1] + ins.n[2], 1000);
  CHECK_EQ(upd.n[1], upd.commits);
  CHECK_EQ(del.n[1], del.commits);
  CHECK(del.commits>100);

  /* Metadata embedding off: the header page joins every commit. */
  lsmvbt_options_default(&o);
  o.io = &io;
  o.embed_metadata = 0;
  workload("metadata embedding off", &o, &ins2, &upd2, &del2);
  CHECK_EQ(ins2.n[2], ins.n[1]);
  CHECK_EQ(ins2.n[3], ins.n[2]);
  CHECK_EQ(upd2.n[2], upd2.commits);

  /* Lazy split off: a split also rewrites the old leaf. */
  lsmvbt_options_default(&o);
  o.io = &io;
  o.lazy_split = 0;
  workload("lazy split off (legacy MVBT split)", &o, &ins2, &upd2, &del2);
  CHECK_EQ(ins2.n[1], ins.n[1]);
  CHECK_EQ(ins2.n[2], 0);
  CHECK(ins2.n[3] + ins2.n[4] == ins.n[2]);

  /* Reserved space off: an update of a full leaf cannot wait for the lazy
  ** GC of its old version, so the leaf splits. */
  lsmvbt_options_default(&o);
  o.io = &io;
  o.reserve_bytes = 0;
  workload("reserved space off", &o, &ins2, &upd2, &del2);
  CHECK(upd2.n[1] < upd.n[1]);

  /* Lazy GC off: the periodic pass rewrites every node holding garbage. */
  lsmvbt_options_default(&o);
  o.io = &io;
  o.lazy_gc = 0;
  workload("lazy GC off (periodic pass every 64)", &o, &ins2, &upd2, &del2);
  CHECK(upd2.n[2] + upd2.n[3] + upd2.n[4] + upd2.n[5] + upd2.n[6] + upd2.n[7] > 0);

  /* Redistribution on: inserts into full leaves with room in a sibling
  ** write leaf, sibling and parent. Random-order inserts show it. */
  {
    lsmvbt_db *db = 0;
    dist d1, d2;
    int pass;
    for(pass=0; pass<2; pass++){
      dist *d = pass ? &d2 : &d1;
      int i;
      lsmvbt_options_default(&o);
      o.io = &io;
      o.redistribute = pass;
      memset(d, 0, sizeof(*d));
      rng_seed(5);
      CHECK_RC(db, lsmvbt_open(g_watch, LSMVBT_OPEN_TRUNCATE, &o, &db), LSMVBT_OK);
      for(i=0; i<1000; i++){
        int64_t k = (int64_t)rng_below(1000000);
        const void *v;
        uint32_t n;
        if( lsmvbt_get(db, k, &v, &n)!=LSMVBT_OK ) one_commit(db, 0, k, d);
      }
      lsmvbt_close(db);
      db = 0;
    }
    dist_print("random inserts, redistribution disabled", &d1);
    dist_print("random inserts, redistribution enabled", &d2);
    CHECK(d2.n[3] > 0);            /* leaf + sibling + parent */
  }

  lsmvbt_unlink(g_watch, 0);
  rmdir(dir);
  return CHECK_DONE();
}
