/*
** test_group.c — group commit paths only a C program can reach: a
** background group write that fails (reported to the next call, never
** swallowed), and a process that exit()s without closing its database
** (the atexit hook writes what the group buffer still holds), and the
** background thread taking no signals.
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "waldio.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

static int g_failFrameWrites;

static ssize_t flaky_pwrite(int fd, const void *p, size_t n, off_t off){
  if( g_failFrameWrites && off>0 && n<65536 ){
    errno = EIO;
    return -1;
  }
  return pwrite(fd, p, n, off);
}

static sqlite3 *open_group(const char *zDb, const char *zMode, int ms){
  char zUri[700];
  sqlite3 *db = 0;
  snprintf(zUri, sizeof(zUri), "file:%s?waldio_group=%s&waldio_group_ms=%d"
           "&waldio_group_bytes=1M", zDb, zMode, ms);
  CHECK_EQ(sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, "waldio"), SQLITE_OK);
  return db;
}

static int insert(sqlite3 *db){
  return sqlite3_exec(db, "INSERT INTO t VALUES(randomblob(100))", 0, 0, 0);
}

static void test_failed_background_write(const char *zDb){
  sqlite3 *db;
  char zMsg[512];
  int i, rc;
  remove_db(zDb);
  db = open_group(zDb, "async", 5);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0),
           SQLITE_OK);
  for(i=0; i<10; i++) CHECK_EQ(insert(db), SQLITE_OK);
  usleep(50 * 1000);                        /* written by the flusher */
  g_failFrameWrites = 1;
  if( test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD ){
    /* Never solo (log_group.c): the commit writes its own frames, and
    ** the failure is its own. */
    rc = insert(db);
    g_failFrameWrites = 0;
    CHECK_EQ(rc & 0xff, SQLITE_IOERR);
    waldio_last_error(zMsg, sizeof(zMsg));
    CHECK(strstr(zMsg, "Input/output error")!=0);
  }else{
    CHECK_EQ(insert(db), SQLITE_OK);        /* async: acknowledged, buffered */
    usleep(50 * 1000);                      /* the flusher's write fails */
    rc = insert(db);
    g_failFrameWrites = 0;
    CHECK_EQ(rc & 0xff, SQLITE_IOERR);      /* reported to the next call */
    waldio_last_error(zMsg, sizeof(zMsg));
    CHECK(strstr(zMsg, "write or flush of this log failed")!=0);
  }
  sqlite3_close(db);
  db = open_group(zDb, "off", 5);
  /* Everything before the failed write is there; the lost commit is the
  ** bounded loss async mode allows. */
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 10);
  query_text(db, "PRAGMA integrity_check", zMsg, sizeof(zMsg));
  CHECK(strcmp(zMsg, "ok")==0);
  sqlite3_close(db);
}

static void test_exit_writes_the_buffer(const char *zDb){
  sqlite3 *db;
  pid_t pid;
  int status = 0;
  remove_db(zDb);
  db = open_group(zDb, "off", 5);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0),
           SQLITE_OK);
  sqlite3_close(db);
  pid = fork();
  if( pid==0 ){
    int i;
    db = open_group(zDb, "async", 60000);   /* never written by the timer */
    for(i=0; i<7; i++) insert(db);
    exit(0);                                /* no sqlite3_close() */
  }
  CHECK(pid>0);
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status)==0);
  db = open_group(zDb, "off", 5);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 7);
  sqlite3_close(db);
}

/* Threads of this process besides the calling one, or -1. */
static int threads_other_than_this(void){
  struct dirent *e;
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  if( !d ) return -1;
  while( (e = readdir(d))!=0 ) n += e->d_name[0]!='.';
  closedir(d);
  return n - 1;
}

/* Threads of this process other than the calling one that do not block
** SIGTERM (their SigBlk line in /proc), or -1 if /proc cannot say. */
static int threads_taking_sigterm(void){
  char zPath[300], zLine[200];
  struct dirent *e;
  int n = 0, self = (int)gettid();
  DIR *d = opendir("/proc/self/task");
  if( !d ) return -1;
  while( (e = readdir(d))!=0 ){
    unsigned long long blk = 0;
    FILE *f;
    if( e->d_name[0]=='.' || atoi(e->d_name)==self ) continue;
    snprintf(zPath, sizeof(zPath), "/proc/self/task/%s/status", e->d_name);
    if( (f = fopen(zPath, "r"))==0 ) continue;
    while( fgets(zLine, sizeof(zLine), f) ){
      if( sscanf(zLine, "SigBlk: %llx", &blk)==1 ) break;
    }
    fclose(f);
    if( (blk & (1ULL<<(SIGTERM-1)))==0 ) n++;
  }
  closedir(d);
  return n;
}

/* A signal sent to the process must reach the application's threads: the
** flusher (running for the async group) blocks every signal. Otherwise the
** kernel may hand it SIGTERM, and a handler that must interrupt the main
** thread's blocking call (Python runs its handlers only there) waits for
** that call to end by itself: a multiprocessing pool's terminate() then
** hung forever. */
static void test_background_thread_takes_no_signals(const char *zDb){
  sqlite3 *db;
  int i;
  remove_db(zDb);
  db = open_group(zDb, "async", 5);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);", 0, 0, 0),
           SQLITE_OK);
  for(i=0; i<10; i++) CHECK_EQ(insert(db), SQLITE_OK);
  CHECK(threads_other_than_this()>0);      /* the flusher runs */
  CHECK_EQ(threads_taking_sigterm(), 0);
  sqlite3_close(db);
}

int main(void){
  char zDir[300], zDb[400];
  sqlite3_vfs *v;
  test_dir(zDir, sizeof(zDir), "group");
  snprintf(zDb, sizeof(zDb), "%s/g.db", zDir);
  if( test_register("waldio", 0, WALDIO_LAYOUT_EMBED)!=SQLITE_OK ) return 2;
  v = sqlite3_vfs_find("waldio");
  v->xSetSystemCall(v, "waldio_pwrite", (sqlite3_syscall_ptr)flaky_pwrite);
  test_exit_writes_the_buffer(zDb);
  test_failed_background_write(zDb);
  test_background_thread_takes_no_signals(zDb);
  remove_db(zDb);
  rmdir(zDir);
  return CHECK_DONE();
}
