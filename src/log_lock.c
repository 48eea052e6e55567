/*
** log_lock.c — open-file-description locks on a waldio log (log_lock.h).
*/
#include "log_lock.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#ifndef F_OFD_GETLK
# define F_OFD_GETLK 36          /* Linux 3.15+ */
# define F_OFD_SETLK 37
#endif

/* Far beyond any log: the lock bytes never overlap data SQLite reads. */
#define LOCK_BASE (1LL << 62)

long long log_lock_offset(int which){ return LOCK_BASE + which; }

static void lock_range(struct flock *fl, int which, int mode){
  memset(fl, 0, sizeof(*fl));
  fl->l_type = mode==LOG_EXCLUSIVE ? F_WRLCK : mode==LOG_SHARED ? F_RDLCK : F_UNLCK;
  fl->l_whence = SEEK_SET;
  fl->l_start = LOCK_BASE + which;
  fl->l_len = 1;
  fl->l_pid = 0;                 /* required for F_OFD_* */
}

int log_lock(const waldio_syscalls *sys, int fd, int which, int mode){
  struct flock fl;
  lock_range(&fl, which, mode);
  if( sys->xLock(fd, F_OFD_SETLK, &fl)==0 ) return 0;
  return errno==EACCES ? EAGAIN : errno;
}

int log_lock_held_elsewhere(const waldio_syscalls *sys, int fd, int which,
                            int mode){
  struct flock fl;
  lock_range(&fl, which, mode);
  return sys->xLock(fd, F_OFD_GETLK, &fl)==0 && fl.l_type!=F_UNLCK;
}

static void sleep_ms(int ms){
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (long)(ms % 1000) * 1000000L;
  while( nanosleep(&ts, &ts) && errno==EINTR ){}
}

int log_lock_wait(const waldio_syscalls *sys, int fd, int which, int mode,
                  int ms){
  int waited = 0, step = 1, err;
  while( (err = log_lock(sys, fd, which, mode))==EAGAIN || err==EINTR ){
    if( waited>=ms ) return EAGAIN;
    sleep_ms(step);
    waited += step;
    if( step<16 ) step *= 2;
  }
  return err;
}
