/*
** test_oom.c — every SQLite allocation failing in turn, as SQLite's own
** walfault.test does: a workload that opens a database through waldio, turns
** on WAL, writes, reads from a second connection and closes, is run once per
** allocation N with the Nth allocation failing -- alone ("transient") and
** with every later one ("persistent") -- until a run completes without a
** fault. Each run must end in an
** error or success — never a crash — and leave a database that a clean run
** then opens with integrity_check ok. (The shm_host() path once freed
** memory it had not initialized when sqlite3_create_filename() failed.)
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "waldio.h"

static sqlite3_mem_methods g_real;
static int g_countdown = -1;          /* fail when it reaches 0; -1: off */
static int g_persistent;              /* keep failing after the first */
static int g_faults;

static int fail_now(void){
  if( g_countdown>0 ) g_countdown--;
  if( g_countdown!=0 ) return 0;
  g_faults++;
  if( !g_persistent ) g_countdown = -1;
  return 1;
}
static void *fault_malloc(int n){ return fail_now() ? 0 : g_real.xMalloc(n); }
static void *fault_realloc(void *p, int n){
  return fail_now() ? 0 : g_real.xRealloc(p, n);
}

/* The workload; returns the first error code, or SQLITE_OK. */
static int workload(const char *zDb){
  sqlite3 *a = 0, *b = 0;
  int rc = sqlite3_open_v2(zDb, &a, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, "waldio");
  if( rc==SQLITE_OK ) rc = sqlite3_exec(a, "PRAGMA synchronous=OFF; PRAGMA journal_mode=WAL;"
      " CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(randomblob(300));", 0, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_open_v2(zDb, &b, SQLITE_OPEN_READWRITE
                                           |SQLITE_OPEN_URI, "waldio");
  if( rc==SQLITE_OK ) rc = sqlite3_exec(b, "SELECT count(*) FROM t;"
      " INSERT INTO t VALUES(1); PRAGMA wal_checkpoint;", 0, 0, 0);
  sqlite3_close(b);
  sqlite3_close(a);
  return rc;
}

int main(void){
  sqlite3_mem_methods m;
  char zDir[300], zDb[420], zPath[400], buf[64];
  sqlite3 *db = 0;
  int n, completed = 0, nRuns = 0;
  int mode;

  sqlite3_config(SQLITE_CONFIG_GETMALLOC, &g_real);
  m = g_real;
  m.xMalloc = fault_malloc;
  m.xRealloc = fault_realloc;
  CHECK_EQ(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
  CHECK_EQ(test_register("waldio", 0, WALDIO_LAYOUT_EMBED), SQLITE_OK);
  test_dir(zDir, sizeof(zDir), "oom");
  snprintf(zPath, sizeof(zPath), "%s/oom.db", zDir);
  /* A small log: each of the ~1,200 runs creates one. */
  snprintf(zDb, sizeof(zDb), "file:%s/oom.db?waldio_prealloc=64K", zDir);

  for(mode=0; mode<2; mode++){
   g_persistent = mode;
   completed = 0;
   for(n=1; n<5000 && !completed; n++){
    int faultsBefore = g_faults, rc;
    remove_db(zPath);
    g_countdown = n;
    rc = workload(zDb);
    g_countdown = -1;
    nRuns++;
    if( g_faults==faultsBefore ){
      CHECK_EQ(rc, SQLITE_OK);       /* no fault reached: must succeed */
      completed = 1;
    }
    /* Whatever happened, a clean run now works on what is left. */
    CHECK_EQ(workload(zDb), SQLITE_OK);
    if( sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, "waldio")==SQLITE_OK ){
      CHECK(strcmp(query_text(db, "PRAGMA integrity_check", buf, sizeof(buf)), "ok")==0);
    }
    sqlite3_close(db);
    db = 0;
   }
   CHECK(completed);
  }
  fprintf(stderr, "test_oom: %d runs, %d injected allocation failures\n", nRuns, g_faults);
  remove_db(zPath);
  rmdir(zDir);
  return CHECK_DONE();
}
