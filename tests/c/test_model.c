/*
** test_model.c — randomized model test of the WAL mapping.
**
** A real SQLite connection is opened through waldio so that its WAL handle
** exists; SQLITE_FCNTL_JOURNAL_POINTER hands that handle to the test, which
** then drives it directly with random sequences of the read and write shapes
** SQLite uses (docs/format.md §5): new frames as header + page, in-place
** page overwrites, header rewrites after a whole-frame read, rollbacks that
** overwrite earlier frames, odd-sized writes, truncation and a new header,
** syncs. The same writes go to a plain in-memory "logical file"; every read
** through the shim -- through the writing handle and through a second
** connection's handle -- must return exactly the model's bytes, and so must
** a full read-back after closing and reopening (cold cache, all from disk).
**
** Run for each layout, several page sizes, cache sizes (default, a few
** slots, none) and direct vs buffered I/O.
*/
#include "check.h"
#include "waldio.h"
#include "wal_format.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct model {
  u8 *data;
  u8 *defined;            /* byte written since the last truncate */
  size_t cap;
} model;

typedef struct run {
  const char *zLayout;
  int layout;
  u32 page;
  const char *zCache;
  const char *zIo;
  unsigned seed;
  int nOps;
} run;

typedef struct harness {
  sqlite3 *db, *db2;
  sqlite3_file *w, *w2;   /* the two connections' WAL handles */
  model m;
  u32 P, fb;              /* page size, logical frame bytes */
  u32 next;               /* next frame to append */
  u32 hi;                 /* highest frame written this generation */
  u32 published;          /* frames another connection may read: written
                          ** by a commit frame or any later non-append call
                          ** (new frames before that may still be batched) */
  u32 held;               /* a header rewrite (of this frame) is held by the
                          ** writing handle
                          ** until its next call (as a new frame's header is:
                          ** SQLite rewrites only uncommitted frames' headers,
                          ** which no other connection reads) */
  int embed;
  unsigned seed;
  u32 salt[2];
  char zDb[400];
  char zUri[700];
} harness;

static u32 rnd(harness *h, u32 n){ return n ? (u32)rand_r(&h->seed) % n : 0; }

static void fill(harness *h, u8 *p, size_t n){
  size_t i;
  for(i=0; i<n; i++) p[i] = (u8)rand_r(&h->seed);
}

static i64 loff(harness *h, u32 frame){ return wf_logical_frame_offset(h->P, frame); }

/* Is logical byte x of a frame inside the page's embedding tail? */
static int in_tail(harness *h, i64 x){
  i64 within;
  if( !h->embed || x<32 ) return 0;
  within = (x - 32) % h->fb;
  return within>=24 + h->P - 24;
}

static void model_write(harness *h, const u8 *z, size_t n, i64 off){
  memcpy(h->m.data + off, z, n);
  memset(h->m.defined + off, 1, n);
}

static int do_write(harness *h, const u8 *z, size_t n, i64 off){
  int rc = h->w->pMethods->xWrite(h->w, z, (int)n, off);
  h->held = 0;
  if( rc==SQLITE_OK ) model_write(h, z, n, off);
  return rc;
}

/* Every call except appending a non-commit frame, or a read, writes
** batched frames. */
static void all_written(harness *h){ h->published = h->next - 1; }

/* Read through handle f and compare every defined byte with the model. */
static void check_read(harness *h, sqlite3_file *f, size_t n, i64 off){
  u8 *buf = malloc(n);
  size_t i;
  int rc = f->pMethods->xRead(f, buf, (int)n, off);
  CHECK(rc==SQLITE_OK);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    if( h->m.defined[off + i] && buf[i]!=h->m.data[off + i] ){
      g_failures++;
      fprintf(stderr, "mismatch at logical %lld (read of %zu @ %lld, seed %u):"
              " got %02x want %02x\n", (long long)(off + i), n, (long long)off,
              h->seed, buf[i], h->m.data[off + i]);
      break;
    }
  }
  free(buf);
}

static void new_header(harness *h){
  u8 hdr[32];
  u32 sum[2];
  memset(hdr, 0, sizeof(hdr));
  wf_put32(hdr, WAL_MAGIC_LE);
  wf_put32(hdr+4, WAL_FORMAT_VERSION);
  wf_put32(hdr+8, h->P);
  wf_put32(hdr+12, rnd(h, 1000));
  h->salt[0] = (u32)rand_r(&h->seed);
  h->salt[1] = (u32)rand_r(&h->seed);
  wf_put32(hdr+16, h->salt[0]);
  wf_put32(hdr+20, h->salt[1]);
  wf_checksum(0, hdr, 24, 0, sum);
  wf_put32(hdr+24, sum[0]);
  wf_put32(hdr+28, sum[1]);
  CHECK(h->w->pMethods->xTruncate(h->w, 0)==SQLITE_OK);
  memset(h->m.defined, 0, h->m.cap);
  CHECK(do_write(h, hdr, 32, 0)==SQLITE_OK);
  h->next = 1;
  h->hi = 0;
  h->published = 0;
}

static void make_frame_header(harness *h, u8 *hdr){
  fill(h, hdr, 24);
  wf_put32(hdr, 2 + rnd(h, 5000));       /* never page 1: see wal_file.c */
  if( rnd(h, 2) ) wf_put32(hdr+4, 0);
}

static void make_page(harness *h, u8 *page){
  fill(h, page, h->P);
  if( h->embed ) memset(page + h->P - 24, 0, 24);
}

static void op_append(harness *h){
  u8 hdr[24], *page = malloc(h->P);
  make_frame_header(h, hdr);
  make_page(h, page);
  CHECK(do_write(h, hdr, 24, loff(h, h->next))==SQLITE_OK);
  CHECK(do_write(h, page, h->P, loff(h, h->next) + 24)==SQLITE_OK);
  if( h->next>h->hi ) h->hi = h->next;
  h->next++;
  if( wf_get32(hdr+4)!=0 ) all_written(h);     /* a commit frame */
  free(page);
}

static void op_page_overwrite(harness *h){
  u8 *page = malloc(h->P);
  u32 i = 1 + rnd(h, h->next - 1), held = h->held;
  make_page(h, page);
  CHECK(do_write(h, page, h->P, loff(h, i) + 24)==SQLITE_OK);
  if( held==i ){
    /* Joined with the held header: a whole frame batched again, unwritten
    ** until the next call that is not an append. */
    if( h->published>=i ) h->published = i - 1;
  }else{
    all_written(h);
  }
  free(page);
}

static void op_header_rewrite(harness *h){
  u8 hdr[24];
  u32 i = 1 + rnd(h, h->next - 1);
  check_read(h, h->w, h->fb, loff(h, i));          /* walRewriteChecksums */
  all_written(h);
  make_frame_header(h, hdr);
  CHECK(do_write(h, hdr, 24, loff(h, i))==SQLITE_OK);
  h->held = i;
}

static void op_odd_write(harness *h){
  i64 end = loff(h, h->next);
  i64 off = 32 + rnd(h, (u32)(end - 32));
  size_t n = 1 + rnd(h, 2 * h->fb), k;
  u8 *z;
  if( off + (i64)n>end ) n = (size_t)(end - off);
  z = malloc(n);
  fill(h, z, n);
  for(k=0; k<n; k++){
    if( in_tail(h, off + (i64)k) ) z[k] = 0;
  }
  CHECK(do_write(h, z, n, off)==SQLITE_OK);
  all_written(h);
  free(z);
}

/* A page with bytes in its embedding tail is refused; its header stays. */
static void op_bad_tail(harness *h){
  u8 hdr[24], *page = malloc(h->P);
  make_frame_header(h, hdr);
  make_page(h, page);
  page[h->P - 1 - rnd(h, 24)] = 0x77;
  CHECK(do_write(h, hdr, 24, loff(h, h->next))==SQLITE_OK);
  CHECK(h->w->pMethods->xWrite(h->w, page, h->P, loff(h, h->next) + 24)
        ==SQLITE_IOERR_WRITE);
  if( h->next>h->hi ) h->hi = h->next;
  h->next++;
  all_written(h);
  free(page);
}

static void op_read(harness *h){
  sqlite3_file *f = h->w;
  u32 last = h->next - 1;     /* frames this handle may read */
  u32 i;
  if( rnd(h, 3)==0 && h->published>0 && !h->held ){
    f = h->w2;                /* another connection: published frames only */
    last = h->published;
  }
  /* A read through the writing handle writes held frames only if it reads
  ** them (wal_file.c flush_if_read): it publishes nothing here. */
  i = 1 + rnd(h, last);
  switch( rnd(h, 5) ){
    case 0: check_read(h, f, h->P, loff(h, i) + 24); break;    /* page lookup */
    case 1: check_read(h, f, 8, loff(h, i) + 16); break;       /* checksum */
    case 2: check_read(h, f, h->fb, loff(h, i)); break;        /* recovery */
    case 3: check_read(h, f, 32, 0); break;                    /* header */
    default: {
      i64 end = loff(h, last + 1);
      i64 off = rnd(h, (u32)end);
      size_t n = 1 + rnd(h, 3 * h->fb);
      if( off + (i64)n>end ) n = (size_t)(end - off);
      check_read(h, f, n, off);
    }
  }
}

static void op_misc(harness *h){
  sqlite3_int64 size = 0;
  switch( rnd(h, 3) ){
    case 0:
      CHECK(h->w->pMethods->xSync(h->w, SQLITE_SYNC_NORMAL)==SQLITE_OK);
      all_written(h);
      h->held = 0;
      break;
    case 1:
      CHECK(h->w->pMethods->xFileSize(h->w, &size)==SQLITE_OK);
      CHECK(size>=loff(h, h->hi + 1));
      all_written(h);
      h->held = 0;
      break;
    default:
      h->next = 1 + rnd(h, h->next);       /* rollback: rewrite from here */
      if( h->published>=h->next ) h->published = h->next - 1;
  }
}

static int open_conn(harness *h, sqlite3 **pDb, sqlite3_file **pWal, int create){
  char zSql[128];
  int rc = sqlite3_open_v2(h->zUri, pDb, SQLITE_OPEN_READWRITE
                           | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, "waldio");
  if( rc ) return rc;
  sqlite3_db_config(*pDb, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, 0);
  if( create ){
    snprintf(zSql, sizeof(zSql), "PRAGMA page_size=%u; PRAGMA journal_mode=WAL;"
             " CREATE TABLE t(x);", h->P);
    rc = sqlite3_exec(*pDb, zSql, 0, 0, 0);
  }else{
    rc = sqlite3_exec(*pDb, "PRAGMA schema_version", 0, 0, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_file_control(*pDb, "main", SQLITE_FCNTL_JOURNAL_POINTER, pWal);
  }
  return rc;
}

static void cleanup_files(const char *zDb){
  char z[300];
  const char *azSuffix[] = { "", "-wal", "-shm", "-wal-shm", "-journal" };
  size_t i;
  for(i=0; i<sizeof(azSuffix)/sizeof(azSuffix[0]); i++){
    snprintf(z, sizeof(z), "%s%s", zDb, azSuffix[i]);
    unlink(z);
  }
}

static void run_model(const run *r, const char *zDir){
  harness h;
  int i, failuresBefore = g_failures;
  memset(&h, 0, sizeof(h));
  h.P = r->page;
  h.fb = r->page + 24;
  h.embed = r->layout==WALDIO_LAYOUT_EMBED;
  h.seed = r->seed;
  snprintf(h.zDb, sizeof(h.zDb), "%s/model-%s-%u-%s-%s-%u.db", zDir, r->zLayout,
           r->page, r->zCache, r->zIo, r->seed);
  cleanup_files(h.zDb);
  snprintf(h.zUri, sizeof(h.zUri), "file:%s?waldio_layout=%s&waldio_cache=%s"
           "&waldio_io=%s&waldio_prealloc=256K", h.zDb, r->zLayout, r->zCache, r->zIo);
  h.m.cap = (size_t)(r->nOps + 8) * h.fb + 64;
  h.m.data = calloc(1, h.m.cap);
  h.m.defined = calloc(1, h.m.cap);
  if( open_conn(&h, &h.db, &h.w, 1) || open_conn(&h, &h.db2, &h.w2, 0) ){
    g_failures++;
    fprintf(stderr, "cannot open %s: %s\n", h.zUri, sqlite3_errmsg(h.db));
    goto done;
  }
  new_header(&h);
  for(i=0; i<r->nOps && g_failures==failuresBefore; i++){
    u32 op = rnd(&h, 100);
    if( h.next==1 || op<35 )  op_append(&h);
    else if( op<45 )          op_page_overwrite(&h);
    else if( op<53 )          op_header_rewrite(&h);
    else if( op<58 )          op_odd_write(&h);
    else if( op<60 && h.embed ) op_bad_tail(&h);
    else if( op<88 )          op_read(&h);
    else if( op<99 )          op_misc(&h);
    else                      new_header(&h);
  }
  /* Cold read-back: a new log object, nothing cached. */
  sqlite3_close(h.db2); h.db2 = 0;
  sqlite3_close(h.db); h.db = 0;
  if( open_conn(&h, &h.db, &h.w, 0)==SQLITE_OK ){
    i64 end = loff(&h, h.hi + 1);
    i64 off;
    for(off=0; off<end; off+=h.fb) check_read(&h, h.w, end - off < h.fb ? (size_t)(end - off) : h.fb, off);
  }else{
    g_failures++;
    fprintf(stderr, "cannot reopen %s\n", h.zUri);
  }
done:
  if( g_failures!=failuresBefore ){
    fprintf(stderr, "FAILED: layout=%s page=%u cache=%s io=%s seed=%u\n",
            r->zLayout, r->page, r->zCache, r->zIo, r->seed);
  }
  sqlite3_close(h.db2);
  sqlite3_close(h.db);
  cleanup_files(h.zDb);
  free(h.m.data);
  free(h.m.defined);
}

int main(int argc, char **argv){
  static const struct { const char *z; int layout; u32 aPage[3]; } aLayout[] = {
    { "embed", WALDIO_LAYOUT_EMBED, { 4096, 8192, 65536 } },
    { "pad4k", WALDIO_LAYOUT_PAD4K, { 1024, 4096, 16384 } },
    { "pad8k", WALDIO_LAYOUT_PAD8K, { 4096, 8192, 32768 } },
  };
  static const char *azCache[] = { "4M", "24K", "0" };
  static const char *azIo[] = { "direct", "buffered" };
  const char *zTmp = getenv("TMPDIR");
  char zDir[256];
  int nOps = argc>1 ? atoi(argv[1]) : 1500;
  size_t a, p, c, io;
  unsigned seed;

  snprintf(zDir, sizeof(zDir), "%s/waldio-model-XXXXXX", zTmp ? zTmp : "/tmp");
  if( !mkdtemp(zDir) ){ perror("mkdtemp"); return 2; }
  if( waldio_register("waldio", 0, 0)!=SQLITE_OK ) return 2;
  for(a=0; a<3; a++){
    for(p=0; p<3; p++){
      for(c=0; c<3; c++){
        for(io=0; io<2; io++){
          for(seed=1; seed<=2; seed++){
            run r;
            r.zLayout = aLayout[a].z;
            r.layout = aLayout[a].layout;
            r.page = aLayout[a].aPage[p];
            r.zCache = azCache[c];
            r.zIo = azIo[io];
            r.seed = seed * 7919 + (unsigned)(a * 100 + p * 10 + c);
            r.nOps = r.page>=32768 ? nOps / 4 : nOps;
            run_model(&r, zDir);
          }
        }
      }
    }
  }
  rmdir(zDir);
  return CHECK_DONE();
}
