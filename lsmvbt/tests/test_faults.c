/*
** test_faults.c — failing system calls, injected through the lsmvbt_io
** table: a failed page write or fdatasync during a commit leaves the last
** committed version intact and the handle usable (the written slots are
** wiped, pager.h P4); if wiping fails too, the handle refuses further work
** and a reopen recovers; a failed read or preallocation fails the
** transaction, which rolls back; a second open of a file gets LSMVBT_BUSY;
** a compensating commit that fails leaves the synced version committed.
**
** Usage: lsmvbt_test_faults
*/
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>

static int g_fail_pwrite = -1, g_fail_sync = -1, g_fail_pread = -1;   /* countdowns */

static int countdown(int *c){
  if( *c<0 ) return 0;
  if( (*c)--==0 ) return 1;
  return 0;
}
static ssize_t f_pwrite(int fd, const void *buf, size_t n, off_t off){
  if( countdown(&g_fail_pwrite) ){ errno = ENOSPC; return -1; }
  return pwrite(fd, buf, n, off);
}
static int f_fdatasync(int fd){
  if( countdown(&g_fail_sync) ){ errno = EIO; return -1; }
  return fdatasync(fd);
}
static ssize_t f_pread(int fd, void *buf, size_t n, off_t off){
  if( countdown(&g_fail_pread) ){ errno = EIO; return -1; }
  return pread(fd, buf, n, off);
}

static char g_path[512];
static lsmvbt_io g_io;
static uint8_t g_val[200];

static lsmvbt_db *open_db(int flags){
  lsmvbt_options o;
  lsmvbt_db *db = 0;
  lsmvbt_options_default(&o);
  o.io = &g_io;
  o.page_size = 1024;
  o.cache_pages = 16;
  o.prealloc_bytes = 0;
  CHECK_RC(db, lsmvbt_open(g_path, flags, &o, &db), LSMVBT_OK);
  return db;
}

static void put_range(lsmvbt_db *db, model *m, int from, int to){
  int i;
  for(i=from; i<to; i++){
    uint32_t len = make_value(g_val, 100);
    CHECK_RC(db, lsmvbt_put(db, g_keys[i], g_val, len, LSMVBT_REPLACE), LSMVBT_OK);
    model_set(m, i, g_val, len);
  }
}

int main(void){
  char dir[300];
  lsmvbt_db *db, *db2 = 0;
  model m = {0, 0}, t = {0, 0};
  int k, rc;
  lsmvbt_stats st;
  uint64_t v;

  rng_seed(3);
  universe_init(400);
  test_dir(dir, sizeof(dir), "faults");
  snprintf(g_path, sizeof(g_path), "%s/faults.lsmvbt", dir);
  g_io = *lsmvbt_io_default();
  g_io.xPwrite = f_pwrite;
  g_io.xFdatasync = f_fdatasync;
  g_io.xPread = f_pread;
  model_init(&m);

  db = open_db(LSMVBT_OPEN_TRUNCATE);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  put_range(db, &m, 0, 200);
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);

  /* One handle per file. */
  {
    lsmvbt_options o;
    lsmvbt_options_default(&o);
    rc = lsmvbt_open(g_path, 0, &o, &db2);
    CHECK_RC(db2, rc, LSMVBT_BUSY);
    lsmvbt_close(db2);
  }

  /* A multi-page commit whose k-th page write fails, for every k. */
  for(k=0; k<12 && !FAILED_ENOUGH(); k++){
    lsmvbt_get_stats(db, &st);
    v = st.version;
    CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
    model_copy(&t, &m);
    put_range(db, &t, 150, 260);
    g_fail_pwrite = k;
    rc = lsmvbt_commit(db);
    if( g_fail_pwrite>=0 ){            /* fewer than k+1 writes: it committed */
      g_fail_pwrite = -1;
      CHECK_RC(db, rc, LSMVBT_OK);
      model_copy(&m, &t);
      break;
    }
    CHECK_RC(db, rc, LSMVBT_IOERR);
    CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
    lsmvbt_get_stats(db, &st);
    CHECK_EQ(st.version, v);
    CHECK(db_matches(db, &m, "after a failed page write"));
    /* The handle goes on: the same change commits now. */
    CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
    put_range(db, &m, 260 + k, 261 + k);
    CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
  }
  lsmvbt_close(db);
  db = open_db(0);
  CHECK(db_matches(db, &m, "reopened after failed writes"));
  CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);

  /* fdatasync fails: not committed, the written slots are wiped. */
  lsmvbt_get_stats(db, &st);
  v = st.version;
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  model_copy(&t, &m);
  put_range(db, &t, 0, 50);
  g_fail_sync = 0;
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_IOERR);
  CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
  lsmvbt_get_stats(db, &st);
  CHECK_EQ(st.version, v);
  CHECK(db_matches(db, &m, "after a failed fdatasync"));
  lsmvbt_close(db);
  db = open_db(0);
  CHECK(db_matches(db, &m, "reopened after a failed fdatasync"));
  lsmvbt_get_stats(db, &st);
  CHECK_EQ(st.version, v);
  CHECK_EQ(st.recovery_slots_cleaned, 0);     /* the failed commit cleaned up after itself */

  /* The commit fails, and so does wiping what it wrote: the handle refuses
  ** further work, and a reopen recovers the last committed version. */
  lsmvbt_get_stats(db, &st);
  v = st.version;
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  model_copy(&t, &m);
  put_range(db, &t, 0, 3);
  g_fail_pwrite = 0;          /* the commit's first page write fails */
  g_fail_sync = 0;            /* and the wiping's fdatasync */
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_IOERR);
  CHECK(strstr(lsmvbt_errmsg(db), "reopen")!=0);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_IOERR);     /* the transaction is still open... */
  CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_IOERR);     /* ...and the handle is broken */
  g_fail_pwrite = -1;
  g_fail_sync = -1;
  lsmvbt_close(db);
  db = open_db(0);
  lsmvbt_get_stats(db, &st);
  CHECK_EQ(st.version, v);
  CHECK(db_matches(db, &m, "reopened after a failed repair"));

  /* A failed read fails the transaction; rollback recovers. */
  lsmvbt_close(db);
  db = open_db(0);
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  g_fail_pread = 0;
  rc = lsmvbt_put(db, g_keys[10], "x", 1, LSMVBT_REPLACE);
  CHECK_RC(db, rc, LSMVBT_IOERR);
  g_fail_pread = -1;
  CHECK_RC(db, lsmvbt_put(db, g_keys[11], "x", 1, LSMVBT_REPLACE), LSMVBT_ERROR);
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_ERROR);
  CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
  CHECK(db_matches(db, &m, "after a failed read"));

  /* Preallocation fails (no space): the insert fails, rollback, go on. */
  lsmvbt_close(db);
  {
    lsmvbt_options o;
    lsmvbt_options_default(&o);
    o.io = &g_io;
    o.page_size = 1024;
    o.prealloc_bytes = 1u<<20;
    db = 0;
    CHECK_RC(db, lsmvbt_open(g_path, 0, &o, &db), LSMVBT_OK);
  }
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  g_fail_pwrite = 0;
  rc = LSMVBT_OK;
  for(k=200; k<400 && rc==LSMVBT_OK; k++){
    rc = lsmvbt_put(db, g_keys[k], g_val, 100, LSMVBT_REPLACE);
  }
  CHECK_RC(db, rc, LSMVBT_IOERR);
  g_fail_pwrite = -1;
  CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
  CHECK(db_matches(db, &m, "after a failed preallocation"));
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  put_range(db, &m, 200, 400);
  CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
  CHECK(db_matches(db, &m, "after preallocating"));

  /* Rollback after sync whose compensating commit fails: the synced
  ** version stays, reported as such. */
  lsmvbt_get_stats(db, &st);
  v = st.version;
  CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
  model_copy(&t, &m);
  put_range(db, &t, 0, 5);
  CHECK_RC(db, lsmvbt_sync(db), LSMVBT_OK);
  g_fail_pwrite = 0;
  rc = lsmvbt_rollback(db);
  g_fail_pwrite = -1;
  CHECK_RC(db, rc, LSMVBT_IOERR);
  CHECK(strstr(lsmvbt_errmsg(db), "stays committed")!=0);
  lsmvbt_get_stats(db, &st);
  CHECK_EQ(st.version, v+1);
  CHECK(db_matches(db, &t, "synced version kept"));
  lsmvbt_close(db);
  db = open_db(0);
  CHECK(db_matches(db, &t, "synced version kept, reopened"));
  CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
  lsmvbt_close(db);

  model_free(&m);
  model_free(&t);
  lsmvbt_unlink(g_path, 0);
  rmdir(dir);
  free(g_keys);
  return CHECK_DONE();
}
