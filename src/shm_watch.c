/*
** shm_watch.c — count who shares "<db>-shm" again only after an open or a
** close of it or of the side file (see shm_watch.h for W1-W3).
**
** Parked instances. The last close of an inotify instance waits for the
** kernel to free its watches, an SRCU grace period (fsnotify_destroy_group
** -> fsnotify_wait_marks_destroyed): 1 to 33 ms measured here, under load.
** A log's last close in a process runs while SQLite still holds its shared
** lock on the database (sqlite3WalClose closes the WAL, then the pager the
** database), and workers stopped together refuse each other's last-close
** checkpoint inside that window: with the close there, group commit in the
** standard layout left the log unreset in most graceful stops of six
** workers (docs/durability.md). So a watch that ends removes its watches
** (no grace period waited for: the kernel frees them later), reads the
** queue empty, and parks the instance for the next watch of this process.
** At most POOL_MAX wait; past that, an instance is closed where it ends.
** Parked instances close with the process.
**
** The pool is a few atomic words, not a mutex, so that fork() never copies
** it locked. Each word is (pid << 32 | fd + 1): an instance parked before a
** fork is the parent's (the child shares its queue and watches), so a child
** that finds one closes its copy (the parent's reference keeps that cheap)
** and takes another. The same holds for a watch a child inherited with a
** log (wal_log.h L6): it is closed, never parked.
*/
#include "shm_watch.h"

#include <errno.h>
#include <stdint.h>
#include <sys/inotify.h>
#include <unistd.h>

#define SETTLE_NS (10LL * 1000000)   /* W1 */
#define POLL_NS   (50LL * 1000000)   /* W2, W3 */
#define POOL_MAX  4

static uint64_t g_aParked[POOL_MAX];

static uint64_t parked_word(int fd){
  return ((uint64_t)(uint32_t)getpid() << 32) | (uint32_t)(fd + 1);
}

/* Read the instance's queue empty (non-blocking). */
static void discard_events(int fd){
  char b[4096];
  while( read(fd, b, sizeof(b))>0 || errno==EINTR ){}
}

/* A parked instance of this process, or -1. */
static int unpark(void){
  int i;
  for(i=0; i<POOL_MAX; i++){
    uint64_t v = __atomic_exchange_n(&g_aParked[i], 0, __ATOMIC_SEQ_CST);
    int fd = (int)(uint32_t)v - 1;
    if( v==0 ) continue;
    if( (uint32_t)(v>>32)==(uint32_t)getpid() ) return fd;
    close(fd);                      /* the parent's, copied by fork() */
  }
  return -1;
}

/* Park fd (watchless, queue read); 0 if the pool is full. */
static int park(int fd){
  int i;
  for(i=0; i<POOL_MAX; i++){
    uint64_t empty = 0;
    if( __atomic_compare_exchange_n(&g_aParked[i], &empty, parked_word(fd), 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ){
      return 1;
    }
  }
  return 0;
}

void shm_watch_init(shm_watch *w){
  w->fd = -1;
  w->wd[0] = w->wd[1] = -1;
  w->pid = 0;
  w->started = 0;
  w->openNs = 0;
  w->closeNs = 0;
  w->countNs = 0;
  w->sole = 0;
}

void shm_watch_close(shm_watch *w){
  int i;
  if( w->fd<0 ) return;
  if( w->pid==getpid() ){
    for(i=0; i<2; i++){
      if( w->wd[i]>=0 ) inotify_rm_watch(w->fd, w->wd[i]);
    }
    discard_events(w->fd);
    if( !park(w->fd) ) close(w->fd);
  }else{
    close(w->fd);                   /* inherited: the parent's instance */
  }
  w->fd = -1;
  w->wd[0] = w->wd[1] = -1;
}

static void start(shm_watch *w, const char *zShm, const char *zSide){
  w->started = 1;
  w->pid = getpid();
  w->fd = unpark();
  if( w->fd>=0 ) discard_events(w->fd);
  else w->fd = inotify_init1(IN_NONBLOCK|IN_CLOEXEC);
  if( w->fd<0 ) return;             /* W2: no instance */
  w->wd[0] = inotify_add_watch(w->fd, zShm, IN_OPEN|IN_CLOSE);
  w->wd[1] = w->wd[0]<0 ? -1 : inotify_add_watch(w->fd, zSide, IN_OPEN|IN_CLOSE);
  if( w->wd[1]<0 ) shm_watch_close(w);   /* W2: no watch left */
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
      if( n<0 && errno!=EAGAIN ){          /* a broken instance: not parked */
        close(w->fd);
        w->fd = -1;
        w->openNs = nowNs;
      }
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
