/*
** test_processes.c — waldio across processes, fork() and re-initialization,
** each case the regression test of a bug that lost or refused data:
**
**   conversion race   two processes open a database whose -wal is a
**                     standard WAL of 100 uncheckpointed commits; the
**                     second opened the old file before the first renamed
**                     the converted log over it. Both must see 100 rows
**                     (the second used to convert P1's log "again" by path
**                     and rename an empty log over it).
**   first opens       six processes open a database together after a clean
**                     close and hold it: all must succeed (the losers used
**                     to wait for an exclusive lock the winner's shared
**                     lock blocked, and failed after 5 s).
**   fork + exit       a child inherits the parent's group buffer; its exit
**                     must not write it over the parent's newer durable
**                     commits (waldio's atexit hook used to).
**   late reader       a process that opened the log before another process
**                     started a generation reads that generation's frames
**                     (it used to fail with SQLITE_IOERR_SHORT_READ: the
**                     shape of SQLite's walthread-2).
**   re-initialization sqlite3_shutdown() + sqlite3_initialize() + register
**                     again: new databases still get 24 reserved bytes and
**                     the SQL function waldio_last_error() (the auto-
**                     extension used to be lost).
**   killed creator    a log left unformatted by a creator killed before
**                     its directory fsync is formatted with a directory
**                     fsync by whoever opens it next.
**
** Child processes are created before they touch SQLite (or, for the fork
** case, that is the very point being tested) and report by exit status.
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "waldio.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char g_dir[512];

static void sleep_ms(int ms){
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  nanosleep(&ts, 0);
}

static int exec_ok(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc ){
    fprintf(stderr, "SQL error %d on \"%s\": %s\n", rc, zSql, zErr ? zErr : "");
  }
  sqlite3_free(zErr);
  return rc;
}

/* Wait for a child; its exit status (or 100 + signal). */
static int wait_child(pid_t pid){
  int st = 0;
  if( waitpid(pid, &st, 0)!=pid ) return 99;
  if( WIFSIGNALED(st) ) return 100 + WTERMSIG(st);
  return WEXITSTATUS(st);
}

/* A standard WAL of n commits that stock SQLite never checkpointed. */
static void make_standard_wal(const char *zDb, int n){
  sqlite3 *db = 0;
  int i, off = 0, reserve = 24;     /* the embed layout's conversion */
  remove_db(zDb);
  CHECK_EQ(sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE,
                           "unix"), SQLITE_OK);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, &off);
  sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &reserve);
  exec_ok(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
              " CREATE TABLE t(x)");
  for(i=0; i<n; i++) exec_ok(db, "INSERT INTO t VALUES(randomblob(100))");
  sqlite3_close(db);
}

/* ------------------------------------------------------ conversion race */

static char g_marker[600];

/* P1's rename: announce that the conversion is about to replace the file,
** give P2 time to open the old one, then rename. */
static int slow_rename(const char *zFrom, const char *zTo){
  int fd = open(g_marker, O_CREAT|O_WRONLY, 0644);
  if( fd>=0 ) close(fd);
  sleep_ms(400);
  return rename(zFrom, zTo);
}

/* Open zDb through waldio and count t: the child's exit status is 0 if it
** saw want rows and integrity_check is ok. */
static int count_rows_child(const char *zDb, int want){
  sqlite3 *db = 0;
  char buf[64];
  long long n;
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) ) return 10;
  if( sqlite3_open(zDb, &db) ) return 11;
  sqlite3_busy_timeout(db, 10000);
  n = query_int(db, "SELECT count(*) FROM t");
  if( n!=want ){
    waldio_last_error(buf, sizeof(buf));
    fprintf(stderr, "child %d saw %lld rows, wanted %d (%s)\n", (int)getpid(),
            n, want, buf);
    return 12;
  }
  if( strcmp(query_text(db, "PRAGMA integrity_check", buf, sizeof(buf)), "ok") ) return 13;
  sqlite3_close(db);
  return 0;
}

static void test_conversion_race(void){
  char zDb[600];
  pid_t p1, p2;
  snprintf(zDb, sizeof(zDb), "%s/conv.db", g_dir);
  snprintf(g_marker, sizeof(g_marker), "%s/renaming", g_dir);
  unlink(g_marker);
  make_standard_wal(zDb, 100);
  p1 = fork();
  if( p1==0 ){
    sqlite3_vfs *v;
    if( test_register(0, 1, WALDIO_LAYOUT_EMBED) ) _exit(10);
    v = sqlite3_vfs_find("waldio");
    v->xSetSystemCall(v, "waldio_rename", (sqlite3_syscall_ptr)slow_rename);
    _exit(count_rows_child(zDb, 100));
  }
  p2 = fork();
  if( p2==0 ){
    struct stat st;
    int i;
    for(i=0; i<5000 && stat(g_marker, &st); i++) sleep_ms(1);
    _exit(count_rows_child(zDb, 100));       /* opens the old file now */
  }
  CHECK_EQ(wait_child(p1), 0);
  CHECK_EQ(wait_child(p2), 0);
  p1 = fork();
  if( p1==0 ) _exit(count_rows_child(zDb, 100));
  CHECK_EQ(wait_child(p1), 0);
}

/* ---------------------------------------------------------- fork + exit */

/* The parent P: 5 async group commits buffered, fork C, then group off, a
** TRUNCATE checkpoint (the log restarts at frame 1) and 3 FULL commits;
** then C exits (running atexit) and P dies without closing. */
static int fork_parent(const char *zDb){
  sqlite3 *db = 0;
  int i, toChild[2], status;
  pid_t c;
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) return 20;
  if( exec_ok(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                  " PRAGMA wal_autocheckpoint=0; CREATE TABLE t(x);"
                  " PRAGMA waldio_group_ms=60000; PRAGMA waldio_group=async") ){
    return 21;
  }
  for(i=0; i<5; i++) exec_ok(db, "INSERT INTO t VALUES('buffered')");
  if( pipe(toChild) ) return 22;
  c = fork();
  if( c==0 ){
    char ch;
    close(toChild[1]);
    if( read(toChild[0], &ch, 1)<0 ) _exit(3);
    exit(0);                    /* runs atexit handlers, as a child would */
  }
  close(toChild[0]);
  if( exec_ok(db, "PRAGMA waldio_group=off") ) return 23;
  if( exec_ok(db, "PRAGMA wal_checkpoint(TRUNCATE)") ) return 24;
  for(i=0; i<3; i++){
    if( exec_ok(db, "INSERT INTO t VALUES('durable')") ) return 25;
  }
  if( write(toChild[1], "x", 1)!=1 ) return 26;
  status = wait_child(c);
  if( status ) return 30 + status;
  _exit(0);                     /* crash: no close, nothing checkpointed */
}

static void test_fork_child_exit(void){
  char zDb[600], buf[64];
  sqlite3 *db = 0;
  pid_t p;
  snprintf(zDb, sizeof(zDb), "%s/fork.db", g_dir);
  remove_db(zDb);
  p = fork();
  if( p==0 ) _exit(fork_parent(zDb));
  CHECK_EQ(wait_child(p), 0);
  p = fork();
  if( p==0 ){
    if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) _exit(40);
    if( query_int(db, "SELECT count(*) FROM t WHERE x='durable'")!=3 ) _exit(41);
    if( query_int(db, "SELECT count(*) FROM t WHERE x='buffered'")!=5 ) _exit(42);
    if( strcmp(query_text(db, "PRAGMA integrity_check", buf, sizeof(buf)), "ok") ) _exit(43);
    _exit(0);
  }
  CHECK_EQ(wait_child(p), 0);
}

/* ---------------------------------------------------- re-initialization */

static int reinit_child(const char *zDb){
  sqlite3 *db = 0;
  char buf[4096], zLayout[64];
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) ) return 50;
  sqlite3_shutdown();
  sqlite3_initialize();
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) ) return 51;
  if( strcmp(sqlite3_vfs_find(0)->zName, "waldio") ) return 52;
  if( sqlite3_open(zDb, &db) ) return 53;
  if( exec_ok(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1)") ) return 54;
  snprintf(zLayout, sizeof(zLayout), "\"layout\":\"%s\"",
           waldio_layout_name(test_layout(WALDIO_LAYOUT_EMBED)));
  if( strstr(query_text(db, "PRAGMA waldio", buf, sizeof(buf)), zLayout)==0 ) return 55;
  if( query_int(db, "SELECT length(waldio_last_error())>=0")!=1 ) return 56;
  sqlite3_close(db);
  return 0;
}

static void test_reinitialization(void){
  char zDb[600];
  unsigned char h[21];
  FILE *f;
  pid_t p;
  snprintf(zDb, sizeof(zDb), "%s/reinit.db", g_dir);
  remove_db(zDb);
  p = fork();
  if( p==0 ) _exit(reinit_child(zDb));
  CHECK_EQ(wait_child(p), 0);
  f = fopen(zDb, "rb");
  CHECK(f && fread(h, 1, sizeof(h), f)==sizeof(h));
  if( f ) fclose(f);
  /* The auto-extension ran again: it reserved the embed layout's bytes
  ** (the other layouts need none; reinit_child checked its SQL function). */
  if( test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_EMBED ) CHECK_EQ(h[20], 24);
}

/* ------------------------------------------- concurrent first opens */

/* Reading block 0 is slowed down so that every opener reads it before any
** of them has set the guard: the window the bug needed, made certain. */
static ssize_t slow_block0_pread(int fd, void *p, size_t n, off_t off){
  if( off==0 ) sleep_ms(50);
  return pread(fd, p, n, off);
}

static int open_and_hold_child(const char *zDb, int holdMs){
  sqlite3 *db = 0;
  sqlite3_vfs *v;
  char buf[256];
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) ) return 60;
  v = sqlite3_vfs_find("waldio");
  v->xSetSystemCall(v, "waldio_pread", (sqlite3_syscall_ptr)slow_block0_pread);
  if( sqlite3_open(zDb, &db) ) return 61;
  sqlite3_busy_timeout(db, 30000);
  if( query_int(db, "SELECT count(*) FROM t")!=1 ){
    waldio_last_error(buf, sizeof(buf));
    fprintf(stderr, "opener %d: %s\n", (int)getpid(), buf);
    return 62;
  }
  sleep_ms(holdMs);               /* longer than the old 5 s lock wait */
  sqlite3_close(db);
  return 0;
}

static void test_concurrent_first_opens(void){
  char zDb[600];
  sqlite3 *db = 0;
  pid_t aPid[6];
  int i;
  snprintf(zDb, sizeof(zDb), "%s/together.db", g_dir);
  remove_db(zDb);
  aPid[0] = fork();
  if( aPid[0]==0 ){
    if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) _exit(70);
    if( exec_ok(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);"
                    " INSERT INTO t VALUES(1)") ) _exit(71);
    _exit(sqlite3_close(db) ? 72 : 0);    /* clean close: guard cleared */
  }
  CHECK_EQ(wait_child(aPid[0]), 0);
  for(i=0; i<6; i++){
    aPid[i] = fork();
    if( aPid[i]==0 ) _exit(open_and_hold_child(zDb, 5500));
  }
  for(i=0; i<6; i++) CHECK_EQ(wait_child(aPid[i]), 0);
}

/* ------------------------------------ a generation started by another process */

/* P1 opened the log while it held no generation (page size unknown to its
** log object); P2 then starts a generation and commits; P1 must read P2's
** frames (it used to fail with SQLITE_IOERR_SHORT_READ: walthread-2). */
static int late_reader_child(const char *zDb, int toParent, int fromParent){
  sqlite3 *db = 0;
  char ch = 'r', buf[256];
  long long n;
  if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) return 80;
  sqlite3_busy_timeout(db, 10000);
  if( query_int(db, "SELECT count(*) FROM t")!=1 ) return 81;
  if( write(toParent, &ch, 1)!=1 || read(fromParent, &ch, 1)!=1 ) return 82;
  n = query_int(db, "SELECT count(*) FROM t");
  if( n!=2 ){
    waldio_last_error(buf, sizeof(buf));
    fprintf(stderr, "late reader saw %lld rows (%s): %s\n", n, buf, sqlite3_errmsg(db));
    return 83;
  }
  sqlite3_close(db);
  return 0;
}

static void test_generation_started_elsewhere(void){
  char zDb[600], ch;
  sqlite3 *db = 0;
  int up[2], down[2];
  pid_t pid;
  snprintf(zDb, sizeof(zDb), "%s/late.db", g_dir);
  remove_db(zDb);
  pid = fork();
  if( pid==0 ){
    if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) _exit(84);
    if( exec_ok(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);"
                    " INSERT INTO t VALUES(1)") ) _exit(85);
    _exit(sqlite3_close(db) ? 86 : 0);   /* clean close: no generation left */
  }
  CHECK_EQ(wait_child(pid), 0);
  /* As after a switch to DELETE and back: the next opener creates the log,
  ** which then knows no page size yet. */
  {
    char z[700];
    snprintf(z, sizeof(z), "%s-wal", zDb);
    CHECK_EQ(unlink(z), 0);
    snprintf(z, sizeof(z), "%s-wal-shm", zDb);
    unlink(z);
  }
  if( pipe(up) || pipe(down) ){ CHECK(0); return; }
  pid = fork();
  if( pid==0 ) _exit(late_reader_child(zDb, up[1], down[0]));
  CHECK_EQ(read(up[0], &ch, 1), 1);
  {
    pid_t w = fork();
    if( w==0 ){
      if( test_register(0, 1, WALDIO_LAYOUT_EMBED) || sqlite3_open(zDb, &db) ) _exit(87);
      if( exec_ok(db, "INSERT INTO t VALUES(2)") ) _exit(88);
      if( write(down[1], "g", 1)!=1 ) _exit(89);
      sleep_ms(500);                        /* keep the wal-index alive */
      _exit(0);
    }
    CHECK_EQ(wait_child(pid), 0);
    CHECK_EQ(wait_child(w), 0);
  }
}

/* -------------------------------------------------------- killed creator */

static int g_dirSyncs;
static int count_fsync(int fd){
  struct stat st;
  if( fstat(fd, &st)==0 && S_ISDIR(st.st_mode) ) g_dirSyncs++;
  return fsync(fd);
}

static void test_killed_creator(void){
  char zDb[600], zWal[620];
  sqlite3 *db = 0;
  sqlite3_vfs *v;
  FILE *f;
  snprintf(zDb, sizeof(zDb), "%s/killed.db", g_dir);
  snprintf(zWal, sizeof(zWal), "%s-wal", zDb);
  remove_db(zDb);
  CHECK_EQ(test_register(0, 1, WALDIO_LAYOUT_EMBED), SQLITE_OK);
  CHECK_EQ(sqlite3_open(zDb, &db), SQLITE_OK);
  exec_ok(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  /* What a creator killed half-way through zero-filling leaves. */
  f = fopen(zWal, "wb");
  CHECK(f!=0);
  if( f ){
    static char zeros[8192];
    fwrite(zeros, 1, sizeof(zeros), f);
    fclose(f);
  }
  v = sqlite3_vfs_find("waldio");
  v->xSetSystemCall(v, "waldio_fsync", (sqlite3_syscall_ptr)count_fsync);
  g_dirSyncs = 0;
  CHECK_EQ(sqlite3_open(zDb, &db), SQLITE_OK);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 1);
  CHECK(g_dirSyncs>=1);
  sqlite3_close(db);
  v->xSetSystemCall(v, "waldio_fsync", 0);
}

int main(void){
  test_dir(g_dir, sizeof(g_dir), "processes");
  test_conversion_race();
  test_concurrent_first_opens();
  test_fork_child_exit();
  test_generation_started_elsewhere();
  test_reinitialization();
  test_killed_creator();
  if( g_failures==0 ){
    char zCmd[600];
    snprintf(zCmd, sizeof(zCmd), "rm -rf '%s'", g_dir);
    if( system(zCmd) ){}
  }
  return CHECK_DONE();
}
