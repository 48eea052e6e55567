/*
** shm_watch.c — count who shares "<db>-shm" again only after an open or a
** close of it or of the side file (see shm_watch.h for W1-W3).
*/
#include "shm_watch.h"

#include <errno.h>
#include <sys/inotify.h>
#include <unistd.h>

#define SETTLE_NS (10LL * 1000000)   /* W1 */
#define POLL_NS   (50LL * 1000000)   /* W2, W3 */

void shm_watch_init(shm_watch *w){
  w->fd = -1;
  w->started = 0;
  w->openNs = 0;
  w->closeNs = 0;
  w->countNs = 0;
  w->sole = 0;
}

void shm_watch_close(shm_watch *w){
  if( w->fd>=0 ) close(w->fd);
  w->fd = -1;
}

static void start(shm_watch *w, const char *zShm, const char *zSide){
  w->started = 1;
  w->fd = inotify_init1(IN_NONBLOCK|IN_CLOEXEC);
  if( w->fd>=0 && (inotify_add_watch(w->fd, zShm, IN_OPEN|IN_CLOSE)<0
                || inotify_add_watch(w->fd, zSide, IN_OPEN|IN_CLOSE)<0) ){
    shm_watch_close(w);             /* W2: no instance or watch left */
  }
}

/* Read every queued event. An open (an overflow too, which may hide one)
** owes a count; a close owes one only to a count that found another
** process; a watch's removal (its file deleted) leaves polling (W2). */
static void drain(shm_watch *w, long long nowNs){
  union { struct inotify_event e; char b[4096]; } buf;
  for(;;){
    ssize_t n = read(w->fd, buf.b, sizeof(buf.b)), at = 0;
    if( n<0 && errno==EINTR ) continue;
    if( n<=0 ){
      if( n<0 && errno!=EAGAIN ){ shm_watch_close(w); w->openNs = nowNs; }
      return;
    }
    while( at + (ssize_t)sizeof(struct inotify_event)<=n ){
      const struct inotify_event *e = (const struct inotify_event*)(buf.b + at);
      if( e->mask & IN_IGNORED ){
        shm_watch_close(w);
        w->openNs = nowNs;
        return;
      }
      if( e->mask & (IN_OPEN|IN_Q_OVERFLOW) ) w->openNs = nowNs;
      else w->closeNs = nowNs;
      at += (ssize_t)sizeof(struct inotify_event) + e->len;
    }
  }
}

/* The last event that makes the last count stale (W1). */
static long long stale_after(const shm_watch *w){
  if( w->sole || w->closeNs<w->openNs ) return w->openNs;
  return w->closeNs;
}

static int count_current(const shm_watch *w){
  if( w->countNs==0 ) return 0;
  if( w->fd<0 ) return w->countNs>=w->openNs;               /* W2 */
  return w->countNs - stale_after(w)>=SETTLE_NS;            /* W1 */
}

int shm_watch_sole(const shm_watch *w){
  return w->sole && count_current(w);
}

void shm_watch_counted(shm_watch *w, int sole){
  w->sole = sole;
}

int shm_watch_count_due(shm_watch *w, const char *zShm, const char *zSide,
                        long long nowNs){
  int due;
  if( !w->started ){
    start(w, zShm, zSide);
    w->openNs = nowNs;              /* who opened before the watch: count */
  }
  if( w->fd>=0 ) drain(w, nowNs);
  if( w->fd<0 ){
    due = nowNs - w->countNs>=POLL_NS;
  }else{
    due = !count_current(w)
       && nowNs - stale_after(w)>=SETTLE_NS && nowNs - w->countNs>=POLL_NS;
  }
  if( due ) w->countNs = nowNs;
  return due;
}
