/*
** test_faults.c — failing system calls injected through the VFS's system
** call table (sqlite3_vfs.xSetSystemCall, names "waldio_*"): an I/O error on
** a frame write, on a flush, and a full disk at the log's first
** preallocation (the first direct commit) and while growing it. Each must
** give SQLite a clear error, lose no committed transaction and leave a
** database that passes integrity_check.
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "waldio.h"

#include <errno.h>
#include <sys/types.h>

/* What to break, and how many more calls to let through first. */
static struct {
  int failWrite;        /* errno for frame-sized pwrites (0: off) */
  int failBigWrite;     /* errno for >= 64 KiB pwrites: preallocation */
  int failSync;         /* errno for fdatasync */
  int nInjected;
} g_fault;

static ssize_t bad_pwrite(int fd, const void *p, size_t n, off_t off){
  if( g_fault.failBigWrite && n>=65536 ){
    g_fault.nInjected++;
    errno = g_fault.failBigWrite;
    return -1;
  }
  if( g_fault.failWrite && n<65536 && off>0 ){
    g_fault.nInjected++;
    errno = g_fault.failWrite;
    return -1;
  }
  return pwrite(fd, p, n, off);
}

static int bad_fdatasync(int fd){
  if( g_fault.failSync ){
    g_fault.nInjected++;
    errno = g_fault.failSync;
    return -1;
  }
  return fdatasync(fd);
}

static int no_fallocate(int fd, int mode, off_t off, off_t len){
  (void)fd; (void)mode; (void)off; (void)len;
  errno = EOPNOTSUPP;     /* force the written-zeros path */
  return -1;
}

static void install(void){
  sqlite3_vfs *v = sqlite3_vfs_find("waldio");
  CHECK_EQ(v->xSetSystemCall(v, "waldio_pwrite", (sqlite3_syscall_ptr)bad_pwrite), SQLITE_OK);
  CHECK_EQ(v->xSetSystemCall(v, "waldio_fdatasync", (sqlite3_syscall_ptr)bad_fdatasync), SQLITE_OK);
  CHECK_EQ(v->xSetSystemCall(v, "waldio_fallocate", (sqlite3_syscall_ptr)no_fallocate), SQLITE_OK);
  CHECK(v->xGetSystemCall(v, "waldio_pwrite")==(sqlite3_syscall_ptr)bad_pwrite);
  /* Names that are not waldio's reach the unix VFS below. */
  CHECK(v->xGetSystemCall(v, "write")!=0);
  CHECK_EQ(v->xSetSystemCall(v, "no_such_call", 0), SQLITE_NOTFOUND);
}

static sqlite3 *open_db(const char *zDb, const char *zParams){
  char zUri[700];
  sqlite3 *db = 0;
  snprintf(zUri, sizeof(zUri), "file:%s?%s", zDb, zParams);
  CHECK_EQ(sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, "waldio"), SQLITE_OK);
  return db;
}

static int insert(sqlite3 *db){
  return sqlite3_exec(db, "INSERT INTO t VALUES(randomblob(300))", 0, 0, 0);
}

static void last_error_mentions(const char *zWord){
  char zMsg[1024];
  waldio_last_error(zMsg, sizeof(zMsg));
  if( !strstr(zMsg, zWord) ){
    g_failures++;
    fprintf(stderr, "last error \"%s\" does not mention \"%s\"\n", zMsg, zWord);
  }
}

static sqlite3 *fresh(const char *zDb, const char *zParams, int nRow){
  sqlite3 *db;
  int i;
  remove_db(zDb);
  db = open_db(zDb, zParams);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0), SQLITE_OK);
  for(i=0; i<nRow; i++) CHECK_EQ(insert(db), SQLITE_OK);
  return db;
}

static void reopen_and_check(const char *zDb, long long lo, long long hi){
  char buf[64];
  sqlite3 *db = open_db(zDb, "");
  long long n = query_int(db, "SELECT count(*) FROM t");
  CHECK(n>=lo && n<=hi);
  CHECK(strcmp(query_text(db, "PRAGMA integrity_check", buf, sizeof(buf)), "ok")==0);
  sqlite3_close(db);
}

static void test_eio_on_frame_write(const char *zDb){
  sqlite3 *db = fresh(zDb, "", 20);
  int rc;
  g_fault.failWrite = EIO;
  rc = insert(db);
  g_fault.failWrite = 0;
  CHECK_EQ(rc & 0xff, SQLITE_IOERR);
  CHECK_EQ(sqlite3_extended_errcode(db), SQLITE_IOERR_WRITE);
  last_error_mentions("Input/output error");
  CHECK_EQ(insert(db), SQLITE_OK);                 /* the database goes on */
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 21);
  sqlite3_close(db);
  reopen_and_check(zDb, 21, 21);
}

static void test_eio_on_flush(const char *zDb){
  sqlite3 *db = fresh(zDb, "", 20);
  int rc;
  g_fault.failSync = EIO;
  rc = insert(db);
  CHECK_EQ(rc & 0xff, SQLITE_IOERR);
  g_fault.failSync = 0;
  /* After a failed flush nothing more is accepted (no "fsyncgate"). */
  CHECK_EQ(insert(db) & 0xff, SQLITE_IOERR);
  last_error_mentions("earlier write or flush of this log failed");
  sqlite3_close(db);
  /* A new connection starts clean; the failed commit may or may not have
  ** reached the disk, everything before it did. */
  reopen_and_check(zDb, 20, 21);
}

static void test_full_disk_preallocating_the_log(const char *zDb){
  sqlite3 *db;
  int rc;
  remove_db(zDb);
  db = open_db(zDb, "");
  g_fault.failBigWrite = ENOSPC;
  rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0);
  g_fault.failBigWrite = 0;
  CHECK(rc==SQLITE_FULL || rc==SQLITE_CANTOPEN);
  last_error_mentions("No space left");
  sqlite3_close(db);
  db = open_db(zDb, "");
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS t(x);",
                        0, 0, 0), SQLITE_OK);
  CHECK_EQ(insert(db), SQLITE_OK);
  sqlite3_close(db);
  reopen_and_check(zDb, 1, 1);
}

static void test_full_disk_growing_the_log(const char *zDb){
  sqlite3 *db = fresh(zDb, "waldio_prealloc=64K", 0);
  int i, rc = SQLITE_OK, committed = 0;
  CHECK_EQ(sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0", 0, 0, 0), SQLITE_OK);
  g_fault.failBigWrite = ENOSPC;
  for(i=0; i<200 && rc==SQLITE_OK; i++){
    rc = insert(db);
    if( rc==SQLITE_OK ) committed++;
  }
  g_fault.failBigWrite = 0;
  CHECK_EQ(rc, SQLITE_FULL);
  CHECK(committed>0);
  last_error_mentions("No space left");
  for(i=0; i<100; i++) CHECK_EQ(insert(db), SQLITE_OK);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), committed + 100);
  sqlite3_close(db);
  reopen_and_check(zDb, committed + 100, committed + 100);
}

int main(void){
  char zDir[300], zDb[400];
  test_dir(zDir, sizeof(zDir), "faults");
  snprintf(zDb, sizeof(zDb), "%s/f.db", zDir);
  if( test_register("waldio", 0, WALDIO_LAYOUT_EMBED)!=SQLITE_OK ) return 2;
  install();
  test_eio_on_frame_write(zDb);
  test_eio_on_flush(zDb);
  test_full_disk_preallocating_the_log(zDb);
  test_full_disk_growing_the_log(zDb);
  CHECK(g_fault.nInjected>=4);
  remove_db(zDb);
  rmdir(zDir);
  return CHECK_DONE();
}
