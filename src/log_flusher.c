/*
** log_flusher.c — the log's background thread (see log_flusher.h).
**
** Three deadlines: the normal-mode flush deadline, set by the first write
** under a flush bound (LOG_ARM: a NORMAL or ns commit) after the last flush
** and not pushed back by later writes (so the bound holds under a steady
** stream of commits: at most one flush per flush_ms), the group buffer's
** and the knock poll of solo group mode (log_group.c), which it only
** reads. At the normal-mode deadline it flushes
** only if such a write is still unflushed (armedSeq > flushedSeq): another
** sync (a checkpoint's, SQLite's) may have covered it, and a flush then
** would only write back the next transaction's spilled frames early.
** The thread takes no signals (start_without_signals).
*/
#include "log_flusher.h"
#include "log_group.h"
#include "errors.h"
#include "sqlite_api.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

struct log_flusher {
  waldio_log *pLog;
  pthread_t thread;
  pthread_cond_t cond;
  i64 deadlineNs;          /* 0: not armed */
  int stop;
};

static i64 now_ns(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (i64)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static i64 earlier(i64 a, i64 b){
  if( a==0 ) return b;
  if( b==0 ) return a;
  return a<b ? a : b;
}

/* The earliest deadline, 0 if none is set. Mutex held. */
static i64 next_deadline(const log_flusher *f){
  const waldio_log *pLog = f->pLog;
  return earlier(earlier(f->deadlineNs, pLog->group.deadlineNs),
                 pLog->group.knockNs);
}

/* The thread's own log_flusher (f), not pLog->pFlusher, which flusher_stop
** clears before it joins (a restart may set another meanwhile). */
static void *flusher_main(void *pArg){
  log_flusher *f = pArg;
  waldio_log *pLog = f->pLog;
  pthread_mutex_lock(&pLog->mutex);
  while( !f->stop ){
    i64 t = now_ns(), next = next_deadline(f);
    if( next==0 ){
      pthread_cond_wait(&f->cond, &pLog->mutex);
    }else if( t<next ){
      struct timespec ts;
      ts.tv_sec = next / 1000000000;
      ts.tv_nsec = next % 1000000000;
      pthread_cond_timedwait(&f->cond, &pLog->mutex, &ts);
    }else if( pLog->group.deadlineNs && t>=pLog->group.deadlineNs ){
      group_on_deadline(pLog);            /* releases the mutex while writing */
    }else if( pLog->group.knockNs && t>=pLog->group.knockNs ){
      group_on_knock_poll(pLog);          /* the same */
    }else{
      f->deadlineNs = 0;
      pthread_mutex_unlock(&pLog->mutex);
      log_sync_from_flusher(pLog);
      pthread_mutex_lock(&pLog->mutex);
    }
  }
  pthread_mutex_unlock(&pLog->mutex);
  return 0;
}

/* The thread blocks every signal (a new thread inherits its creator's mask):
** an application's signals go to its own threads. Otherwise the kernel may
** pick this one for a process-directed signal such as SIGTERM, and a
** handler that must interrupt the main thread's blocking call (Python's run
** only there) waits for the main thread to wake up by itself. */
static int start_without_signals(log_flusher *f){
  sigset_t all, old;
  int rc;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&f->thread, 0, flusher_main, f);
  pthread_sigmask(SIG_SETMASK, &old, 0);
  return rc;
}

static log_flusher *flusher_start(waldio_log *pLog){
  pthread_condattr_t attr;
  log_flusher *f = calloc(1, sizeof(*f));
  if( !f ) return 0;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&f->cond, &attr);
  pthread_condattr_destroy(&attr);
  f->pLog = pLog;
  pLog->pFlusher = f;
  if( start_without_signals(f) ){
    pthread_cond_destroy(&f->cond);
    free(f);
    pLog->pFlusher = 0;
    waldio_error(SQLITE_NOMEM, "cannot start the flusher thread of %s: the"
                 " normal-mode flush bound and async group writes fall back to"
                 " the next checkpoint or close", pLog->zPath);
    return 0;
  }
  return f;
}

void flusher_arm(waldio_log *pLog){
  log_flusher *f = pLog->pFlusher;
  if( pLog->flushMs<=0 ) return;
  if( !f && (f = flusher_start(pLog))==0 ) return;
  if( f->deadlineNs==0 ){
    f->deadlineNs = now_ns() + (i64)pLog->flushMs * 1000000;
    pthread_cond_signal(&f->cond);
  }
}

void flusher_wake(waldio_log *pLog){
  log_flusher *f = pLog->pFlusher;
  if( !f && (f = flusher_start(pLog))==0 ) return;
  pthread_cond_signal(&f->cond);
}

void flusher_stop(waldio_log *pLog){
  log_flusher *f;
  pthread_mutex_lock(&pLog->mutex);
  f = pLog->pFlusher;
  pLog->pFlusher = 0;                 /* the next arm or wake starts anew */
  if( f ){
    f->stop = 1;
    pthread_cond_signal(&f->cond);
  }
  pthread_mutex_unlock(&pLog->mutex);
  if( !f ) return;
  pthread_join(f->thread, 0);
  pthread_cond_destroy(&f->cond);
  free(f);
}
