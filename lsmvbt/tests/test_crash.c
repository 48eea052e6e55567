/*
** test_crash.c — crash consistency of the LS-MVBT engine. A recording
** lsmvbt_io table logs every write and fdatasync a workload makes on its
** file; crash images are then rebuilt from that log and recovered:
**
**   power loss (sync=full): every write before the last completed
**     fdatasync is durable; of the writes after it (one commit, or one
**     preallocation) any subset survives, in any order — none, all, every
**     prefix, each one dropped, random subsets — and a surviving write may
**     be torn at 512-byte sectors (each sector old or new).
**   a crash during recovery: the writes recovery itself makes (wiping an
**     interrupted commit) are dropped or torn in turn, and recovery runs
**     again.
**   process crash (sync=normal): every prefix of the write sequence.
**
** Each image must open to exactly the last durable version (lsmvbt_sync
** returned), or to the interrupted one if all of its pages made it — with
** identical contents, a clean lsmvbt_check, and a file that takes new
** commits and reopens.
**
** Usage: lsmvbt_test_crash [seed [transactions]]
*/
#include "test_util.h"

#include <fcntl.h>

#define EV_WRITE 1
#define EV_SYNC  2
#define EV_MARK  3

typedef struct ev { int type; off_t off; uint32_t len; uint8_t *data; int state; } ev;
typedef struct evlog { ev *a; int n, nalloc; } evlog;

static evlog g_main, g_sub, *g_log;
static int g_fd = -1;
static char g_watch[512];          /* the file whose I/O is recorded */
static lsmvbt_io g_rec_io;

static void log_push(evlog *l, int type, off_t off, const void *data, uint32_t len, int state){
  if( l->n==l->nalloc ){
    l->nalloc = l->nalloc ? l->nalloc*2 : 256;
    l->a = realloc(l->a, sizeof(ev)*(size_t)l->nalloc);
  }
  l->a[l->n].type = type;
  l->a[l->n].off = off;
  l->a[l->n].len = len;
  l->a[l->n].state = state;
  l->a[l->n].data = 0;
  if( data ){
    l->a[l->n].data = malloc(len);
    memcpy(l->a[l->n].data, data, len);
  }
  l->n++;
}
static void log_clear(evlog *l){
  int i;
  for(i=0; i<l->n; i++) free(l->a[i].data);
  l->n = 0;
}

static int rec_open(const char *path, int flags, mode_t mode){
  int fd = open(path, flags, mode);
  if( fd>=0 && strcmp(path, g_watch)==0 ) g_fd = fd;
  return fd;
}
static ssize_t rec_pwrite(int fd, const void *buf, size_t n, off_t off){
  if( fd==g_fd && g_log ) log_push(g_log, EV_WRITE, off, buf, (uint32_t)n, 0);
  return pwrite(fd, buf, n, off);
}
static int rec_fdatasync(int fd){
  if( fd==g_fd && g_log ) log_push(g_log, EV_SYNC, 0, 0, 0, 0);
  return 0;            /* the crash images are built from the log, not the disk */
}

/* ---- Images ----------------------------------------------------------------- */
typedef struct image { uint8_t *b; size_t n, nalloc; } image;

static void img_write(image *im, off_t off, const uint8_t *data, uint32_t len, uint32_t tear_mask){
  size_t end = (size_t)off + len;
  uint32_t s;
  if( end>im->nalloc ){
    size_t na = im->nalloc ? im->nalloc : 65536;
    while( na<end ) na *= 2;
    im->b = realloc(im->b, na);
    memset(im->b + im->nalloc, 0, na - im->nalloc);
    im->nalloc = na;
  }
  if( end>im->n ) im->n = end;
  for(s=0; s*512<len; s++){
    uint32_t k = len - s*512 < 512 ? len - s*512 : 512;
    if( tear_mask & (1u<<(s%32)) ) continue;            /* this sector kept its old bytes */
    memcpy(im->b + off + s*512, data + s*512, k);
  }
}
static void img_copy(image *dst, const image *src){
  if( dst->nalloc<src->nalloc ){
    dst->b = realloc(dst->b, src->nalloc);
    dst->nalloc = src->nalloc;
  }
  memcpy(dst->b, src->b, src->n);
  if( dst->nalloc>src->n ) memset(dst->b + src->n, 0, dst->nalloc - src->n);
  dst->n = src->n;
}
static void img_save(const image *im, const char *path){
  int fd;
  unlink(path);
  fd = open(path, O_RDWR|O_CREAT|O_TRUNC, 0644);
  if( fd<0 || (im->n && pwrite(fd, im->b, im->n, 0)!=(ssize_t)im->n) ){
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  close(fd);
}
static void img_load(image *im, const char *path){
  struct stat st;
  int fd = open(path, O_RDONLY);
  if( fd<0 || fstat(fd, &st) ){ fprintf(stderr, "cannot read %s\n", path); exit(2); }
  im->n = 0;
  img_write(im, 0, (const uint8_t*)"", 0, 0);
  if( st.st_size>0 ){
    uint8_t *tmp = malloc((size_t)st.st_size);
    if( pread(fd, tmp, (size_t)st.st_size, 0)!=st.st_size ){ fprintf(stderr, "short read\n"); exit(2); }
    img_write(im, 0, tmp, (uint32_t)st.st_size, 0);
    free(tmp);
  }
  close(fd);
}

/* ---- The workload --------------------------------------------------------------- */
static model *g_states;
static uint64_t *g_versions;      /* the version each state was committed as */
static int g_nstates;
static char g_path[512], g_crash[512];
static uint8_t g_val[70000];

static uint64_t version_of(lsmvbt_db *db){
  lsmvbt_stats st;
  lsmvbt_get_stats(db, &st);
  return st.version;
}

static int add_state(lsmvbt_db *db, const model *m){
  g_states = realloc(g_states, sizeof(model)*(size_t)(g_nstates+1));
  g_versions = realloc(g_versions, sizeof(uint64_t)*(size_t)(g_nstates+1));
  memset(&g_states[g_nstates], 0, sizeof(model));
  model_copy(&g_states[g_nstates], m);
  g_versions[g_nstates] = version_of(db);
  return g_nstates++;
}

/* Run ntx transactions, recording; a MARK follows every durable version. */
static void workload(const lsmvbt_options *o, int ntx, image *base){
  lsmvbt_db *db = 0;
  model committed = {0, 0}, txn = {0, 0};
  int t, rc;
  uint32_t maxlen;

  rc = lsmvbt_open(g_path, LSMVBT_OPEN_TRUNCATE, o, &db);
  CHECK_RC(db, rc, LSMVBT_OK);
  if( rc ){ lsmvbt_close(db); return; }
  img_load(base, g_path);
  model_init(&committed);
  add_state(db, &committed);
  g_log = &g_main;
  log_push(g_log, EV_MARK, 0, 0, 0, 0);
  maxlen = lsmvbt_max_value(db);
  for(t=0; t<ntx && !FAILED_ENOUGH(); t++){
    int nops = rng_below(3)==0 ? 1 + (int)rng_below(40) : 1, i, end = (int)rng_below(10);
    uint64_t v0 = version_of(db);
    CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
    model_copy(&txn, &committed);
    for(i=0; i<nops; i++){
      int k = (int)rng_below((uint32_t)g_nkeys);
      if( rng_below(4)==0 ){
        rc = lsmvbt_delete(db, g_keys[k]);
        CHECK_RC(db, rc, txn.v[k].has ? LSMVBT_OK : LSMVBT_NOTFOUND);
        model_del(&txn, k);
      }else{
        uint32_t len = make_value(g_val, maxlen);
        CHECK_RC(db, lsmvbt_put(db, g_keys[k], g_val, len, LSMVBT_REPLACE), LSMVBT_OK);
        model_set(&txn, k, g_val, len);
      }
    }
    if( end<7 ){
      CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
      model_copy(&committed, &txn);
      if( version_of(db)!=v0 ) log_push(g_log, EV_MARK, 0, 0, 0, add_state(db, &committed));
    }else if( end<9 ){
      CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
    }else{
      CHECK_RC(db, lsmvbt_sync(db), LSMVBT_OK);
      if( version_of(db)!=v0 ) log_push(g_log, EV_MARK, 0, 0, 0, add_state(db, &txn));
      v0 = version_of(db);
      CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
      if( version_of(db)!=v0 ) log_push(g_log, EV_MARK, 0, 0, 0, add_state(db, &committed));
    }
  }
  g_log = 0;
  lsmvbt_close(db);
  model_free(&committed);
  model_free(&txn);
}

/* ---- Checking one crash image ---------------------------------------------------- */
static lsmvbt_options g_check_opt;
static int g_nimages, g_nnext, g_nsub;

/* Open the image at g_crash: its version must be that of s_base or of
** s_next, and its contents exactly that state's. Returns the state, or -1. */
static int recover_and_match(int s_base, int s_next, const char *what, uint64_t *pCleaned){
  lsmvbt_db *db = 0;
  lsmvbt_stats st;
  int rc = lsmvbt_open(g_crash, 0, &g_check_opt, &db), got = -1;
  g_nimages++;
  if( rc ){
    fprintf(stderr, "%s: recovery failed: %s\n", what, lsmvbt_errmsg(db));
    lsmvbt_close(db);
    return -1;
  }
  lsmvbt_get_stats(db, &st);
  if( pCleaned ) *pCleaned = st.recovery_slots_cleaned;
  if( st.version==g_versions[s_base] ) got = s_base;
  else if( s_next>=0 && st.version==g_versions[s_next] ) got = s_next;
  if( got<0 ){
    fprintf(stderr, "%s: recovered version %llu, expected %llu or %lld\n", what,
            (unsigned long long)st.version, (unsigned long long)g_versions[s_base],
            s_next>=0 ? (long long)g_versions[s_next] : -1ll);
  }else if( !db_matches(db, &g_states[got], what) ){
    fprintf(stderr, "%s: version %llu has the wrong contents\n", what, (unsigned long long)st.version);
    got = -1;
  }
  if( got>=0 && lsmvbt_check(db)!=LSMVBT_OK ){
    fprintf(stderr, "%s: check: %s\n", what, lsmvbt_errmsg(db));
    got = -1;
  }
  lsmvbt_close(db);
  return got;
}

/* The recovered file keeps working: one more commit, reopen, still right. */
static void continue_after(int state, const char *what){
  lsmvbt_db *db = 0;
  model m = {0, 0};
  int k = (int)rng_below((uint32_t)g_nkeys);
  uint32_t len;
  CHECK_RC(db, lsmvbt_open(g_crash, 0, &g_check_opt, &db), LSMVBT_OK);
  model_copy(&m, &g_states[state]);
  len = make_value(g_val, 60);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  CHECK_RC(db, lsmvbt_put(db, g_keys[k], g_val, len, LSMVBT_REPLACE), LSMVBT_OK);
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
  model_set(&m, k, g_val, len);
  lsmvbt_close(db);
  db = 0;
  CHECK_RC(db, lsmvbt_open(g_crash, 0, &g_check_opt, &db), LSMVBT_OK);
  if( !db_matches(db, &m, what) ){ g_failures++; fprintf(stderr, "%s: wrong after continuing\n", what); }
  CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
  lsmvbt_close(db);
  model_free(&m);
}

/* Variant v of a window of n writes: which writes survive, which are torn. */
static void variant(int v, int n, uint8_t *keep, uint32_t *tear, const char **pName){
  int i;
  memset(keep, 0, (size_t)n);
  memset(tear, 0, sizeof(uint32_t)*(size_t)n);
  if( v==0 ){ *pName = "none"; return; }
  if( v==1 ){ *pName = "all"; memset(keep, 1, (size_t)n); return; }
  if( v<1+n ){ *pName = "prefix"; memset(keep, 1, (size_t)(v-1)); return; }
  if( v<1+2*n ){ *pName = "one dropped"; memset(keep, 1, (size_t)n); keep[v-1-n] = 0; return; }
  if( v<1+2*n+4 ){ *pName = "subset"; for(i=0; i<n; i++) keep[i] = rng_below(2); return; }
  *pName = "torn";
  for(i=0; i<n; i++){
    keep[i] = rng_below(4)!=0;
    if( keep[i] && rng_below(2)==0 ) tear[i] = (uint32_t)rng_next() | 1u;   /* sector 0 old */
  }
  i = (int)rng_below((uint32_t)n);
  keep[i] = 1;
  tear[i] = (uint32_t)rng_next() & ~1u;       /* sector 0 new, some others old */
  if( tear[i]==0 ) tear[i] = 2;
}
static int n_variants(int n){ return n==0 ? 1 : 2 + 2*n + 4 + 6 - (n==1 ? 2 : 0); }

/* Crash during recovery: recovery's own writes of the image at g_crash are
** recorded, then dropped or torn, and recovery runs again. */
static void crash_in_recovery(const image *pre, int want, const char *what){
  lsmvbt_db *db = 0;
  uint8_t keep[256];
  uint32_t tear[256];
  image im = {0, 0, 0};
  int n = 0, v, i, idx[256];
  char name[700];
  lsmvbt_options o = g_check_opt;
  o.io = &g_rec_io;
  img_save(pre, g_crash);
  log_clear(&g_sub);
  snprintf(g_watch, sizeof(g_watch), "%s", g_crash);
  g_log = &g_sub;
  CHECK_RC(db, lsmvbt_open(g_crash, 0, &o, &db), LSMVBT_OK);
  g_log = 0;
  lsmvbt_close(db);
  for(i=0; i<g_sub.n && n<256; i++) if( g_sub.a[i].type==EV_WRITE ) idx[n++] = i;
  for(v=1; v<n_variants(n) && !FAILED_ENOUGH(); v++){
    const char *vn;
    int got;
    variant(v, n, keep, tear, &vn);
    img_copy(&im, pre);
    for(i=0; i<n; i++){
      const ev *e = &g_sub.a[idx[i]];
      if( keep[i] ) img_write(&im, e->off, e->data, e->len, tear[i]);
    }
    img_save(&im, g_crash);
    snprintf(name, sizeof(name), "%s, then crash in recovery (%s)", what, vn);
    got = recover_and_match(want, -1, name, 0);
    if( got!=want ){ g_failures++; fprintf(stderr, "%s: got state %d, want %d\n", name, got, want); }
    g_nsub++;
  }
  free(im.b);
}

/* Power loss at every sync barrier of the recorded log. */
static void power_loss_states(const image *base, const char *cfgname){
  image cur = {0, 0, 0}, im = {0, 0, 0};
  int i = 0, s_base = 0;
  char what[600];
  img_copy(&cur, base);
  while( i<g_main.n && !FAILED_ENOUGH() ){
    /* The window: events from i up to the next SYNC (exclusive). */
    int j = i, n = 0, k, v, s_next = -1, idx[512];
    uint8_t keep[512];
    uint32_t tear[512];
    while( j<g_main.n && g_main.a[j].type!=EV_SYNC ){
      if( g_main.a[j].type==EV_WRITE && n<512 ) idx[n++] = j;
      if( g_main.a[j].type==EV_MARK ) s_base = g_main.a[j].state;
      j++;
    }
    if( j+1<g_main.n && g_main.a[j].type==EV_SYNC && g_main.a[j+1].type==EV_MARK ){
      s_next = g_main.a[j+1].state;
    }
    for(v=0; v<n_variants(n) && !FAILED_ENOUGH(); v++){
      const char *vn;
      int got;
      uint64_t cleaned = 0;
      variant(v, n, keep, tear, &vn);
      img_copy(&im, &cur);
      for(k=0; k<n; k++){
        const ev *e = &g_main.a[idx[k]];
        if( keep[k] ) img_write(&im, e->off, e->data, e->len, tear[k]);
      }
      img_save(&im, g_crash);
      snprintf(what, sizeof(what), "%s: power loss after event %d (%d writes, %s)", cfgname, i, n, vn);
      got = recover_and_match(s_base, s_next, what, &cleaned);
      if( got<0 ){ g_failures++; continue; }
      if( got==s_next ) g_nnext++;
      /* Nothing of the commit written: the old version; all of it: the new. */
      if( v==0 && got!=s_base ){ g_failures++; fprintf(stderr, "%s: got the new version\n", what); }
      if( v==1 && s_next>=0 && got!=s_next ){ g_failures++; fprintf(stderr, "%s: lost a complete commit\n", what); }
      if( rng_below(10)==0 ) continue_after(got, what);
      else if( cleaned>0 && rng_below(4)==0 ) crash_in_recovery(&im, got, what);
    }
    for(k=0; k<n; k++){
      const ev *e = &g_main.a[idx[k]];
      img_write(&cur, e->off, e->data, e->len, 0);
    }
    i = j+1;
    if( j<g_main.n && j+1<g_main.n && g_main.a[j+1].type==EV_MARK ) s_base = g_main.a[j+1].state;
  }
  free(cur.b);
  free(im.b);
}

/* sync=normal survives a process crash: every prefix of the writes. */
static void process_crash_states(const image *base, const char *cfgname){
  image cur = {0, 0, 0};
  int i, s_base = 0;
  char what[600];
  img_copy(&cur, base);
  for(i=0; i<=g_main.n && !FAILED_ENOUGH(); i++){
    int got, s_next = -1, j;
    /* The state the next write belongs to: the next MARK. */
    for(j=i; j<g_main.n; j++) if( g_main.a[j].type==EV_MARK ){ s_next = g_main.a[j].state; break; }
    if( i==g_main.n || g_main.a[i].type==EV_WRITE ){
      img_save(&cur, g_crash);
      snprintf(what, sizeof(what), "%s: process killed before event %d", cfgname, i);
      got = recover_and_match(s_base, s_next, what, 0);
      if( got<0 ) g_failures++;
    }
    if( i<g_main.n ){
      const ev *e = &g_main.a[i];
      if( e->type==EV_WRITE ) img_write(&cur, e->off, e->data, e->len, 0);
      if( e->type==EV_MARK ) s_base = e->state;
    }
  }
  free(cur.b);
}

static void run(const char *name, lsmvbt_options *o, int ntx, int power){
  image base = {0, 0, 0};
  int i;
  int before = g_nimages;
  o->io = &g_rec_io;
  snprintf(g_watch, sizeof(g_watch), "%s", g_path);
  workload(o, ntx, &base);
  lsmvbt_options_default(&g_check_opt);
  if( power ) power_loss_states(&base, name);
  else process_crash_states(&base, name);
  fprintf(stderr, "%s: %d events, %d versions, %d crash images recovered\n", name, g_main.n,
          g_nstates, g_nimages - before);
  log_clear(&g_main);
  for(i=0; i<g_nstates; i++) model_free(&g_states[i]);
  free(g_states);
  free(g_versions);
  g_states = 0;
  g_versions = 0;
  g_nstates = 0;
  free(base.b);
}

int main(int argc, char **argv){
  char dir[300];
  lsmvbt_options o;
  uint64_t seed = argc>1 ? strtoull(argv[1], 0, 0) : 7;
  int ntx = argc>2 ? atoi(argv[2]) : 60;
  rng_seed(seed);
  universe_init(300);
  test_dir(dir, sizeof(dir), "crash");
  snprintf(g_path, sizeof(g_path), "%s/work.lsmvbt", dir);
  snprintf(g_crash, sizeof(g_crash), "%s/crash.lsmvbt", dir);
  g_rec_io = *lsmvbt_io_default();
  g_rec_io.xOpen = rec_open;
  g_rec_io.xPwrite = rec_pwrite;
  g_rec_io.xFdatasync = rec_fdatasync;
  fprintf(stderr, "seed %llu, %d transactions per configuration\n", (unsigned long long)seed, ntx);

  /* All five optimizations on; pages of two sectors; small preallocation
  ** chunks so that growing the file happens between commits. */
  lsmvbt_options_default(&o);
  o.page_size = 1024;
  o.prealloc_bytes = 8192;
  run("optimized, 1 KiB pages", &o, ntx, 1);

  /* All off: legacy split, no reserve, periodic GC, header page written by
  ** every commit, sibling redistribution; growth by writing. */
  lsmvbt_options_default(&o);
  o.page_size = 1024;
  o.lazy_split = 0;
  o.reserve_bytes = 0;
  o.lazy_gc = 0;
  o.gc_period = 4;
  o.embed_metadata = 0;
  o.redistribute = 1;
  o.prealloc_bytes = 0;
  if( !FAILED_ENOUGH() ) run("unoptimized, 1 KiB pages", &o, ntx, 1);

  /* 4 KiB pages: eight sectors to tear. */
  lsmvbt_options_default(&o);
  if( !FAILED_ENOUGH() ) run("optimized, 4 KiB pages", &o, ntx/2, 1);

  /* sync=normal: no fdatasync, safe against process crashes only. */
  lsmvbt_options_default(&o);
  o.page_size = 1024;
  o.sync = LSMVBT_SYNC_NORMAL;
  if( !FAILED_ENOUGH() ) run("sync=normal, process crash", &o, ntx, 0);

  fprintf(stderr, "%d images in all; %d recovered the interrupted commit; %d crashed in recovery\n",
          g_nimages, g_nnext, g_nsub);
  CHECK(g_nnext>0);       /* the "all pages made it" case is exercised */
  CHECK(g_nsub>0);        /* and so is a crash during recovery */
  lsmvbt_unlink(g_path, 0);
  lsmvbt_unlink(g_crash, 0);
  rmdir(dir);
  free(g_keys);
  return CHECK_DONE();
}
