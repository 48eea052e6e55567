/*
** test_group_processes.c — durable group commit across processes
** (src/flush_region.h), in the situations only fork() and replaced system
** calls can set up:
**
**   many       2, 4, 8 and 16 processes commit at once, in every group mode
**              and beside non-group connections (FULL, NORMAL), while
**              another process checkpoints (PASSIVE, RESTART, TRUNCATE);
**   killed     a committer killed after writing its commit's frames, before
**              any flush; a flush leader killed inside its fdatasync; a
**              leader stopped inside its fdatasync (alive, never returning);
**              a committer that cannot open a descriptor to lock (EMFILE):
**              nobody waits forever, nothing acknowledged is lost;
**   poison     a failed flush: every process's waiting commit fails, no
**              later one is acknowledged, nothing acknowledged is lost;
**   strict     a strict reader does not see a commit before a flush covers
**              it, and reads on where such a commit changed no page it
**              reads; a durable reader may see it (early lock release);
**   auto       the default group mode: a reader waits for a FULL commit's
**              shared flush, never for a NORMAL commit (standard layout);
**              off in the slotted layouts;
**   fork       a process whose threads lead flushes forks children, and is
**              killed inside a flush it leads: the children that outlive it
**              do not keep the leader lock held;
**   restart    a saturating load of group commits still restarts the log
**              (src/restart_assist.c): it does not grow without bound;
**   busy       a writer asleep in SQLite's busy handler keeps other
**              processes' commits from flushing alone under the lock;
**   wakes      the flushes of processes outside group commit wake nobody
**              (no waiter: every wake word untouched), and the count of
**              waiters is back to 0 once durable committers are done.
**
** Every child reports each acknowledged commit (its number) on a pipe, so
** the parent knows exactly what must survive. Rows are (who, n).
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "waldio.h"
#include "log_lock.h"
#include "flush_region.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

static char g_db[512];

/* ------------------------------------------------------- system-call hooks
** Set in a child after fork(): each process has its own table. */

enum { HOOK_NONE, HOOK_KILL_IN_FLUSH, HOOK_STOP_IN_FLUSH, HOOK_FAIL_FLUSH,
       HOOK_GATE_FLUSH, HOOK_KILL_AFTER_WRITE, HOOK_NO_LOG_REOPEN };
static int g_hook, g_hookAfter, g_calls, g_gateFd = -1;
static int g_gateLeading;        /* the gate holds only flushes led (leading) */
static char g_gateFile[600];     /* while it exists, flushes wait at the gate */
static char g_atGateFile[620];   /* made when a flush reaches the closed gate */

/* Does this process hold a flush leader's lock (LOG_LOCK_LEADER or
** LEADER2, exclusive, on any descriptor)? /proc/self/fdinfo lists each
** open file description's locks. A stop must come inside a flush it leads:
** a stop inside a sync under SQLite's WAL write lock (the log's growth)
** would hold every writer, with or without waldio, as in stock SQLite. */
static int leading(void){
  long long lo = log_lock_offset(LOG_LOCK_LEADER), hi = log_lock_offset(LOG_LOCK_LEADER2);
  char zPath[64], zLine[256];
  int fd, found = 0;
  for(fd=0; fd<1024 && !found; fd++){
    FILE *f;
    snprintf(zPath, sizeof(zPath), "/proc/self/fdinfo/%d", fd);
    if( !(f = fopen(zPath, "r")) ) continue;
    while( !found && fgets(zLine, sizeof(zLine), f) ){
      long long start;
      char zKind[16], zMode[16];
      if( sscanf(zLine, "lock: %*d: %15s %*s %15s %*s %*s %lld", zKind, zMode, &start)==3
       && strcmp(zKind, "OFDLCK")==0 && strcmp(zMode, "WRITE")==0
       && start>=lo && start<=hi ){
        found = 1;
      }
    }
    fclose(f);
  }
  return found;
}

static int hooked_fdatasync(int fd){
  if( g_hook==HOOK_GATE_FLUSH ){
    char c;
    if( access(g_gateFile, F_OK)==0 && (!g_gateLeading || leading()) ){
      if( g_atGateFile[0] ) close(open(g_atGateFile, O_CREAT|O_WRONLY, 0644));
      if( read(g_gateFd, &c, 1)!=1 ) _exit(97);
    }
  }else if( (g_hook==HOOK_KILL_IN_FLUSH || g_hook==HOOK_FAIL_FLUSH
              || (g_hook==HOOK_STOP_IN_FLUSH && leading()))
          && ++g_calls>g_hookAfter ){
    if( g_hook==HOOK_KILL_IN_FLUSH ) raise(SIGKILL);
    if( g_hook==HOOK_STOP_IN_FLUSH ) for(;;) pause();
    errno = EIO;
    return -1;
  }
  return fdatasync(fd);
}

/* A commit frame is written through the page cache (pwrite on the
** buffered descriptor); die right after it: frames written, no flush. */
static ssize_t hooked_pwrite(int fd, const void *p, size_t n, off_t off){
  ssize_t rc = pwrite(fd, p, n, off);
  if( g_hook==HOOK_KILL_AFTER_WRITE && off>0 && ++g_calls>g_hookAfter ){
    raise(SIGKILL);
  }
  return rc;
}

/* Once the connection has its log open, no other descriptor of the log can
** be opened (as with EMFILE): the leader lock has nothing to be taken on. */
static int g_logOpened;
static int hooked_open(const char *zPath, int flags, mode_t mode){
  size_t n = strlen(zPath);
  if( g_hook==HOOK_NO_LOG_REOPEN && g_logOpened && n>4
   && strcmp(zPath + n - 4, "-wal")==0 ){
    errno = EMFILE;
    return -1;
  }
  return open(zPath, flags, mode);
}

static void install_hooks(int hook, int after){
  sqlite3_vfs *v = sqlite3_vfs_find("waldio");
  g_hook = hook;
  g_hookAfter = after;
  g_calls = 0;
  v->xSetSystemCall(v, "waldio_fdatasync", (sqlite3_syscall_ptr)hooked_fdatasync);
  v->xSetSystemCall(v, "waldio_pwrite", (sqlite3_syscall_ptr)hooked_pwrite);
  v->xSetSystemCall(v, "waldio_open", (sqlite3_syscall_ptr)hooked_open);
}

/* --------------------------------------------------------------- helpers */

/* A group mode whose commits always wait for a shared flush, published
** before it: a commit with no other near would otherwise flush before it
** is published (wal_file.c flushes_alone), and the tests that hold a
** published commit at a shut gate, or a flush leader there, need one.
** open_db puts zGroup into the URI. */
#define SHARED_ONLY "&waldio_flush_alone=0"

/* zGroup: the waldio_group URI value (and what follows it), or DEFAULT
** (and what follows it) to leave the group mode to libwaldio's default. */
#define DEFAULT_GROUP "(default)"

static sqlite3 *open_db(const char *zGroup, const char *zSync){
  char zUri[700], zSql[80];
  sqlite3 *db = 0;
  size_t n = strlen(DEFAULT_GROUP);
  if( strncmp(zGroup, DEFAULT_GROUP, n)==0 ){
    snprintf(zUri, sizeof(zUri), "file:%s?test=1%s", g_db, zGroup + n);
  }else{
    snprintf(zUri, sizeof(zUri), "file:%s?waldio_group=%s", g_db, zGroup);
  }
  if( sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, "waldio")!=SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  sqlite3_busy_timeout(db, 20000);
  snprintf(zSql, sizeof(zSql), "PRAGMA synchronous=%s", zSync);
  sqlite3_exec(db, zSql, 0, 0, 0);
  return db;
}

static void fresh_db(void){
  sqlite3 *db;
  remove_db(g_db);
  db = open_db("off", "FULL");
  CHECK(db!=0);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL;"
           " CREATE TABLE t(who INTEGER, n INTEGER, pad BLOB,"
           " PRIMARY KEY(who, n));", 0, 0, 0), SQLITE_OK);
  sqlite3_close(db);
}

static int insert(sqlite3 *db, int who, int n){
  char zSql[120];
  snprintf(zSql, sizeof(zSql), "INSERT INTO t VALUES(%d, %d, randomblob(100))",
           who, n);
  return sqlite3_exec(db, zSql, 0, 0, 0);
}

/* A child: commit n rows as `who`, writing each acknowledged number on fd.
** Exit status: 0, or 10 + the first failing SQLite code (low byte). */
static int commit_rows(int who, const char *zGroup, const char *zSync, int n,
                       int fd){
  sqlite3 *db = open_db(zGroup, zSync);
  int i, rc = SQLITE_OK;
  if( !db ) return 9;
  g_logOpened = query_int(db, "SELECT count(*) FROM t")>=0;
  for(i=1; i<=n && rc==SQLITE_OK; i++){
    rc = insert(db, who, i);
    if( rc==SQLITE_OK && fd>=0 && write(fd, &i, sizeof(i))!=sizeof(i) ) rc = -1;
  }
  sqlite3_close(db);
  return rc==SQLITE_OK ? 0 : 10 + (rc & 0xff);
}

static pid_t spawn_writer(int who, const char *zGroup, const char *zSync,
                          int n, int hook, int after, int *pFd){
  int fds[2];
  pid_t pid;
  if( pipe(fds) ) return -1;
  pid = fork();
  if( pid==0 ){
    close(fds[0]);
    install_hooks(hook, after);
    _exit(commit_rows(who, zGroup, zSync, n, fds[1]));
  }
  close(fds[1]);
  *pFd = fds[0];
  return pid;
}

/* Everything acknowledged on fd (the child has ended): the last number. */
static int acked(int fd){
  int n, last = 0;
  while( read(fd, &n, sizeof(n))==sizeof(n) ) last = n;
  close(fd);
  return last;
}

/* waitpid with a deadline: -1 (and the child killed) if it is still
** running after `seconds`: someone waited forever. */
static int wait_exit(pid_t pid, int seconds){
  int status = 0, i;
  for(i=0; i<seconds*100; i++){
    pid_t r = waitpid(pid, &status, WNOHANG);
    if( r==pid ){
      if( WIFEXITED(status) ) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

static long long rows_of(sqlite3 *db, int who){
  char zSql[80];
  snprintf(zSql, sizeof(zSql), "SELECT count(*) FROM t WHERE who=%d", who);
  return query_int(db, zSql);
}

static void check_integrity(sqlite3 *db){
  char z[64];
  CHECK(strcmp(query_text(db, "PRAGMA integrity_check", z, sizeof(z)), "ok")==0);
}

/* ------------------------------------------------------------------ many */

static const char *azGroup[] = { "durable", "strict", "async", "durable", "off" };
static const char *azSync[]  = { "FULL",    "FULL",   "FULL",  "NORMAL",  "FULL" };

/* A child that checkpoints in a loop until `stop` is readable. */
static pid_t spawn_checkpointer(int *pStop){
  static const char *az[] = { "PRAGMA wal_checkpoint(PASSIVE)",
      "PRAGMA wal_checkpoint(RESTART)", "PRAGMA wal_checkpoint(TRUNCATE)" };
  int fds[2];
  pid_t pid;
  if( pipe(fds) ) return -1;
  pid = fork();
  if( pid==0 ){
    sqlite3 *db = open_db("off", "FULL");
    int i = 0, n = 0;
    char c;
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    while( db && read(fds[0], &c, 1)<0 ){
      n += sqlite3_exec(db, az[i++ % 3], 0, 0, 0)==SQLITE_OK;
      usleep(3000);
    }
    sqlite3_close(db);
    _exit(n>0 ? 0 : 1);                 /* some checkpoints ran */
  }
  close(fds[0]);
  *pStop = fds[1];
  return pid;
}

static void test_many(int np, int mixed){
  pid_t aPid[16], ckpt;
  int aFd[16], i, n = 150, stop = -1;
  sqlite3 *db;
  fresh_db();
  ckpt = spawn_checkpointer(&stop);
  for(i=0; i<np; i++){
    int m = mixed ? i % 5 : 0;
    aPid[i] = spawn_writer(i, azGroup[m], azSync[m], n, HOOK_NONE, 0, &aFd[i]);
  }
  for(i=0; i<np; i++){
    CHECK_EQ(wait_exit(aPid[i], 120), 0);
    CHECK_EQ(acked(aFd[i]), n);
  }
  CHECK(write(stop, "s", 1)==1);
  CHECK_EQ(wait_exit(ckpt, 60), 0);
  close(stop);
  db = open_db("off", "FULL");
  for(i=0; i<np; i++) CHECK_EQ(rows_of(db, i), n);
  check_integrity(db);
  sqlite3_close(db);
}

/* ---------------------------------------------------------------- restart */

static long long log_bytes(void){
  char zLog[600];
  struct stat st;
  snprintf(zLog, sizeof(zLog), "%s-wal", g_db);
  return stat(zLog, &st)==0 ? (long long)st.st_size : 0;
}

/* np processes commit n rows each, back to back, with no pause in which a
** checkpoint could copy the whole log unaided: about 2.5 frames a commit,
** so a log that never restarted would reach np * n * 2.5 blocks (100 MB
** here). The log must stay below a third of that (half in the standard
** layout, where a waiting commit keeps its read lock and so holds every
** checkpoint short of it: db_file.c), and every row arrive. */
static void test_long_log_restarts(void){
  enum { NP = 4, N = 3000 };
  pid_t aPid[NP];
  int aFd[NP], i, running = NP;
  int share = test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD ? 2 : 3;
  long long mx = 0, bound = (long long)NP * N * 4096 * 5 / 2 / share;
  sqlite3 *db;
  fresh_db();
  for(i=0; i<NP; i++){
    aPid[i] = spawn_writer(i, "durable", "FULL", N, HOOK_NONE, 0, &aFd[i]);
  }
  while( running ){
    long long now = log_bytes();
    if( now>mx ) mx = now;
    for(running=0, i=0; i<NP; i++) running += kill(aPid[i], 0)==0
        && waitpid(aPid[i], 0, WNOHANG)==0;
    usleep(5000);
  }
  for(i=0; i<NP; i++) CHECK_EQ(acked(aFd[i]), N);
  fprintf(stderr, "    the log reached %lld KiB (bound %lld KiB)\n", mx / 1024,
          bound / 1024);
  CHECK(mx<bound);
  db = open_db("off", "FULL");
  for(i=0; i<NP; i++) CHECK_EQ(rows_of(db, i), N);
  check_integrity(db);
  sqlite3_close(db);
}

/* ---------------------------------------------------------------- killed */

/* One committer dies or hangs as `hook` says; three others commit on. */
static void test_killed(int hook, const char *zWhat){
  pid_t aPid[4];
  int aFd[4], aAcked[4], i, n = 200;
  sqlite3 *db;
  fprintf(stderr, "  killed: %s\n", zWhat);
  fresh_db();
  /* A leader stops only inside a flush it leads: writer 0 always shares. */
  aPid[0] = spawn_writer(0, hook==HOOK_STOP_IN_FLUSH ? "durable" SHARED_ONLY
                         : "durable", "FULL", n, hook, 30, &aFd[0]);
  for(i=1; i<4; i++){
    aPid[i] = spawn_writer(i, "durable", "FULL", n, HOOK_NONE, 0, &aFd[i]);
  }
  for(i=1; i<4; i++){
    CHECK_EQ(wait_exit(aPid[i], 120), 0);       /* nobody waits forever */
    aAcked[i] = acked(aFd[i]);
    CHECK_EQ(aAcked[i], n);
  }
  if( hook==HOOK_STOP_IN_FLUSH ) kill(aPid[0], SIGKILL);
  CHECK(wait_exit(aPid[0], 60)==128 + SIGKILL);
  aAcked[0] = acked(aFd[0]);
  CHECK(aAcked[0]<n);
  db = open_db("off", "FULL");
  /* Acknowledged: there. The killed one's commit in flight: maybe. */
  CHECK(rows_of(db, 0)>=aAcked[0] && rows_of(db, 0)<=aAcked[0] + 1);
  for(i=1; i<4; i++) CHECK_EQ(rows_of(db, i), n);
  check_integrity(db);
  sqlite3_close(db);
}

/* A committer that cannot open the descriptor the leader lock is taken on
** (EMFILE), while nobody else commits, flushes for itself (F4): it does not
** wait forever for a leader. */
static void test_no_leader_descriptor(void){
  sqlite3 *db;
  pid_t pid;
  int fd;
  fresh_db();
  db = open_db("off", "FULL");      /* a second process: shared flushes */
  CHECK(rows_of(db, 9)==0);
  pid = spawn_writer(9, "durable", "FULL", 5, HOOK_NO_LOG_REOPEN, 0, &fd);
  CHECK_EQ(wait_exit(pid, 60), 0);
  CHECK_EQ(acked(fd), 5);
  CHECK_EQ(rows_of(db, 9), 5);
  sqlite3_close(db);
}

/* ---------------------------------------------------------------- poison */

static void test_failed_flush(void){
  pid_t aPid[4];
  int aFd[4], aStatus[4], aAcked[4], i, n = 300, failed = 0;
  char zMsg[512];
  sqlite3 *db;
  fresh_db();
  aPid[0] = spawn_writer(0, "durable", "FULL", n, HOOK_FAIL_FLUSH, 20, &aFd[0]);
  for(i=1; i<4; i++){
    aPid[i] = spawn_writer(i, "durable", "FULL", n, HOOK_NONE, 0, &aFd[i]);
  }
  for(i=0; i<4; i++){
    aStatus[i] = wait_exit(aPid[i], 120);
    aAcked[i] = acked(aFd[i]);
    CHECK(aStatus[i]==0 || aStatus[i]==10 + SQLITE_IOERR);
    failed += aStatus[i]!=0;
  }
  CHECK(aStatus[0]==10 + SQLITE_IOERR);        /* its own flush failed */
  CHECK(failed>=1);
  /* The flush that failed may have been made for others: their commits
  ** failed too, and nothing after the failure was acknowledged as durable
  ** by any flush of the poisoned region. */
  db = open_db("off", "FULL");
  for(i=0; i<4; i++) CHECK(rows_of(db, i)>=aAcked[i]);
  check_integrity(db);
  waldio_last_error(zMsg, sizeof(zMsg));
  sqlite3_close(db);
}

/* ---------------------------------------------------------------- strict */

/* A reader child: on each byte from `go`, run zCount (one integer) and write
** it back on `out`. Its flushes wait at the gate too. */
static pid_t spawn_reader_of(const char *zGroup, const char *zCount, int *pGo,
                             int *pOut){
  int go[2], out[2];
  pid_t pid;
  if( pipe(go) || pipe(out) ) return -1;
  pid = fork();
  if( pid==0 ){
    sqlite3 *db;
    char c;
    install_hooks(HOOK_GATE_FLUSH, 0);
    db = open_db(zGroup, "FULL");
    close(go[1]);
    close(out[0]);
    while( db && read(go[0], &c, 1)==1 ){
      int n = (int)query_int(db, zCount);
      if( write(out[1], &n, sizeof(n))!=sizeof(n) ) break;
    }
    sqlite3_close(db);
    _exit(0);
  }
  close(go[0]);
  close(out[1]);
  *pGo = go[1];
  *pOut = out[0];
  return pid;
}

static pid_t spawn_reader(const char *zGroup, int *pGo, int *pOut){
  return spawn_reader_of(zGroup, "SELECT count(*) FROM t", pGo, pOut);
}

/* Wait up to ms for an int on fd: 1 if one came. */
static int read_int(int fd, int ms, int *pN){
  fd_set set;
  struct timeval tv;
  FD_ZERO(&set);
  FD_SET(fd, &set);
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  if( select(fd + 1, &set, 0, 0, &tv)!=1 ) return 0;
  return read(fd, pN, sizeof(*pN))==sizeof(*pN);
}

/* While the gate file exists, every flush of every process here waits at
** the gate, so no commit becomes durable until the parent opens it. */
static void test_strict_readers(void){
  int gate[2], goS, outS, goD, outD, wFd, n = -1, i, fd;
  pid_t pS, pD, pW;
  fresh_db();
  snprintf(g_gateFile, sizeof(g_gateFile), "%s-gate", g_db);
  if( pipe(gate) ){ CHECK(0); return; }
  g_gateFd = gate[0];
  pS = spawn_reader("strict", &goS, &outS);
  pD = spawn_reader("durable", &goD, &outD);
  CHECK(write(goS, "r", 1)==1 && read_int(outS, 20000, &n) && n==0);
  CHECK(write(goD, "r", 1)==1 && read_int(outD, 20000, &n) && n==0);
  /* A first commit starts the log's generation (whose header SQLite syncs
  ** before it publishes anything). */
  CHECK_EQ(commit_rows(6, "off", "FULL", 1, -1), 0);
  fd = open(g_gateFile, O_CREAT|O_WRONLY, 0644);         /* shut the gate */
  close(fd);
  pW = spawn_writer(7, "durable" SHARED_ONLY, "FULL", 1, HOOK_GATE_FLUSH, 0, &wFd);
  g_gateFd = -1;
  close(gate[0]);
  /* The writer's commit is published, its flush held at the gate. */
  for(i=0; i<500 && n!=2; i++){
    CHECK(write(goD, "r", 1)==1 && read_int(outD, 20000, &n));
    if( n!=2 ) usleep(10000);
  }
  CHECK_EQ(n, 2);                   /* durable: visible before its flush */
  /* The strict reader may not see it: it waits for the stuck-looking
  ** leader, then flushes itself, at the gate too. */
  CHECK(write(goS, "r", 1)==1);
  CHECK(read_int(outS, 1000, &n)==0);
  unlink(g_gateFile);                                      /* open it */
  for(i=0; i<64; i++) CHECK(write(gate[1], "g", 1)==1);
  CHECK(read_int(outS, 20000, &n) && n==2);
  CHECK_EQ(wait_exit(pW, 60), 0);
  CHECK_EQ(acked(wFd), 1);
  close(gate[1]);
  close(goS);
  close(goD);
  CHECK_EQ(wait_exit(pS, 60), 0);
  CHECK_EQ(wait_exit(pD, 60), 0);
  close(outS);
  close(outD);
}

/* ------------------------------------------------------ early read release */

/* Shut the gate, and spawn a durable writer of one row whose flush waits
** there; return once it does (its commit published, COMMIT waiting). */
static pid_t spawn_gated_writer(int who, int *pGate, int *pAckFd){
  int gate[2], fd, i;
  pid_t pid;
  snprintf(g_gateFile, sizeof(g_gateFile), "%s-gate", g_db);
  snprintf(g_atGateFile, sizeof(g_atGateFile), "%s-at-gate", g_db);
  unlink(g_atGateFile);
  if( pipe(gate) ) return -1;
  fd = open(g_gateFile, O_CREAT|O_WRONLY, 0644);
  close(fd);
  g_gateFd = gate[0];
  pid = spawn_writer(who, "durable" SHARED_ONLY, "FULL", 1, HOOK_GATE_FLUSH, 0, pAckFd);
  g_gateFd = -1;
  close(gate[0]);
  for(i=0; i<2000 && access(g_atGateFile, F_OK)!=0; i++) usleep(10000);
  CHECK(access(g_atGateFile, F_OK)==0);
  g_atGateFile[0] = 0;
  *pGate = gate[1];
  return pid;
}

static void open_gate(pid_t pid, int gate, int ackFd){
  int i;
  unlink(g_gateFile);
  for(i=0; i<64; i++) CHECK(write(gate, "g", 1)==1);
  close(gate);
  CHECK_EQ(wait_exit(pid, 60), 0);
  CHECK_EQ(acked(ackFd), 1);
}

/* A strict reader waits only when it reads a frame that no flush is known
** to cover (db_file.c frame_is_durable): a commit under way elsewhere does
** not hold up a read of pages it did not change. While a published commit's
** flush is held at the gate, a strict reader of another table answers
** (test_strict_readers: a reader of the commit's table waits). */
static void test_strict_reader_of_durable_frames(void){
  int gate = -1, ackFd = -1, goO, outO, goU, outU, n = -1;
  pid_t pid, pO, pU;
  sqlite3 *db;
  fresh_db();
  /* Open throughout: no close checkpoints the log, so the gated commit
  ** below appends to this generation (a restart syncs its header before
  ** it publishes anything). The other processes start shared. */
  pO = spawn_reader("off", &goO, &outO);
  CHECK(write(goO, "r", 1)==1 && read_int(outO, 20000, &n) && n==0);
  db = open_db("off", "FULL");
  CHECK(db!=0);
  CHECK_EQ(sqlite3_exec(db, "CREATE TABLE u(x); INSERT INTO u VALUES(1);",
                        0, 0, 0), SQLITE_OK);
  sqlite3_close(db);
  /* A later commit's flush covers u's frames: it began after they were
  ** published (F6). */
  CHECK_EQ(commit_rows(6, "off", "FULL", 1, -1), 0);
  pU = spawn_reader_of("strict", "SELECT count(*) FROM u", &goU, &outU);
  CHECK(write(goU, "r", 1)==1 && read_int(outU, 20000, &n) && n==1);
  pid = spawn_gated_writer(7, &gate, &ackFd);    /* a row of t, not durable */
  CHECK(write(goU, "r", 1)==1 && read_int(outU, 20000, &n) && n==1);
  open_gate(pid, gate, ackFd);
  CHECK(write(goU, "r", 1)==1 && read_int(outU, 20000, &n) && n==1);
  /* Each child holds the pipes of those made before it: last made, first
  ** closed. */
  close(goU);
  CHECK_EQ(wait_exit(pU, 60), 0);
  close(goO);
  CHECK_EQ(wait_exit(pO, 60), 0);
  close(outU);
  close(outO);
}

/* The default group mode, auto (log_group.h). In the standard layout, a
** synchronous=NORMAL commit takes no ticket: while flushes wait at the
** gate, a reader in the default mode sees it at once, as stock NORMAL's
** readers do. A FULL commit shares its flush: published with its flush
** held at the gate, the same reader waits for it, as no stock reader sees
** a FULL commit before its sync. In the slotted layouts auto is off: the
** FULL commit flushes before it is published, and the reader, seeing the
** table without it, answers at once. */
static void test_auto_readers(void){
  int standard = test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD;
  int gate[2], go, out, ackFd = -1, n = -1, i;
  pid_t pR, pF;
  fresh_db();
  snprintf(g_gateFile, sizeof(g_gateFile), "%s-gate", g_db);
  if( pipe(gate) ){ CHECK(0); return; }
  g_gateFd = gate[0];
  pR = spawn_reader_of(DEFAULT_GROUP, "SELECT count(*) FROM t", &go, &out);
  CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==0);
  /* A first commit starts the log's generation (SQLite syncs its header
  ** before publishing anything), and the reader reads it, so that every
  ** ticket so far is durable before the gate shuts. */
  CHECK_EQ(commit_rows(6, DEFAULT_GROUP, "FULL", 1, -1), 0);
  CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==1);
  close(open(g_gateFile, O_CREAT|O_WRONLY, 0644));          /* shut the gate */
  /* A NORMAL commit (this process's flushes pass the gate): the reader
  ** sees it at once. */
  CHECK_EQ(commit_rows(8, DEFAULT_GROUP, "NORMAL", 1, -1), 0);
  CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==2);
  /* A FULL commit whose flush waits at the gate. */
  snprintf(g_atGateFile, sizeof(g_atGateFile), "%s-at-gate", g_db);
  unlink(g_atGateFile);
  pF = spawn_writer(7, DEFAULT_GROUP SHARED_ONLY, "FULL", 1, HOOK_GATE_FLUSH, 0,
                    &ackFd);
  g_gateFd = -1;
  close(gate[0]);
  for(i=0; i<2000 && access(g_atGateFile, F_OK)!=0; i++) usleep(10000);
  CHECK(access(g_atGateFile, F_OK)==0);
  g_atGateFile[0] = 0;
  CHECK(write(go, "r", 1)==1);
  if( standard ){
    CHECK(read_int(out, 1000, &n)==0);    /* published: the reader waits */
  }else{
    CHECK(read_int(out, 20000, &n) && n==2);    /* not published yet */
  }
  unlink(g_gateFile);                                       /* open it */
  for(i=0; i<64; i++) CHECK(write(gate[1], "g", 1)==1);
  close(gate[1]);
  if( standard ) CHECK(read_int(out, 20000, &n) && n==3);
  CHECK_EQ(wait_exit(pF, 60), 0);
  CHECK_EQ(acked(ackFd), 1);
  if( !standard ) CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==3);
  close(go);
  CHECK_EQ(wait_exit(pR, 60), 0);
  close(out);
}

/* A commit waiting for its flush gave its read lock back before waiting:
** a checkpoint in another process backfills the whole log, the waiting
** commit's frames included (not in the standard layout: see below). (Before, the waiter's read mark, older than
** its commit, held every checkpoint short; with many processes one is
** always waiting, so SQLite never restarted the log, and the log grew.) */
static void test_waiter_lets_checkpoint_finish(void){
  int gate = -1, ackFd = -1, nLog = -1, nCkpt = -2, go, out, n = -1;
  pid_t pid, pR;
  sqlite3 *db;
  fresh_db();
  pR = spawn_reader("off", &go, &out);    /* the writer starts shared */
  CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==0);
  /* A first commit starts the log's generation (SQLite syncs its header
  ** before publishing anything): before the gate shuts. */
  CHECK_EQ(commit_rows(6, "off", "FULL", 3, -1), 0);
  pid = spawn_gated_writer(7, &gate, &ackFd);
  db = open_db("off", "FULL");
  CHECK_EQ(rows_of(db, 7), 1);              /* published, not yet durable */
  CHECK_EQ(sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE,
                                     &nLog, &nCkpt), SQLITE_OK);
  CHECK(nLog>0);
  if( test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD ){
    /* Where stock processes share the wal-index the waiter keeps its read
    ** lock (db_file.c): no checkpointer, not even a stock one with
    ** synchronous=OFF that copies without syncing the log, may copy a
    ** commit before it is durable. */
    CHECK(nCkpt>0 && nCkpt<nLog);
  }else{
    CHECK_EQ(nCkpt, nLog);
  }
  open_gate(pid, gate, ackFd);
  CHECK_EQ(rows_of(db, 7), 1);
  check_integrity(db);
  sqlite3_close(db);
  close(go);
  CHECK_EQ(wait_exit(pR, 60), 0);
  close(out);
}

/* A commit made while another statement of its connection is still
** reading keeps the read lock: that statement goes on in its snapshot,
** and a checkpoint stops short of it. */
static void test_reading_statement_keeps_its_snapshot(void){
  int go, out, nLog = -1, nCkpt = -2, seen = 0, rc, n = -1;
  pid_t pid;
  sqlite3 *db, *other;
  sqlite3_stmt *pStmt = 0;
  fresh_db();
  CHECK_EQ(commit_rows(1, "off", "FULL", 5, -1), 0);
  pid = spawn_reader("durable", &go, &out);  /* a second process: shared mode */
  CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==5);
  db = open_db("durable", "FULL");
  other = open_db("off", "FULL");
  CHECK_EQ(sqlite3_prepare_v2(db, "SELECT n FROM t WHERE who=1 ORDER BY n",
                              -1, &pStmt, 0), SQLITE_OK);
  CHECK_EQ(sqlite3_step(pStmt), SQLITE_ROW);
  seen = 1;
  CHECK_EQ(insert(db, 2, 1), SQLITE_OK);    /* commits while pStmt reads */
  CHECK_EQ(insert(other, 3, 1), SQLITE_OK);
  CHECK_EQ(sqlite3_wal_checkpoint_v2(other, "main", SQLITE_CHECKPOINT_PASSIVE,
                                     &nLog, &nCkpt), SQLITE_OK);
  CHECK(nCkpt<nLog);                        /* pStmt's read mark holds it */
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    CHECK_EQ(sqlite3_column_int(pStmt, 0), ++seen);
  }
  CHECK_EQ(rc, SQLITE_DONE);
  CHECK_EQ(seen, 5);
  sqlite3_finalize(pStmt);
  CHECK_EQ(sqlite3_wal_checkpoint_v2(other, "main", SQLITE_CHECKPOINT_PASSIVE,
                                     &nLog, &nCkpt), SQLITE_OK);
  CHECK_EQ(nCkpt, nLog);                    /* and not once it is done */
  sqlite3_close(db);
  sqlite3_close(other);
  close(go);
  CHECK_EQ(wait_exit(pid, 60), 0);
  close(out);
}

/* ------------------------------------------------------------------ fork */

static volatile int g_stopThreads;

static void *commit_thread(void *pArg){
  sqlite3 *db = open_db("durable" SHARED_ONLY, "FULL");
  int who = (int)(long)pArg, n = 0;
  while( db && !g_stopThreads ){
    if( insert(db, who, ++n)!=SQLITE_OK ) break;
  }
  sqlite3_close(db);
  return 0;
}

/* A process whose threads lead shared flushes forks, again and again,
** children that live on without exec (they do not touch SQLite: a child of
** a multithreaded process may not). */
static void forking_leader(void){
  pthread_t a[2];
  int i;
  for(i=0; i<2; i++) pthread_create(&a[i], 0, commit_thread, (void*)(long)(60 + i));
  for(;;){
    if( fork()==0 ){
      sleep(30);
      _exit(0);
    }
    usleep(500);
  }
}

static int leader_lock_held(void){
  waldio_syscalls sys;
  char zWal[600];
  int fd, held;
  waldio_syscalls_default(&sys);
  snprintf(zWal, sizeof(zWal), "%s-wal", g_db);
  fd = open(zWal, O_RDONLY);
  CHECK(fd>=0);
  held = log_lock_held_elsewhere(&sys, fd, LOG_LOCK_LEADER, LOG_EXCLUSIVE)
      || log_lock_held_elsewhere(&sys, fd, LOG_LOCK_LEADER2, LOG_EXCLUSIVE);
  close(fd);
  return held;
}

/* The forking process is killed while one of its threads is inside a flush,
** holding the leader lock (a shut gate holds it there), and its children
** live on. If a child shared the descriptor the lock was taken on, the
** lock would stay held for as long as the child lives. */
static void test_fork_while_leading(void){
  pid_t pLeader, pOther;
  int gate[2], fd, wFd, status, i;
  sqlite3 *db;
  fresh_db();
  snprintf(g_gateFile, sizeof(g_gateFile), "%s-gate", g_db);
  snprintf(g_atGateFile, sizeof(g_atGateFile), "%s-at-gate", g_db);
  unlink(g_atGateFile);
  CHECK(pipe(gate)==0);
  pLeader = fork();
  if( pLeader==0 ){
    setpgid(0, 0);                  /* its children: one group, killed below */
    close(gate[1]);
    g_gateFd = gate[0];             /* never written: the gate stays shut */
    /* Only flushes it leads: a sync under SQLite's write lock (a new
    ** generation's header, the log's growth) held at the gate would keep
    ** every thread from committing, and so from leading (leading()). */
    g_gateLeading = 1;
    install_hooks(HOOK_GATE_FLUSH, 0);
    forking_leader();
  }
  close(gate[0]);
  db = open_db("off", "FULL");      /* a second process: shared flushes */
  CHECK(rows_of(db, 60)>=0);
  sleep(1);                         /* it leads flushes and forks */
  fd = open(g_gateFile, O_CREAT|O_WRONLY, 0644);              /* shut the gate */
  close(fd);
  /* Its syncs wait at the gate; one of them soon is a flush it leads. */
  for(i=0; i<2000 && !leader_lock_held(); i++) usleep(10000);
  CHECK(leader_lock_held());
  kill(pLeader, SIGKILL);
  waitpid(pLeader, &status, 0);
  /* A child forked just before the flush began shares leaderFd until its
  ** fork handler closes it, which a busy machine may run a moment after the
  ** parent's death. The children live 30 s: a child that kept it would keep
  ** the lock held through this wait. */
  for(i=0; i<300 && leader_lock_held(); i++) usleep(10000);
  CHECK(!leader_lock_held());       /* the forked children still live */
  sqlite3_close(db);
  unlink(g_gateFile);
  g_atGateFile[0] = 0;
  pOther = spawn_writer(50, "durable", "FULL", 200, HOOK_NONE, 0, &wFd);
  CHECK_EQ(wait_exit(pOther, 120), 0);
  CHECK_EQ(acked(wFd), 200);
  close(gate[1]);
  kill(-pLeader, SIGKILL);
  while( waitpid(-pLeader, &status, 0)>0 ){}
}

/* ----------------------------------------------------------------- wakes */

/* A copy of the flush region (region 0 of <db>-wal-shm) as the processes
** left it; 0 if it cannot be read. */
/* The flush region: region 0 of waldio's wal-index in the slotted layouts,
** the side file in the standard layout (flush_side.h). */
static int read_region(flush_region *pOut){
  char zShm[600];
  int fd, ok;
  snprintf(zShm, sizeof(zShm), "%s%s", g_db,
           test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD ? "-waldio" : "-wal-shm");
  fd = open(zShm, O_RDONLY);
  if( fd<0 ) return 0;
  ok = pread(fd, pOut, sizeof(*pOut), 0)==(ssize_t)sizeof(*pOut);
  close(fd);
  return ok && pOut->magic==FLUSH_REGION_MAGIC;
}

static u32 wake_words(const flush_region *r){
  u32 sum = 0;
  int i;
  for(i=0; i<FLUSH_WAKE_SLOTS; i++) sum += r->aWake[i];
  return sum;
}

/* A counter of this connection's log from PRAGMA waldio_stats; -1 if absent. */
static long long stat_of(sqlite3 *db, const char *zName){
  char z[4096], zKey[64];
  const char *p;
  query_text(db, "PRAGMA waldio_stats", z, sizeof(z));
  snprintf(zKey, sizeof(zKey), "\"%s\":", zName);
  p = strstr(z, zKey);
  return p ? atoll(p + strlen(zKey)) : -1;
}

/* A strict commit with no other near flushes before SQLite publishes it
** and takes its ticket durable (wal_file.c flushes_alone): after each,
** the region says every ticket is durable, and the commit never waited.
** With waldio_flush_alone=0 each waits for a shared flush instead. Another
** process has the database open throughout: the commits are shared ones. */
static void test_flush_alone(void){
  static const char *azMode[] = { "strict", "strict" SHARED_ONLY };
  int go, out, n = -1, i, m;
  flush_region r;
  for(m=0; m<2; m++){
    sqlite3 *db;
    pid_t pR;
    fresh_db();
    pR = spawn_reader("off", &go, &out);
    CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==0);
    db = open_db(azMode[m], "FULL");
    /* The first commit flushes the shared way: attaching the region took a
    ** ticket for what the log held, not durable until a flush. */
    CHECK_EQ(insert(db, 1, 0), SQLITE_OK);
    CHECK_EQ(sqlite3_exec(db, "PRAGMA waldio_stats=reset", 0, 0, 0), SQLITE_OK);
    for(i=1; i<=20; i++){
      CHECK_EQ(insert(db, 1, i), SQLITE_OK);
      CHECK(read_region(&r));
      if( m==0 ) CHECK_EQ(r.durable, r.written);
    }
    CHECK_EQ(stat_of(db, "group_commits"), 20);
    CHECK_EQ(stat_of(db, "alone_flushes"), m==0 ? 20 : 0);
    if( m==0 ) CHECK_EQ(stat_of(db, "group_waits"), 0);
    else CHECK(stat_of(db, "group_waits")>0);
    CHECK(write(go, "r", 1)==1 && read_int(out, 20000, &n) && n==21);
    sqlite3_close(db);
    close(go);
    CHECK_EQ(wait_exit(pR, 60), 0);
    close(out);
  }
}

/* The child of test_busy_sleeper: its busy handler reports its first call
** on fd, then sleeps as SQLite's does at its longest, and longer. */
static int g_busyFd = -1;
static int sleepy_busy(void *pArg, int nCall){
  (void)pArg;
  if( nCall==0 ){
    if( write(g_busyFd, "b", 1)!=1 ) return 0;
    usleep(300000);
  }else{
    usleep(1000);
  }
  return nCall<20000;
}

/* A writer of another process that gave up waiting for the WAL write lock
** sleeps in SQLite's busy handler, where nobody counts it as waiting: a
** commit that flushed alone then would hold the lock through its flush,
** and such a writer could sleep through every chance to take it (two
** processes made 32,312 and 1 commits). While one may be asleep there
** (flush_region lockMissMs), a commit takes the shared path: it releases
** the lock before its flush. */
/* A child that opens the log (group zGroup, synchronous zSync), says 'o'
** on *pBusy, and on a byte from *pGo inserts one row, its busy handler
** sleepy_busy; exit status 0 or 10 + the failing code. */
static pid_t spawn_sleepy_writer(const char *zGroup, const char *zSync,
                                 int *pGo, int *pBusy){
  int go[2], busy[2], rc;
  char c;
  pid_t pid;
  if( pipe(go) || pipe(busy) ) return -1;
  pid = fork();
  if( pid==0 ){
    sqlite3 *db = open_db(zGroup, zSync);
    close(go[1]);
    close(busy[0]);
    g_busyFd = busy[1];
    /* A first commit (a ticket) or a strict read of its frame maps the
    ** flush region: a group-mode connection waits for the write lock on
    ** it from then on (db_file.c lock_waits_for_writer). */
    if( !db || insert(db, 2, 0)!=SQLITE_OK
     || query_int(db, "SELECT count(*) FROM t")!=1 ) _exit(9);
    sqlite3_busy_handler(db, sleepy_busy, 0);
    if( write(busy[1], "o", 1)!=1 || read(go[0], &c, 1)!=1 ) _exit(8);
    rc = insert(db, 2, 1);
    sqlite3_close(db);
    _exit(rc==SQLITE_OK ? 0 : 10 + (rc & 0xff));
  }
  close(go[0]);
  close(busy[1]);
  *pGo = go[1];
  *pBusy = busy[0];
  return pid;
}

static void test_busy_sleeper(void){
  int go, busy, i;
  char c;
  pid_t pid;
  sqlite3 *db;
  fresh_db();
  pid = spawn_sleepy_writer("durable", "FULL", &go, &busy);
  CHECK(read(busy, &c, 1)==1 && c=='o');          /* B has the log open */
  db = open_db("durable", "FULL");
  CHECK(db!=0);
  /* B's commit is "another process committed lately" for the next
  ** LOG_OTHERS_WRITES (64) writes of this one (wal_log.h). */
  for(i=1; i<=80; i++) CHECK_EQ(insert(db, 1, i), SQLITE_OK);
  CHECK_EQ(stat_of(db, "alone_flushes")>0, 1);     /* nobody near: alone */
  CHECK_EQ(sqlite3_exec(db, "PRAGMA waldio_stats=reset;"
                        " BEGIN IMMEDIATE; INSERT INTO t VALUES(1, 81, 0)",
                        0, 0, 0), SQLITE_OK);
  CHECK(write(go, "g", 1)==1);
  CHECK(read(busy, &c, 1)==1 && c=='b');           /* B gave up, asleep */
  CHECK_EQ(sqlite3_exec(db, "COMMIT", 0, 0, 0), SQLITE_OK);
  CHECK_EQ(stat_of(db, "group_commits"), 1);
  CHECK_EQ(stat_of(db, "alone_flushes"), 0);
  CHECK_EQ(wait_exit(pid, 60), 0);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 83);
  close(go);
  close(busy);
  sqlite3_close(db);
}

/* Under auto a NORMAL connection's writes take no part in group commit: it
** waits for the write lock in SQLite's busy handler at once, as off does,
** not on the flush region (whose miss mark it then never sets). A FULL
** connection of the default mode waits there first (standard layout). */
static void test_auto_normal_writer(void){
  static const char *azLevel[] = { "NORMAL", "FULL" };
  int standard = test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD;
  int go, busy, m;
  char c;
  for(m=0; m<2; m++){
    flush_region r;
    pid_t pid;
    sqlite3 *db;
    fresh_db();
    pid = spawn_sleepy_writer(DEFAULT_GROUP, azLevel[m], &go, &busy);
    CHECK(read(busy, &c, 1)==1 && c=='o');
    db = open_db(DEFAULT_GROUP, "FULL");
    CHECK(db!=0);
    CHECK_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE; INSERT INTO t VALUES(1, 1, 0)",
                          0, 0, 0), SQLITE_OK);
    CHECK(write(go, "g", 1)==1);
    CHECK(read(busy, &c, 1)==1 && c=='b');         /* in the busy handler */
    memset(&r, 0, sizeof(r));
    if( standard ){
      CHECK(read_region(&r));
      CHECK_EQ(r.lockMissMs!=0, m==1);
    }else{
      CHECK(!read_region(&r) || r.lockMissMs==0);  /* auto is off here */
    }
    CHECK_EQ(sqlite3_exec(db, "COMMIT", 0, 0, 0), SQLITE_OK);
    CHECK_EQ(wait_exit(pid, 60), 0);
    CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 3);
    close(go);
    close(busy);
    sqlite3_close(db);
  }
}

static void run_writers(int np, const char *zGroup, int n){
  pid_t aPid[8];
  int aFd[8], i;
  for(i=0; i<np; i++) aPid[i] = spawn_writer(i, zGroup, "FULL", n, HOOK_NONE, 0, &aFd[i]);
  for(i=0; i<np; i++){
    CHECK_EQ(wait_exit(aPid[i], 60), 0);
    CHECK_EQ(acked(aFd[i]), n);
  }
}

/* The region is read from the file once every writer has closed: nothing
** clears it then (the next opener starts it afresh). */
static void test_wakes(void){
  flush_region r;
  sqlite3 *db;
  fresh_db();
  run_writers(3, "off", 60);
  if( test_layout(WALDIO_LAYOUT_EMBED)==WALDIO_LAYOUT_STANDARD ){
    CHECK(!read_region(&r));          /* no group commit: no side file */
  }else{
    CHECK(read_region(&r));
    CHECK(r.written>=180 && r.durable==r.written);
    CHECK_EQ(r.waiters, 0);
    CHECK_EQ(wake_words(&r), 0);      /* nobody waited: nobody was woken */
  }
  fresh_db();
  run_writers(4, "durable", 60);
  CHECK(read_region(&r));
  CHECK_EQ(r.waiters, 0);             /* every wait counted itself out */
  CHECK_EQ(r.durable, r.written);
  db = open_db("off", "FULL");
  CHECK_EQ(query_int(db, "SELECT count(*) FROM t"), 4*60);
  check_integrity(db);
  sqlite3_close(db);
}

int main(void){
  char zDir[300];
  static const int aNp[] = { 2, 4, 8, 16 };
  size_t i;
  signal(SIGPIPE, SIG_IGN);
  test_dir(zDir, sizeof(zDir), "groupproc");
  snprintf(g_db, sizeof(g_db), "%s/g.db", zDir);
  if( test_register("waldio", 0, WALDIO_LAYOUT_EMBED)!=SQLITE_OK ) return 2;
  for(i=0; i<sizeof(aNp)/sizeof(aNp[0]); i++){
    fprintf(stderr, "  many: %d processes, durable\n", aNp[i]);
    test_many(aNp[i], 0);
  }
  fprintf(stderr, "  many: 10 processes, every mode mixed\n");
  test_many(10, 1);
  test_killed(HOOK_KILL_AFTER_WRITE, "after writing its frames, before a flush");
  test_killed(HOOK_KILL_IN_FLUSH, "a leader, inside its fdatasync");
  test_killed(HOOK_STOP_IN_FLUSH, "a leader stopped inside its fdatasync");
  fprintf(stderr, "  a failed flush\n");
  fprintf(stderr, "  killed: no descriptor for the leader lock\n");
  test_no_leader_descriptor();
  test_failed_flush();
  fprintf(stderr, "  strict and durable readers\n");
  test_strict_readers();
  fprintf(stderr, "  a strict reader of durable frames does not wait\n");
  test_strict_reader_of_durable_frames();
  fprintf(stderr, "  the default group mode's readers (auto)\n");
  test_auto_readers();
  fprintf(stderr, "  a waiting commit lets a checkpoint finish\n");
  test_waiter_lets_checkpoint_finish();
  fprintf(stderr, "  a reading statement keeps its snapshot\n");
  test_reading_statement_keeps_its_snapshot();
  fprintf(stderr, "  a saturating load still restarts the log\n");
  test_long_log_restarts();
  fprintf(stderr, "  fork while leading, then killed\n");
  test_fork_while_leading();
  fprintf(stderr, "  a commit with no other near flushes alone\n");
  test_flush_alone();
  fprintf(stderr, "  a writer asleep in the busy handler is not starved\n");
  test_busy_sleeper();
  fprintf(stderr, "  a NORMAL writer under auto waits as off does\n");
  test_auto_normal_writer();
  fprintf(stderr, "  flushes without waiters wake nobody\n");
  test_wakes();
  remove_db(g_db);
  rmdir(zDir);
  return CHECK_DONE();
}
