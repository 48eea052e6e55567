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
  w->eventNs = 0;
  w->countNs = 0;
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

/* Read every queued event. Any event (an overflow too) owes a count; a
** watch's removal (its file deleted) leaves polling (W2). */
static void drain(shm_watch *w, long long nowNs){
  union { struct inotify_event e; char b[4096]; } buf;
  for(;;){
    ssize_t n = read(w->fd, buf.b, sizeof(buf.b)), at = 0;
    if( n<0 && errno==EINTR ) continue;
    if( n<=0 ){
      if( n<0 && errno!=EAGAIN ){ shm_watch_close(w); w->eventNs = nowNs; }
      return;
    }
    w->eventNs = nowNs;
    while( at + (ssize_t)sizeof(struct inotify_event)<=n ){
      const struct inotify_event *e = (const struct inotify_event*)(buf.b + at);
      if( e->mask & IN_IGNORED ){
        shm_watch_close(w);
        return;
      }
      at += (ssize_t)sizeof(struct inotify_event) + e->len;
    }
  }
}

int shm_watch_count_current(const shm_watch *w){
  if( w->countNs==0 ) return 0;
  if( w->fd<0 ) return w->countNs>=w->eventNs;              /* W2 */
  return w->countNs - w->eventNs>=SETTLE_NS;                /* W1 */
}

int shm_watch_count_due(shm_watch *w, const char *zShm, const char *zSide,
                        long long nowNs){
  int due;
  if( !w->started ){
    start(w, zShm, zSide);
    w->eventNs = nowNs;             /* who opened before the watch: count */
  }
  if( w->fd>=0 ) drain(w, nowNs);
  if( w->fd<0 ){
    due = nowNs - w->countNs>=POLL_NS;
  }else{
    due = !shm_watch_count_current(w)
       && nowNs - w->eventNs>=SETTLE_NS && nowNs - w->countNs>=POLL_NS;
  }
  if( due ) w->countNs = nowNs;
  return due;
}
