/*
** flush_side.c — the side file that holds a standard-layout log's flush
** region (flush_side.h: why it exists, its dead-man switch, and what a
** missing or foreign one means).
*/
#include "flush_side.h"
#include "errors.h"
#include "log_lock.h"
#include "sqlite_api.h"
#include "stock_guard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Far beyond the mapped bytes: advisory locks restrict no I/O. */
#define SIDE_LOCK_DMS    (1 << 20)
#define SIDE_DMS_WAIT_MS 5000     /* the first opener zeroes 4 KiB, no more */
#define SIDE_SUFFIX      "waldio"

void flush_side_init(flush_side *s, mode_t mode, uid_t uid, gid_t gid){
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mutex, 0);
  s->fd = -1;
  shm_watch_init(&s->watch);
  s->mode = mode;
  s->uid = uid;
  s->gid = gid;
}

static size_t region_bytes(void){
  long page = sysconf(_SC_PAGESIZE);
  size_t n = sizeof(flush_region);
  if( page<=0 ) page = 4096;
  return (n + (size_t)page - 1) / (size_t)page * (size_t)page;
}

/* "<db>-waldio" for the log "<db>-wal". */
static void side_path(const char *zWal, char *zOut, size_t nOut){
  size_t n = strlen(zWal);
  int nDb = (int)(n>4 && strcmp(zWal + n - 4, "-wal")==0 ? n - 4 : n);
  snprintf(zOut, nOut, "%.*s-" SIDE_SUFFIX, nDb, zWal);
}

static void refuse(flush_side *s, const char *zPath, const char *zWhat, int err){
  snprintf(s->zWhy, sizeof(s->zWhy), "%.300s: %s%s%s", zPath, zWhat,
           err ? ": " : "", err ? strerror(err) : "");
  waldio_warning("no shared flushes for group commit (%s); this process's"
                 " commits make themselves durable", s->zWhy);
}

/* Whose file it is: the database's owner's, or this process's. */
static int owner_ok(const flush_side *s, const struct stat *st){
  return st->st_uid==s->uid || st->st_uid==geteuid();
}

/* The dead-man switch (flush_side.h): zero the region if no other process
** has it mapped, then hold the switch shared. */
static int claim(flush_side *s, const waldio_syscalls *sys, int fd,
                 size_t nMap){
  int err = log_lock(sys, fd, SIDE_LOCK_DMS, LOG_EXCLUSIVE);
  if( err==0 ){
    if( sys->xFtruncate(fd, 0) || sys->xFtruncate(fd, (off_t)nMap) ) err = errno;
    if( log_lock(sys, fd, SIDE_LOCK_DMS, LOG_SHARED) && !err ) err = errno;
    return err;
  }
  if( err!=EAGAIN ) return err;
  return log_lock_wait(sys, fd, SIDE_LOCK_DMS, LOG_SHARED, SIDE_DMS_WAIT_MS);
}

static void open_side(flush_side *s, const waldio_syscalls *sys,
                      const char *zWal, int trustLog){
  char zPath[4096];
  struct stat st;
  size_t nMap = region_bytes();
  void *p;
  int fd, err;
  side_path(zWal, zPath, sizeof(zPath));
  fd = sys->xOpen(zPath, O_RDWR|O_CREAT|O_CLOEXEC|O_NOFOLLOW, s->mode);
  if( fd<0 ){ refuse(s, zPath, "cannot open", errno); return; }
  if( sys->xFstat(fd, &st) ){
    err = errno;
    sys->xClose(fd);
    refuse(s, zPath, "cannot stat", err);
    return;
  }
  if( st.st_size==0 && geteuid()==0 && st.st_uid!=s->uid ){
    sys->xFchown(fd, s->uid, s->gid);       /* created here, as root */
    sys->xFchmod(fd, s->mode);
    sys->xFstat(fd, &st);
  }
  if( !S_ISREG(st.st_mode) || !owner_ok(s, &st) ){
    sys->xClose(fd);
    refuse(s, zPath, S_ISREG(st.st_mode) ? "owned by another user than the"
           " database's owner or this process's" : "not a regular file", 0);
    return;
  }
  err = claim(s, sys, fd, nMap);
  if( err==0 && sys->xFstat(fd, &st)==0 && (size_t)st.st_size<nMap
   && sys->xFtruncate(fd, (off_t)nMap) ){
    err = errno;                            /* older, smaller: extend */
  }
  if( err ){
    sys->xClose(fd);
    refuse(s, zPath, "cannot take its lock", err);
    return;
  }
  p = mmap(0, nMap, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0);
  if( p==MAP_FAILED ){
    err = errno;
    sys->xClose(fd);
    refuse(s, zPath, "cannot map it", err);
    return;
  }
  if( flush_region_attach((volatile flush_region*)p, zPath, trustLog)!=SQLITE_OK ){
    munmap(p, nMap);
    sys->xClose(fd);
    refuse(s, zPath, "it does not hold waldio's flush region", 0);
    return;
  }
  s->fd = fd;
  s->pRegion = (volatile flush_region*)p;
  s->nMap = nMap;
  s->zShm = sqlite3_mprintf("%.*s-shm", (int)(strlen(zPath) - strlen(SIDE_SUFFIX) - 1),
                            zPath);
  s->zSide = sqlite3_mprintf("%s", zPath);
}

volatile flush_region *flush_side_region(flush_side *s,
                                         const waldio_syscalls *sys,
                                         const char *zWalPath, int trustLog,
                                         int *pRc){
  volatile flush_region *r;
  *pRc = SQLITE_OK;
  pthread_mutex_lock(&s->mutex);
  if( !s->tried ){
    s->tried = 1;
    open_side(s, sys, zWalPath, trustLog);
  }
  r = s->pRegion;
  pthread_mutex_unlock(&s->mutex);
  return r;
}

/* The count: no holder of -shm's dead-man switch without the side file's. */
static int count_sole(const char *zShm, const char *zSide){
  int nShm = lock_holders(zShm, STOCK_SHM_DMS);
  int nSide = lock_holders(zSide, log_lock_offset(SIDE_LOCK_DMS));
  return nShm>=0 && nSide>=0 && nShm<=nSide;
}

int flush_side_sole_users(flush_side *s, int *pCounted){
  struct timespec ts;
  long long now;
  int sole = 0;
  *pCounted = 0;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  now = (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
  pthread_mutex_lock(&s->mutex);
  if( s->pRegion && s->zShm && s->zSide ){    /* no names (NOMEM): kept */
    if( shm_watch_count_due(&s->watch, s->zShm, s->zSide, now) ){
      shm_watch_counted(&s->watch, count_sole(s->zShm, s->zSide));
      *pCounted = 1;
    }
    sole = shm_watch_sole(&s->watch);
  }
  pthread_mutex_unlock(&s->mutex);
  return sole;
}

void flush_side_close(flush_side *s, const waldio_syscalls *sys){
  if( s->pRegion ) munmap((void*)s->pRegion, s->nMap);
  if( s->fd>=0 ) sys->xClose(s->fd);
  shm_watch_close(&s->watch);
  sqlite3_free(s->zShm);
  sqlite3_free(s->zSide);
  s->zShm = s->zSide = 0;
  s->pRegion = 0;
  s->fd = -1;
}
