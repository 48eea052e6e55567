/*
** test_api.c — the public C API (waldio.h) used as a linked library with
** the system SQLite: registration and its errors, options, the last-error
** channel, PRAGMA output, detach.
*/
#include "check.h"
#include "test_util.h"
#include "waldio.h"

static void test_register(void){
  waldio_options o;
  char zMsg[512];
  waldio_options_default(&o);
  CHECK_EQ(o.layout, WALDIO_LAYOUT_AUTO);
  CHECK_EQ(o.sync, WALDIO_SYNC_AUTO);
  CHECK_EQ(o.io, WALDIO_IO_DIRECT);
  CHECK_EQ(o.prealloc_bytes, 4 << 20);
  CHECK_EQ(o.flush_ms, 100);

  o.layout = 9;
  CHECK_EQ(waldio_register("bad", 0, &o), SQLITE_MISUSE);
  CHECK_EQ(waldio_last_error(zMsg, sizeof(zMsg)), SQLITE_MISUSE);
  CHECK(strstr(zMsg, "out of range")!=0);
  CHECK(sqlite3_vfs_find("bad")==0);

  CHECK_EQ(waldio_register("unix", 0, 0), SQLITE_ERROR);     /* not ours */
  CHECK_EQ(waldio_register("waldio", 0, 0), SQLITE_OK);
  CHECK_EQ(waldio_register("waldio", 0, 0), SQLITE_OK);      /* idempotent */
  CHECK(sqlite3_vfs_find(0)!=sqlite3_vfs_find("waldio"));    /* not default */
  waldio_options_default(&o);
  o.layout = WALDIO_LAYOUT_PAD4K;
  CHECK_EQ(waldio_register("waldio-pad", 0, &o), SQLITE_OK);
  CHECK(sqlite3_vfs_find("waldio-pad")!=0);
  CHECK_EQ(waldio_unregister("waldio-pad"), SQLITE_OK);
  CHECK(sqlite3_vfs_find("waldio-pad")==0);
  o.group = WALDIO_GROUP_STRICT;               /* every group mode registers */
  CHECK_EQ(waldio_register("waldio-strict", 0, &o), SQLITE_OK);
  CHECK_EQ(waldio_unregister("waldio-strict"), SQLITE_OK);
  o.group = WALDIO_GROUP_AUTO;
  CHECK_EQ(waldio_register("waldio-auto", 0, &o), SQLITE_OK);
  CHECK_EQ(waldio_unregister("waldio-auto"), SQLITE_OK);
  o.group = WALDIO_GROUP_AUTO + 1;
  CHECK_EQ(waldio_register("waldio-bad", 0, &o), SQLITE_MISUSE);
  CHECK_EQ(waldio_unregister("unix"), SQLITE_ERROR);
}

static void test_database(const char *zDir){
  char zDb[512], zUri[600], buf[2048];
  sqlite3 *db = 0;
  int i;
  snprintf(zDb, sizeof(zDb), "%s/api.db", zDir);
  snprintf(zUri, sizeof(zUri), "file:%s?waldio_prealloc=1M", zDb);
  CHECK_EQ(sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, "waldio"), SQLITE_OK);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0),
           SQLITE_OK);
  for(i=0; i<50; i++){
    CHECK_EQ(sqlite3_exec(db, "INSERT INTO t VALUES(randomblob(200))", 0, 0, 0), SQLITE_OK);
  }
  query_text(db, "PRAGMA waldio", buf, sizeof(buf));
  /* The default: a new log is in SQLite's own format, with SQLite's own
  ** wal-index, and the database gets no reserved bytes. */
  CHECK(strstr(buf, "\"layout\":\"standard\"")!=0);
  CHECK(strstr(buf, "\"wal_index\":\"sqlite\"")!=0);
  query_text(db, "PRAGMA waldio_layout", buf, sizeof(buf));
  CHECK(strcmp(buf, "standard")==0);
  CHECK(sqlite3_exec(db, "PRAGMA waldio_layout=embed", 0, 0, 0)!=SQLITE_OK);
  CHECK(strstr(sqlite3_errmsg(db), "keeps")!=0);
  query_text(db, "PRAGMA waldio", buf, sizeof(buf));
  CHECK(strstr(buf, "\"prealloc_setting\":1048576")!=0);
  /* 50 one-frame commits: the first direct write preallocated 256 KiB (a
  ** small log doubles up to the setting, wal_log.c), and they fit. */
  CHECK(strstr(buf, "\"preallocated_bytes\":262144")!=0);
  CHECK(strstr(buf, "\"io\":\"direct\"")!=0);
  query_text(db, "PRAGMA waldio_stats", buf, sizeof(buf));
  CHECK(strstr(buf, "\"frames_written\":")!=0);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 50);
  CHECK_EQ(query_int(db, "PRAGMA reserve_bytes"), -1);        /* not a pragma */
  /* Detach fails while a connection is open, works after. */
  CHECK_EQ(waldio_detach(zDb, 0), SQLITE_BUSY);
  sqlite3_close(db);
  CHECK_EQ(waldio_detach(zDb, 0), SQLITE_OK);
  snprintf(buf, sizeof(buf), "%s-wal", zDb);
  CHECK(access(buf, F_OK)!=0);
  CHECK_EQ(sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READONLY, "unix"), SQLITE_OK);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 50);
  query_text(db, "PRAGMA journal_mode", buf, sizeof(buf));
  CHECK(strcmp(buf, "delete")==0);
  sqlite3_close(db);
  remove_db(zDb);
}

int main(void){
  char zDir[300];
  test_dir(zDir, sizeof(zDir), "api");
  test_register();
  test_database(zDir);
  rmdir(zDir);
  return CHECK_DONE();
}
