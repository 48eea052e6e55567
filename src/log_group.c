/*
** log_group.c — group commit (see log_group.h for the modes and G1-G5).
**
** Solo: one group write takes the whole buffer: the buffers are swapped
** under the mutex, so committers keep appending to a fresh buffer while the
** taken one is written outside the mutex. Commits appended before the swap
** are covered by that write; later ones by the next.
**
** Shared: the commit path is wal_file.c's and the flush protocol
** flush_region.c's; here only the switch between the two and the async
** deadline.
*/
#include "log_group.h"
#include "errors.h"
#include "log_flusher.h"
#include "sqlite_api.h"
#include "wal_log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The buffer may grow past group_bytes by commits arriving while a write is
** under way; past this many times group_bytes the committer writes itself. */
#define BACKPRESSURE 64

static i64 now_ns(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (i64)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void group_init(log_group *g){
  memset(g, 0, sizeof(*g));
  pthread_cond_init(&g->cond, 0);
}

void group_free(log_group *g){
  dio_free(g->aBuf);
  dio_free(g->aFlight);
  pthread_cond_destroy(&g->cond);
  memset(g, 0, sizeof(*g));
}

/* Room for nSlot slots in aBuf, keeping its contents. Mutex held. */
static int grow(waldio_log *pLog, u32 nSlot){
  log_group *g = &pLog->group;
  u32 slot = pLog->sb.geo.slot;
  u32 want = g->nAlloc ? g->nAlloc : 4;
  u8 *p;
  if( nSlot<=g->nAlloc ) return SQLITE_OK;
  while( want<nSlot ) want *= 2;
  p = dio_alloc(&pLog->file, (size_t)want * slot);
  if( !p ) return SQLITE_NOMEM;
  if( g->n ) memcpy(p, g->aBuf, (size_t)g->n * slot);
  dio_free(g->aBuf);
  g->aBuf = p;
  g->nAlloc = want;
  return SQLITE_OK;
}

/* Write everything buffered as one group write. Mutex held on entry and
** exit; released during the I/O. */
static int write_locked(waldio_log *pLog){
  log_group *g = &pLog->group;
  u8 *pTmp;
  u32 nTmp, slot;
  int flush, dsync, arm, rc;
  u64 upto;

  while( g->busy ) pthread_cond_wait(&g->cond, &pLog->mutex);
  if( g->n==0 ) return SQLITE_OK;
  pTmp = g->aFlight; g->aFlight = g->aBuf; g->aBuf = pTmp;
  nTmp = g->flAlloc; g->flAlloc = g->nAlloc; g->nAlloc = nTmp;
  g->flFirst = g->first;
  g->flN = g->n;
  g->n = 0;
  dsync = (g->needs & GROUP_DSYNC)!=0;
  flush = (g->needs & GROUP_FLUSH) && !dsync;
  arm = (g->needs & GROUP_ARM) && !flush && !dsync;
  g->needs = 0;
  g->deadlineNs = 0;
  upto = g->nAppended;
  g->busy = 1;
  slot = pLog->sb.geo.slot;
  pthread_mutex_unlock(&pLog->mutex);

  rc = log_write_slots(pLog, g->flFirst, g->flN, g->aFlight, 0, g->flN * slot,
                       LOG_WRITE_FRAME, (dsync ? LOG_DSYNC : 0) | (arm ? LOG_ARM : 0));
  if( rc==SQLITE_OK && flush ) rc = log_sync(pLog);

  pthread_mutex_lock(&pLog->mutex);
  g->busy = 0;
  g->flN = 0;
  if( rc==SQLITE_OK ){
    g->nDone = upto;
    pLog->stats.group_writes++;
  }else{
    /* Commits in this write may have been acknowledged (async): nothing
    ** later may be acknowledged as if they were safe. */
    pLog->poisoned = 1;
  }
  pthread_cond_broadcast(&g->cond);
  return rc;
}

int group_append(waldio_log *pLog, u32 first, u32 n, const u8 *img, int needs,
                 u64 *pSeq){
  log_group *g = &pLog->group;
  u32 slot;
  int rc = SQLITE_OK;

  pthread_mutex_lock(&pLog->mutex);
  if( !g->solo ){
    pthread_mutex_unlock(&pLog->mutex);
    return GROUP_NOT_SOLO;
  }
  slot = pLog->sb.geo.slot;
  if( g->n && first!=g->first + g->n ) rc = write_locked(pLog);      /* G1 */
  if( rc==SQLITE_OK
   && (long long)g->n * slot>=BACKPRESSURE * g->capBytes ){
    rc = write_locked(pLog);
  }
  if( rc==SQLITE_OK ) rc = grow(pLog, g->n + n);
  if( rc==SQLITE_OK ){
    if( g->n==0 ) g->first = first;
    memcpy(g->aBuf + (size_t)g->n * slot, img, (size_t)n * slot);
    g->n += n;
    g->needs |= needs;
    *pSeq = ++g->nAppended;
    pLog->stats.group_commits++;
    if( g->mode==WALDIO_GROUP_ASYNC ){
      if( (long long)g->n * slot>=g->capBytes ){
        g->deadlineNs = 1;                       /* full: write it now */
        flusher_wake(pLog);
      }else if( g->deadlineNs==0 ){
        g->deadlineNs = now_ns() + (i64)g->intervalMs * 1000000;
        flusher_wake(pLog);
      }
    }
  }
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

int group_wait(waldio_log *pLog, u64 seq){
  log_group *g = &pLog->group;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&pLog->mutex);
  pLog->stats.group_waits++;
  while( g->nDone<seq && rc==SQLITE_OK ){
    if( pLog->poisoned ){
      rc = SQLITE_IOERR;
    }else if( g->busy ){
      pthread_cond_wait(&g->cond, &pLog->mutex);
    }else if( g->n==0 ){
      break;                  /* nothing left to write: cannot happen (G3) */
    }else{
      rc = write_locked(pLog);
    }
  }
  pthread_mutex_unlock(&pLog->mutex);
  if( rc ){
    return waldio_error(SQLITE_IOERR_FSYNC, "%s: the group write carrying this"
        " commit failed; it may not be durable", pLog->zPath);
  }
  return SQLITE_OK;
}

int group_write_all(waldio_log *pLog){
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  rc = write_locked(pLog);
  pthread_mutex_unlock(&pLog->mutex);
  return rc;
}

void group_on_deadline(waldio_log *pLog){
  log_group *g = &pLog->group;
  int rc;
  g->deadlineNs = 0;
  if( g->n || g->busy ){
    rc = write_locked(pLog);
  }else{
    /* Shared async: the commits are in the file; flush what they owe. */
    pthread_mutex_unlock(&pLog->mutex);
    rc = log_sync_from_flusher(pLog);
    pthread_mutex_lock(&pLog->mutex);
  }
  if( rc!=SQLITE_OK ){
    waldio_error(SQLITE_IOERR_WRITE, "%s: a background group write failed;"
                 " commits of the last %d ms may be lost", pLog->zPath,
                 g->intervalMs);
  }
}

void group_arm_async(waldio_log *pLog){
  log_group *g = &pLog->group;
  pthread_mutex_lock(&pLog->mutex);
  if( g->deadlineNs==0 ){
    g->deadlineNs = now_ns() + (i64)g->intervalMs * 1000000;
    flusher_wake(pLog);
  }
  pthread_mutex_unlock(&pLog->mutex);
}

int group_wait_all(waldio_log *pLog){
  u64 seq, done;
  pthread_mutex_lock(&pLog->mutex);
  seq = pLog->group.nAppended;
  done = pLog->group.nDone;
  pthread_mutex_unlock(&pLog->mutex);
  return seq>done ? group_wait(pLog, seq) : SQLITE_OK;
}

int group_lookup(const waldio_log *pLog, u32 frame, u8 *out){
  const log_group *g = &pLog->group;
  u32 slot = pLog->sb.geo.slot;
  if( g->n && frame>=g->first && frame<g->first + g->n ){
    memcpy(out, g->aBuf + (size_t)(frame - g->first) * slot, slot);
    return 1;
  }
  if( g->busy && frame>=g->flFirst && frame<g->flFirst + g->flN ){
    memcpy(out, g->aFlight + (size_t)(frame - g->flFirst) * slot, slot);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------ solo, shared, and off */

int log_group_mode(waldio_log *pLog){
  int mode;
  pthread_mutex_lock(&pLog->mutex);
  mode = pLog->group.mode;
  pthread_mutex_unlock(&pLog->mutex);
  return mode;
}

int log_group_setting(waldio_log *pLog){
  int mode;
  pthread_mutex_lock(&pLog->mutex);
  mode = pLog->group.autoMode ? WALDIO_GROUP_AUTO : pLog->group.mode;
  pthread_mutex_unlock(&pLog->mutex);
  return mode;
}

int log_group_auto(waldio_log *pLog){
  int on;
  pthread_mutex_lock(&pLog->mutex);
  on = pLog->group.autoMode && pLog->group.mode!=WALDIO_GROUP_OFF;
  pthread_mutex_unlock(&pLog->mutex);
  return on;
}

int log_group_by_default(waldio_log *pLog){
  int on;
  pthread_mutex_lock(&pLog->mutex);
  on = pLog->group.zWhy==0 || pLog->group.byDefault;
  pthread_mutex_unlock(&pLog->mutex);
  return on;
}

int log_group_solo(waldio_log *pLog){
  int solo;
  pthread_mutex_lock(&pLog->mutex);
  solo = pLog->group.solo;
  pthread_mutex_unlock(&pLog->mutex);
  return solo;
}

/* G5, in its order: no new commit joins the buffer, the buffer is in the
** file, then others may open the log. */
int group_leave_solo(waldio_log *pLog){
  int rc;
  pthread_mutex_lock(&pLog->mutex);
  if( !pLog->group.solo ){
    pthread_mutex_unlock(&pLog->mutex);
    return SQLITE_OK;
  }
  pLog->group.solo = 0;
  pLog->group.knockNs = 0;
  rc = write_locked(pLog);
  pthread_mutex_unlock(&pLog->mutex);
  /* Solo commits took no ticket (flush_region.h F5): make them durable
  ** before another process can see them, or its checkpoint could copy a
  ** frame that is not. */
  if( rc==SQLITE_OK ) rc = log_flush_now(pLog);
  if( rc==SQLITE_OK && !pLog->file.readonly ){
    log_lock(pLog->sys, pLog->file.fd, LOG_LOCK_USE, LOG_SHARED);
  }
  return rc;
}

#define KNOCK_POLL_MS 5

/* Auto resolved for this log's layout: the mode it runs as, and why. */
static int auto_mode(waldio_log *pLog, const char **pzWhy){
  if( pLog->pLayout->flags & LAYOUT_NATIVE_SHM ){
    *pzWhy = GROUP_WHY_AUTO;
    return WALDIO_GROUP_STRICT;
  }
  *pzWhy = GROUP_WHY_AUTO_SLOTTED;
  return WALDIO_GROUP_OFF;
}

int log_set_group(waldio_log *pLog, int mode, long long bytes, int ms,
                  const char *zWhy){
  int was = log_group_mode(pLog), solo = 0, rc = SQLITE_OK;
  int byDefault = zWhy==0, isAuto = mode==WALDIO_GROUP_AUTO;
  if( byDefault && !log_group_by_default(pLog) ) return SQLITE_OK;
  if( isAuto ) mode = auto_mode(pLog, &zWhy);
  if( mode==WALDIO_GROUP_OFF && was!=WALDIO_GROUP_OFF ){
    /* What async commits still owe, buffered or written. */
    rc = group_leave_solo(pLog);
    if( rc==SQLITE_OK ) rc = log_sync(pLog);
  }
  if( rc ) return rc;
  if( mode!=WALDIO_GROUP_OFF && was==WALDIO_GROUP_OFF && !pLog->file.readonly
   && !(pLog->pLayout->flags & LAYOUT_NATIVE_SHM) ){
    /* L5: an atomic upgrade of USE; refused, the shared lock stays held and
    ** the process joins the others in shared group commit. (A layout whose
    ** wal-index stock SQLite shares is never solo: a stock process opens it
    ** without knocking, and would read published frames that only this
    ** process's memory holds.) */
    solo = log_lock(pLog->sys, pLog->file.fd, LOG_LOCK_USE, LOG_EXCLUSIVE)==0;
  }
  pthread_mutex_lock(&pLog->mutex);
  if( was==WALDIO_GROUP_OFF ) pLog->group.solo = solo;
  pLog->group.mode = mode;
  pLog->group.zWhy = zWhy;
  pLog->group.autoMode = isAuto;
  pLog->group.byDefault = byDefault;
  pLog->group.capBytes = bytes;
  pLog->group.intervalMs = ms;
  if( pLog->group.solo && pLog->group.knockNs==0 ){
    pLog->group.knockNs = now_ns() + (i64)KNOCK_POLL_MS * 1000000;
    flusher_wake(pLog);                   /* it looks for knocks (G5) */
  }
  pthread_mutex_unlock(&pLog->mutex);
  return SQLITE_OK;
}

const char *log_group_why(waldio_log *pLog){
  const char *z;
  pthread_mutex_lock(&pLog->mutex);
  z = pLog->group.zWhy;
  pthread_mutex_unlock(&pLog->mutex);
  return z ? z : GROUP_WHY_DEFAULT;
}

/* The flusher's part of G5: look for an opener's knock. Mutex held. */
void group_on_knock_poll(waldio_log *pLog){
  log_group *g = &pLog->group;
  int knocked;
  g->knockNs = 0;
  pthread_mutex_unlock(&pLog->mutex);
  knocked = log_lock_held_elsewhere(pLog->sys, pLog->file.fd, LOG_LOCK_KNOCK,
                                    LOG_EXCLUSIVE);
  if( knocked && group_leave_solo(pLog)!=SQLITE_OK ){
    waldio_error(SQLITE_IOERR_WRITE, "%s: writing the group buffer for"
                 " another process failed", pLog->zPath);
  }
  pthread_mutex_lock(&pLog->mutex);
  if( g->solo && g->mode!=WALDIO_GROUP_OFF ){
    g->knockNs = now_ns() + (i64)KNOCK_POLL_MS * 1000000;
  }
}
