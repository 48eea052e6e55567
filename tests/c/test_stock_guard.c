/*
** test_stock_guard.c — stock_sqlite_shares (stock_guard.h): who has a
** standard-layout database open without waldio, from /proc/locks alone.
** A child process plays each part with the locks the part holds:
**   - a stock process: SQLite's read lock on the -shm dead-man switch;
**   - a waldio process: the same, and the log's USE lock (an OFD lock),
** each joining and leaving in turn. (The recounts for a waldio process that
** exits without closing, its USE lock going a moment before the switch,
** depend on timing and are not tested here; test_graceful_stop.py stops
** such processes.) Exit status 77 (skipped) where OFD locks do not work
** (qemu-user).
*/
#include "check.h"
#include "log_lock.h"
#include "stock_guard.h"
#include "test_util.h"

#include <fcntl.h>
#include <sys/wait.h>

#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37               /* glibc shows it with _GNU_SOURCE only */
#endif

static int lock_byte(int fd, int cmd, short type, long long off){
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = off;
  fl.l_len = 1;
  return fcntl(fd, cmd, &fl);
}

/* A child holding the -shm switch, the log's USE too if waldio, until it
** reads a byte from *pGo; returns its pid once its locks are held. */
static pid_t part(const char *zShm, const char *zWal, int waldio, int *pGo){
  int toChild[2], ready[2];
  char x = 0;
  pid_t pid;
  if( pipe(toChild) || pipe(ready) ) exit(2);
  pid = fork();
  if( pid==0 ){
    int fdWal = waldio ? open(zWal, O_RDWR) : -1;   /* the log first, as waldio */
    int fdShm = open(zShm, O_RDWR);
    if( waldio && lock_byte(fdWal, F_OFD_SETLK, F_RDLCK, log_lock_offset(LOG_LOCK_USE)) ){
      _exit(3);
    }
    if( lock_byte(fdShm, F_SETLK, F_RDLCK, STOCK_SHM_DMS) ) _exit(3);
    if( write(ready[1], "r", 1)!=1 || read(toChild[0], &x, 1)!=1 ) _exit(3);
    _exit(0);                       /* exits without unlocking: the log's fd first */
  }
  if( read(ready[0], &x, 1)!=1 ){
    int st = 0;
    waitpid(pid, &st, 0);
    if( WIFEXITED(st) && WEXITSTATUS(st)==3 ){
      printf("skipped: OFD locks do not work here\n");
      exit(77);
    }
    exit(2);
  }
  close(toChild[0]); close(ready[0]); close(ready[1]);
  *pGo = toChild[1];
  return pid;
}

static void end(pid_t pid, int go){
  int st = 0;
  CHECK_EQ(write(go, "g", 1), 1);
  close(go);
  CHECK_EQ(waitpid(pid, &st, 0), pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st)==0);
}

int main(void){
  char zDir[300], zShm[400], zWal[400];
  int goW1, goW2, goStock;
  pid_t w1, w2, stock;
  test_dir(zDir, sizeof(zDir), "stockguard");
  snprintf(zShm, sizeof(zShm), "%s/s.db-shm", zDir);
  snprintf(zWal, sizeof(zWal), "%s/s.db-wal", zDir);
  close(open(zShm, O_RDWR|O_CREAT, 0644));
  close(open(zWal, O_RDWR|O_CREAT, 0644));

  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 0);       /* nobody */
  w1 = part(zShm, zWal, 1, &goW1);
  w2 = part(zShm, zWal, 1, &goW2);
  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 0);       /* two waldio processes */
  stock = part(zShm, zWal, 0, &goStock);
  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 1);       /* and a stock one */
  end(w1, goW1);                                      /* a waldio one exits */
  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 1);
  end(stock, goStock);
  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 0);       /* the stock one left */
  end(w2, goW2);
  CHECK_EQ(stock_sqlite_shares(zShm, zWal), 0);

  unlink(zShm);
  unlink(zWal);
  rmdir(zDir);
  return CHECK_DONE();
}
