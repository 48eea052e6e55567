/*
** stock_guard.c — detect a live SQLite without waldio (see stock_guard.h).
*/
#include "stock_guard.h"
#include "errors.h"
#include "log_lock.h"
#include "sqlite_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>


/* One line of /proc/locks, e.g.
**   "3: POSIX  ADVISORY  READ 4242 fe:00:1573010 128 128"
** Non-zero if it is a granted lock on inode maj:min:ino covering byte off
** (a blocked waiter's line starts with "-> ": not a holder). */
static int line_covers(const char *zLine, unsigned maj, unsigned min,
                       unsigned long ino, long long off){
  unsigned lmaj, lmin;
  unsigned long lino;
  long long start;
  char zEnd[32];
  const char *z = strchr(zLine, ':');
  if( !z || strstr(zLine, "->") ) return 0;
  /* Skip "id:", the class (POSIX/FLOCK/OFDLCK), mode, access and pid. */
  if( sscanf(z+1, " %*s %*s %*s %*s %x:%x:%lu %lld %31s", &lmaj, &lmin, &lino,
             &start, zEnd)!=5 ){
    return 0;
  }
  if( lmaj!=maj || lmin!=min || lino!=ino ) return 0;
  if( start>off ) return 0;
  return strcmp(zEnd, "EOF")==0 || atoll(zEnd)>=off;
}

int lock_holders(const char *zPath, long long off){
  struct stat st;
  char zLine[256];
  FILE *f;
  int n = 0;
  if( stat(zPath, &st) ) return 0;
  f = fopen("/proc/locks", "r");
  if( !f ) return -1;
  while( fgets(zLine, sizeof(zLine), f) ){
    n += line_covers(zLine, major(st.st_dev), minor(st.st_dev), st.st_ino, off);
  }
  fclose(f);
  return n;
}

int stock_sqlite_active(const char *zShmPath){
  return lock_holders(zShmPath, STOCK_SHM_DMS)>0;
}

/* A waldio process takes the log's USE lock before SQLite maps -shm, and
** lets it go after SQLite unmapped it, except when it exits without closing
** its connections: the kernel then closes its descriptors in order, the
** log's (opened first) before -shm's, and for that moment the process looks
** like a stock one. So a count that finds more -shm holders is taken again,
** up to SHARE_COUNTS times SHARE_COUNT_MS apart: a stock process stays. */
#define SHARE_COUNTS   3
#define SHARE_COUNT_MS 2

int stock_sqlite_shares(const char *zShmPath, const char *zWalPath){
  int i, nShm = 0, nUse = 0;
  for(i=0; i<SHARE_COUNTS; i++){
    if( i ) usleep(SHARE_COUNT_MS * 1000);
    nShm = lock_holders(zShmPath, STOCK_SHM_DMS);
    nUse = lock_holders(zWalPath, log_lock_offset(LOG_LOCK_USE));
    if( nShm<0 || nUse<0 ) return -1;
    if( nShm<=nUse ) return 0;
  }
  return 1;
}

int waldio_stock_refusal(const char *zShmPath){
  size_t n = strlen(zShmPath);
  return waldio_error(SQLITE_BUSY, "%.*s: the database is open in SQLite"
      " without waldio (a process holds %s); close it there first: waldio and"
      " stock SQLite cannot share a database at the same time",
      (int)(n>4 ? n-4 : n), zShmPath, zShmPath);
}
