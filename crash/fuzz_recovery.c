/*
** fuzz_recovery.c — libFuzzer target for waldio's physical-log recovery.
**
** Each input is used as the bytes of a database's log file ("<db>-wal"),
** next to a small valid database. The database is then opened through the
** waldio VFS (libwaldio compiled into this binary with the sanitizers), which
** must decide what the file is (waldio log, standard SQLite WAL to convert,
** damaged superblock, garbage to reformat), recover it, and serve every read
** SQLite's WAL recovery and queries make. Every row is read, integrity_check
** runs, one more transaction is written and checkpointed. The target fails
** on any crash or sanitizer report (AddressSanitizer, UBSan); SQLite errors
** are expected answers to bad input.
**
** Build: crash/CMakeLists.txt (target fuzz_recovery, needs clang).
** Run:   build/crash/fuzz_recovery -max_total_time=60 -max_len=131072 CORPUS crash/corpus
** Seed corpus (crash/corpus/): real logs of each layout (embed, pad4k,
** pad8k, before and after a log restart) and a standard-format WAL, written
** by this binary against its own database:
**        WALDIO_FUZZ_MAKE_CORPUS=crash/corpus build/crash/fuzz_recovery
** Files live under $WALDIO_FUZZ_DIR (default /var/tmp): direct I/O needs a
** block-device file system.
*/
#include "waldio.h"

#include <sqlite3.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned char *g_db = 0;
static size_t g_nDb = 0;
static char g_dir[PATH_MAX];
static char g_dbPath[PATH_MAX + 32];
static char g_walPath[PATH_MAX + 32];

/* Durability is irrelevant here: skip the flushes (much faster). */
static int no_sync(int fd){ (void)fd; return 0; }

static void die(const char *zMsg, const char *zDetail){
  fprintf(stderr, "fuzz_recovery: %s%s%s\n", zMsg, zDetail ? ": " : "",
          zDetail ? zDetail : "");
  exit(2);
}

static void write_file(const char *zPath, const void *p, size_t n){
  int fd = open(zPath, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
  size_t done = 0;
  if( fd<0 ) die("cannot create", zPath);
  while( done<n ){
    ssize_t r = write(fd, (const char*)p + done, n - done);
    if( r<=0 ) die("cannot write", zPath);
    done += (size_t)r;
  }
  close(fd);
}

static unsigned char *read_file(const char *zPath, size_t *pN){
  struct stat st;
  unsigned char *p;
  int fd = open(zPath, O_RDONLY|O_CLOEXEC);
  size_t done = 0;
  if( fd<0 || fstat(fd, &st) ) die("cannot read", zPath);
  p = malloc((size_t)st.st_size + 1);
  if( !p ) die("out of memory", 0);
  while( done<(size_t)st.st_size ){
    ssize_t r = read(fd, p + done, (size_t)st.st_size - done);
    if( r<=0 ) die("cannot read", zPath);
    done += (size_t)r;
  }
  close(fd);
  *pN = done;
  return p;
}

static void remove_side_files(const char *zDb){
  static const char *azSuffix[] = { "-wal", "-shm", "-wal-shm",
                                    "-wal.waldio-convert", "-journal" };
  char z[PATH_MAX + 64];
  size_t i;
  for(i=0; i<sizeof(azSuffix)/sizeof(azSuffix[0]); i++){
    snprintf(z, sizeof(z), "%s%s", zDb, azSuffix[i]);
    unlink(z);
  }
}

static sqlite3 *open_db(const char *zDb, const char *zLayout, const char *zVfs){
  char zUri[PATH_MAX + 200];
  sqlite3 *db = 0;
  snprintf(zUri, sizeof(zUri), "file:%s?waldio_prealloc=64K&waldio_io=auto%s%s",
           zDb, zLayout ? "&waldio_layout=" : "", zLayout ? zLayout : "");
  if( sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, zVfs)!=SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  sqlite3_busy_timeout(db, 0);
  return db;
}

static void exec_ok(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  if( sqlite3_exec(db, zSql, 0, 0, &zErr)!=SQLITE_OK ){
    die(zSql, zErr);
  }
}

/* Rows with values of several sizes: leaf, interior and overflow pages. */
static void add_rows(sqlite3 *db, int first, int n){
  char zSql[256];
  int i;
  exec_ok(db, "BEGIN");
  for(i=first; i<first+n; i++){
    snprintf(zSql, sizeof(zSql), "INSERT INTO t(id, k, v) VALUES(%d, %d,"
             " zeroblob(%d) || x'%02x')", i, (i * 7919) % 1000,
             (i * 37) % 5000, i & 0xff);
    exec_ok(db, zSql);
  }
  exec_ok(db, "COMMIT");
}

static void make_base_db(void){
  sqlite3 *db;
  snprintf(g_dbPath, sizeof(g_dbPath), "%s/base.db", g_dir);
  remove_side_files(g_dbPath);
  unlink(g_dbPath);
  db = open_db(g_dbPath, 0, "waldio");
  if( !db ) die("cannot create the base database", g_dbPath);
  exec_ok(db, "PRAGMA journal_mode=WAL");
  exec_ok(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v BLOB);"
              "CREATE INDEX t_k ON t(k)");
  add_rows(db, 1, 40);
  sqlite3_close(db);      /* checkpoints everything: the log is empty */
  g_db = read_file(g_dbPath, &g_nDb);
  remove_side_files(g_dbPath);
  unlink(g_dbPath);
  snprintf(g_dbPath, sizeof(g_dbPath), "%s/f.db", g_dir);
  snprintf(g_walPath, sizeof(g_walPath), "%s/f.db-wal", g_dir);
}

/* The log with everything after its last non-zero block cut off. */
static void save_trimmed(const char *zFrom, const char *zTo, size_t block){
  size_t n;
  unsigned char *p = read_file(zFrom, &n);
  size_t end = 0, i;
  for(i=0; i<n; i++) if( p[i] ) end = i + 1;
  end = (end + block - 1) / block * block;
  if( end>n ) end = n;
  write_file(zTo, p, end);
  free(p);
}

static void make_corpus(const char *zOut){
  static const char *azLayout[] = { "embed", "pad4k", "pad8k" };
  char zTo[PATH_MAX + 64];
  size_t i;
  mkdir(zOut, 0755);
  for(i=0; i<3; i++){
    sqlite3 *db;
    remove_side_files(g_dbPath);
    write_file(g_dbPath, g_db, g_nDb);
    db = open_db(g_dbPath, azLayout[i], "waldio");
    if( !db ) die("cannot open", g_dbPath);
    exec_ok(db, "PRAGMA wal_autocheckpoint=0");
    exec_ok(db, "INSERT INTO t VALUES(100, 1, x'01')");
    exec_ok(db, "UPDATE t SET k = k + 1 WHERE id = 3");
    exec_ok(db, "DELETE FROM t WHERE id = 5");
    snprintf(zTo, sizeof(zTo), "%s/%s-gen1.log", zOut, azLayout[i]);
    save_trimmed(g_walPath, zTo, 4096);
    /* A restarted log: generation 2 over generation 1's stale frames. */
    exec_ok(db, "PRAGMA wal_checkpoint(RESTART)");
    exec_ok(db, "INSERT INTO t VALUES(200, 2, x'02')");
    snprintf(zTo, sizeof(zTo), "%s/%s-gen2.log", zOut, azLayout[i]);
    save_trimmed(g_walPath, zTo, 4096);
    sqlite3_close(db);
  }
  {
    /* A standard SQLite WAL: the conversion path. */
    sqlite3 *db;
    size_t n;
    unsigned char *p;
    remove_side_files(g_dbPath);
    write_file(g_dbPath, g_db, g_nDb);
    db = open_db(g_dbPath, 0, "unix");
    if( !db ) die("cannot open with the unix VFS", g_dbPath);
    exec_ok(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0");
    exec_ok(db, "INSERT INTO t VALUES(300, 3, x'03')");
    exec_ok(db, "UPDATE t SET k = k + 1 WHERE id = 4");
    p = read_file(g_walPath, &n);
    snprintf(zTo, sizeof(zTo), "%s/standard.wal", zOut);
    write_file(zTo, p, n);
    free(p);
    sqlite3_close(db);
  }
  remove_side_files(g_dbPath);
  unlink(g_dbPath);
}

static void cleanup(void){
  if( g_dbPath[0] ){ remove_side_files(g_dbPath); unlink(g_dbPath); }
  if( g_dir[0] ) rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *pArgc, char ***pArgv){
  const char *zBase = getenv("WALDIO_FUZZ_DIR");
  const char *zCorpus = getenv("WALDIO_FUZZ_MAKE_CORPUS");
  sqlite3_vfs *v;
  (void)pArgc; (void)pArgv;
  snprintf(g_dir, sizeof(g_dir), "%s/waldio-fuzz-XXXXXX", zBase ? zBase : "/var/tmp");
  if( !mkdtemp(g_dir) ) die("cannot create a directory", g_dir);
  atexit(cleanup);
  if( waldio_register("waldio", 0, 0)!=SQLITE_OK ) die("waldio_register failed", 0);
  v = sqlite3_vfs_find("waldio");
  v->xSetSystemCall(v, "waldio_fdatasync", (sqlite3_syscall_ptr)no_sync);
  v->xSetSystemCall(v, "waldio_fsync", (sqlite3_syscall_ptr)no_sync);
  make_base_db();
  if( zCorpus ){
    make_corpus(zCorpus);
    exit(0);
  }
  return 0;
}

static void run_sql(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)==SQLITE_OK ){
    while( sqlite3_step(pStmt)==SQLITE_ROW ){
      int i, n = sqlite3_column_count(pStmt);
      for(i=0; i<n; i++){
        /* Touch every value, so every page is really read. */
        (void)sqlite3_column_bytes(pStmt, i);
        (void)sqlite3_column_blob(pStmt, i);
      }
    }
  }
  sqlite3_finalize(pStmt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size){
  sqlite3 *db;
  remove_side_files(g_dbPath);
  write_file(g_dbPath, g_db, g_nDb);
  write_file(g_walPath, data, size);
  db = open_db(g_dbPath, 0, "waldio");
  if( db ){
    run_sql(db, "SELECT * FROM t");
    run_sql(db, "SELECT k FROM t ORDER BY k");
    run_sql(db, "PRAGMA integrity_check");
    run_sql(db, "INSERT INTO t(k, v) VALUES(1, zeroblob(3000))");
    run_sql(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    run_sql(db, "SELECT count(*) FROM t");
  }
  sqlite3_close(db);
  return 0;
}
