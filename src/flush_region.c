/*
** flush_region.c — the cross-process flush protocol (flush_region.h, F1-F5),
** the waits for SQLite's WAL write lock that keep group flushes full, and
** the mark of a running checkpoint (restart_assist.c).
**
** Waiting. The holder of ticket t sleeps on the futex word aWake[t % SLOTS]
** and is woken only by the flush that makes t durable, or to lead the next
** flush when t is the first ticket still waiting: a flush wakes the
** waiters it served, not every waiter (each needless wake-up is two context
** switches; on two cores they cost more than the flush saves). A follower
** reads its word, re-checks durable, and sleeps only while the word still
** holds what it read: a leader that finished in between changed it, and
** FUTEX_WAIT then returns at once. The futex is not FUTEX_PRIVATE: the word
** is in a MAP_SHARED file mapping, so the kernel keys it by file and offset
** and wakes a waiter in any process. The sleep is bounded (WAIT_SLICE_MS):
** a leader killed between its flush and its wake-up leaves nobody asleep.
** A flush wakes nobody while no connection waits (`waiters` is 0): the
** flushes of processes outside group commit (a commit's own, F5's
** checkpoint syncs) then cost no FUTEX_WAKE per ticket they cover. A
** waiter counts itself before it reads `durable`, a flusher reads the count
** after it raised `durable` (both sequentially consistent): a waiter the
** flusher does not see reads the new `durable` and does not sleep. A
** waiter killed inside its wait leaves the count raised: flushes then wake
** as if someone waited, until the region is recreated.
**
** Leading, inside one process: a thread leads only while it holds the
** log's leaderMutex (tried, never waited for, so threads of this process
** follow a leader of this process as other processes do). fork() takes
** every leaderMutex first (log_open.c): a flush in progress finishes before
** the child is made, and the child closes the leader's descriptor
** (try_lead).
*/
#include "flush_region.h"
#include "errors.h"
#include "log_lock.h"
#include "sqlite_api.h"
#include "wal_log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#define WAIT_SLICE_MS 2
#define STUCK_MS      200

/* FUTEX_WAIT on w while it holds seen, for at most us microseconds. */
static void futex_wait_us(volatile u32 *w, u32 seen, i64 us){
  struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
  syscall(SYS_futex, (u32*)w, FUTEX_WAIT, seen, &ts, 0, 0);
}

static u64 load64(volatile u64 *p){ return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static u32 load32(volatile u32 *p){ return __atomic_load_n(p, __ATOMIC_SEQ_CST); }

static i64 now_us(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (i64)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int flush_region_attach(volatile flush_region *r, const char *zPath,
                        int trustLog){
  u32 zero = 0;
  /* A ticket for what the log already holds: a process that died may have
  ** left frames in the page cache (a NORMAL commit, a group commit not yet
  ** flushed), and a fresh region would call them durable (F5). The first
  ** wait or checkpoint sync then flushes them; taken before the claim, so
  ** nobody sees a claimed region without it. A region claimed already
  ** counts those frames in its own tickets: there the ticket is durable
  ** as soon as every ticket before it is, and a process that joins does
  ** not make every strict reader wait for a flush. So it is where the
  ** caller trusts the log as stock SQLite does (auto, log_group.h): stock
  ** readers read what SQLite's recovery finds in the page cache without a
  ** flush, and auto promises FULL's visibility, not more. */
  u64 ticket = __atomic_add_fetch(&r->written, 1, __ATOMIC_SEQ_CST);
  if( __atomic_compare_exchange_n(&r->magic, &zero, FLUSH_REGION_MAGIC, 0,
                                  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ){
    if( trustLog ) flush_region_self_durable(r, ticket);
    return SQLITE_OK;
  }
  if( zero==FLUSH_REGION_MAGIC ){
    flush_region_self_durable(r, ticket);
    return SQLITE_OK;
  }
  return waldio_error(SQLITE_PROTOCOL, "%s: the start of its wal-index is not"
      " waldio's flush region (found 0x%08x): a process with an older"
      " libwaldio has the database open; every process must use the same"
      " libwaldio", zPath, (unsigned)zero);
}

u64 flush_region_ticket(volatile flush_region *r){
  return __atomic_add_fetch(&r->written, 1, __ATOMIC_SEQ_CST);
}

u64 flush_region_written(volatile flush_region *r){ return load64(&r->written); }

/* How long a connection that gave up waiting for the WAL write lock may
** sleep in SQLite's busy handler before it tries again: its longest sleep
** is 100 ms (sqliteDefaultBusyCallback), with margin. While one may, a
** commit holding the lock through its own flush (flushing alone) could keep
** it from ever getting the lock: two processes made 32,312 and 1 commits. */
#define LOCK_MISS_MS 250

static u32 now_ms_nonzero(void);

static int lock_missed_lately(volatile flush_region *r){
  u32 at = load32(&r->lockMissMs);
  return at!=0 && now_ms_nonzero() - at < LOCK_MISS_MS;
}

int flush_region_idle(volatile flush_region *r){
  return !load32(&r->waiters) && !load32(&r->lockWaiters)
      && load64(&r->durable)>=load64(&r->written) && !lock_missed_lately(r);
}

/* Raise *p to at least v (never lower it: flushes finish in any order).
** Returns the value it had. */
static u64 raise_max(volatile u64 *p, u64 v){
  u64 cur = load64(p);
  while( cur<v && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST,
                                               __ATOMIC_SEQ_CST) ){}
  return cur;
}

static u64 raise_durable(volatile flush_region *r, u64 upto){
  return raise_max(&r->durable, upto);
}

static volatile u32 *wake_word(volatile flush_region *r, u64 ticket){
  return &r->aWake[ticket % FLUSH_WAKE_SLOTS];
}

static void wake_slot(volatile flush_region *r, u64 ticket){
  volatile u32 *w = wake_word(r, ticket);
  __atomic_add_fetch(w, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, (u32*)w, FUTEX_WAKE, INT_MAX, 0, 0, 0);
}

/* Wake the holders of tickets (from, upto], now durable (a slot is shared
** only by tickets FLUSH_WAKE_SLOTS apart: a waiter woken early sleeps
** again), and the holder of the next ticket, if it was handed out: it
** leads the next flush. */
static void wake_durable(volatile flush_region *r, u64 from, u64 upto){
  u64 t, last = upto - from>FLUSH_WAKE_SLOTS ? from + FLUSH_WAKE_SLOTS : upto;
  if( !load32(&r->waiters) ) return;          /* nobody to wake (see above) */
  for(t=from+1; t<=last; t++) wake_slot(r, t);
  if( load64(&r->written)>upto ) wake_slot(r, upto + 1);
}

static void wake_all(volatile flush_region *r){
  u64 t;
  for(t=0; t<FLUSH_WAKE_SLOTS; t++) wake_slot(r, t);
}

void flush_region_covered(volatile flush_region *r, u64 upto){
  u64 was = raise_durable(r, upto);
  if( was<upto ) wake_durable(r, was, upto);
}

void flush_region_self_durable(volatile flush_region *r, u64 ticket){
  u64 before = ticket - 1;
  if( __atomic_compare_exchange_n(&r->durable, &before, ticket, 0,
                                  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
   && load32(&r->waiters) ){
    wake_slot(r, ticket);
  }
}

static int poisoned(waldio_log *pLog){
  return waldio_error(SQLITE_IOERR_FSYNC, "%s: a flush of the log failed in"
      " one of the processes sharing it; this commit is visible but may not be"
      " durable, and no later commit is acknowledged until every process has"
      " closed the database", pLog->zPath);
}

void flush_region_writing(volatile flush_region *r, int on){
  __atomic_store_n(&r->writing, (u32)on, __ATOMIC_SEQ_CST);
}

/* Before it reads `written`, a leader lets the commits under way join its
** flush: while a connection holds SQLite's WAL write lock or waits for it,
** a ticket is a few microseconds away, and each commit left out waits for
** a whole flush more. At most half a flush (the moving average): without
** it, the flushes alternate between two halves of the committers. */
static void gather(volatile flush_region *r){
  i64 end = now_us() + load32(&r->flushUs) / 2, left;
  for(;;){
    u32 seen = load32(&r->unlocks);
    if( !load32(&r->writing) && !load32(&r->lockWaiters) ) return;
    left = end - now_us();
    if( left<=0 ) return;
    __atomic_add_fetch(&r->gathering, 1, __ATOMIC_SEQ_CST);
    if( load32(&r->unlocks)==seen ) futex_wait_us(&r->unlocks, seen, left);
    __atomic_sub_fetch(&r->gathering, 1, __ATOMIC_SEQ_CST);
  }
}

/* flushUs += (us - flushUs) / 8, racing updates may lose one: advice only. */
static void note_flush_time(volatile flush_region *r, i64 us){
  u32 avg = load32(&r->flushUs);
  if( us>1000000 ) us = 1000000;
  __atomic_store_n(&r->flushUs, (u32)((i64)avg + (us - (i64)avg) / 8),
                   __ATOMIC_RELAXED);
}

void flush_region_frames_durable(volatile flush_region *r, u64 mark){
  u64 cur = load64(&r->framesDurable);
  /* Same generation: raise. Another one: the last flush's word stands (a
  ** stale one only makes a later check fail and flush). */
  while( mark && ((cur>>32)!=(mark>>32) || (u32)cur<(u32)mark)
      && !__atomic_compare_exchange_n(&r->framesDurable, &cur, mark, 0,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ){}
}

int flush_region_frames_cover(volatile flush_region *r, u64 mark){
  u64 cur = load64(&r->framesDurable);
  return mark!=0 && (cur>>32)==(mark>>32) && (u32)cur>=(u32)mark;
}

/* One flush for everyone: F2 (and F6). */
static int flush_for_all(waldio_log *pLog, volatile flush_region *r,
                         const volatile void *shm0){
  u64 upto, mark;
  int rc;
  i64 t0;
  gather(r);
  upto = load64(&r->written);
  mark = wal_index_end_mark(shm0);
  raise_max(&r->flushing, upto);
  t0 = now_us();
  rc = log_flush_now(pLog);
  note_flush_time(r, now_us() - t0);
  if( rc ){
    __atomic_store_n(&r->poison, 1, __ATOMIC_SEQ_CST);       /* F3 */
    wake_all(r);
    return rc;
  }
  __atomic_add_fetch(&r->flushes, 1, __ATOMIC_SEQ_CST);
  log_count_group(pLog, LOG_GROUP_WRITE);
  flush_region_frames_durable(r, mark);
  flush_region_covered(r, upto);
  return SQLITE_OK;
}

/* Lead a flush if no thread or process is leading, or if the flush under
** way does not cover ticket (a second one may then start at once, on the
** second lock byte: a commit that arrives during a flush waits for one
** flush, not the rest of that one and a whole next one): SQLITE_OK once
** led (or found unnecessary), SQLITE_BUSY if others lead, or the flush's
** error.
**
** The leader lock is taken on a descriptor of the log's own (leaderFd),
** opened at the first lead and kept: an OFD lock belongs to the open file
** description, and a child forked earlier would share the log's main one,
** so a lock taken there would outlive a leader killed mid-flush for as
** long as such a child lives. fork() waits for leaderMutex, and the child
** closes its copy of leaderFd (log_open.c), so no child holds it. (A child
** made without the fork handlers, by a raw clone(), would: F4's STUCK_MS
** then replaces the leader. A read-only process cannot take the lock: it
** follows, and flushes for itself only when stuck, F4.) */
static int leader_fd(waldio_log *pLog){
  if( pLog->leaderFd<0 ){
    pLog->leaderFd = pLog->sys->xOpen(pLog->zPath,
                                     O_RDWR|O_CLOEXEC|O_NOFOLLOW, 0);
  }
  return pLog->leaderFd;
}

static int try_lead(waldio_log *pLog, volatile flush_region *r, u64 ticket,
                    const volatile void *shm0){
  const waldio_syscalls *sys = pLog->sys;
  int rc = SQLITE_BUSY, fd;
  if( pthread_mutex_trylock(&pLog->leaderMutex) ) return SQLITE_BUSY;
  fd = leader_fd(pLog);
  if( fd>=0 && log_lock(sys, fd, LOG_LOCK_LEADER, LOG_EXCLUSIVE)==0 ){
    __atomic_store_n(&r->leaderSince, (u64)now_us(), __ATOMIC_SEQ_CST);
    rc = load64(&r->durable)>=ticket ? SQLITE_OK : flush_for_all(pLog, r, shm0);
    __atomic_store_n(&r->leaderSince, 0, __ATOMIC_SEQ_CST);
    log_lock(sys, fd, LOG_LOCK_LEADER, LOG_UNLOCKED);
  }else if( fd>=0 && ticket>load64(&r->flushing)
         && log_lock(sys, fd, LOG_LOCK_LEADER2, LOG_EXCLUSIVE)==0 ){
    rc = load64(&r->durable)>=ticket ? SQLITE_OK : flush_for_all(pLog, r, shm0);
    log_lock(sys, fd, LOG_LOCK_LEADER2, LOG_UNLOCKED);
  }
  pthread_mutex_unlock(&pLog->leaderMutex);
  return rc;
}

int flush_region_lock_write(volatile flush_region *r, int (*xTry)(void*),
                            void *arg, int ms){
  i64 deadline = now_us() + (i64)ms * 1000;
  int rc;
  for(;;){
    u32 seen = load32(&r->unlocks);
    i64 left;
    rc = xTry(arg);
    if( rc!=SQLITE_BUSY ) return rc;
    if( (left = (deadline - now_us()) / 1000)<=0 ){
      __atomic_store_n(&r->lockMissMs, now_ms_nonzero(), __ATOMIC_RELAXED);
      return rc;
    }
    __atomic_add_fetch(&r->lockWaiters, 1, __ATOMIC_SEQ_CST);
    if( load32(&r->unlocks)==seen ){
      futex_wait_us(&r->unlocks, seen, (left<WAIT_SLICE_MS ? left : WAIT_SLICE_MS) * 1000);
    }
    __atomic_sub_fetch(&r->lockWaiters, 1, __ATOMIC_SEQ_CST);
  }
}

void flush_region_await_writer(volatile flush_region *r, int us){
  u32 seen = load32(&r->unlocks);
  if( !load32(&r->writing) ) return;
  __atomic_add_fetch(&r->lockWaiters, 1, __ATOMIC_SEQ_CST);
  if( load32(&r->unlocks)==seen && load32(&r->writing) ){
    futex_wait_us(&r->unlocks, seen, us);
  }
  __atomic_sub_fetch(&r->lockWaiters, 1, __ATOMIC_SEQ_CST);
}

/* Bump `unlocks`, then wake its waiters: all of them if `all` or a leader
** gathers, else one lock waiter. The counts are read after the bump: a
** waiter counts itself before it compares the word (no lost wake-up). */
static void bump_unlocks(volatile flush_region *r, int all){
  __atomic_add_fetch(&r->unlocks, 1, __ATOMIC_SEQ_CST);
  if( all || load32(&r->gathering) ){
    syscall(SYS_futex, (u32*)&r->unlocks, FUTEX_WAKE, INT_MAX, 0, 0, 0);
  }else if( load32(&r->lockWaiters) ){
    syscall(SYS_futex, (u32*)&r->unlocks, FUTEX_WAKE, 1, 0, 0, 0);
  }
}

void flush_region_released(volatile flush_region *r){ bump_unlocks(r, 0); }

static u32 now_ms_nonzero(void){
  u32 ms = (u32)(now_us() / 1000);
  return ms ? ms : 1;
}

void flush_region_checkpointing(volatile flush_region *r, int on){
  __atomic_store_n(&r->ckptMs, on ? now_ms_nonzero() : 0, __ATOMIC_SEQ_CST);
  if( !on ) bump_unlocks(r, 1);
}

int flush_region_checkpoint_running(volatile flush_region *r){
  u32 since = load32(&r->ckptMs);
  return since!=0 && (u32)(now_ms_nonzero() - since)<STUCK_MS;
}

void flush_region_await_checkpoint(volatile flush_region *r, int ms){
  i64 deadline = now_us() + (i64)ms * 1000, left;
  for(;;){
    u32 seen = load32(&r->unlocks);
    if( !flush_region_checkpoint_running(r) ) return;
    left = deadline - now_us();
    if( left<=0 ) return;
    futex_wait_us(&r->unlocks, seen, left<WAIT_SLICE_MS*1000 ? left : WAIT_SLICE_MS*1000);
  }
}

static void sleep_on(volatile u32 *w, u32 seen){
  futex_wait_us(w, seen, WAIT_SLICE_MS * 1000);
}

/* F4: the leader has held its lock for longer than any flush should take
** (a dead leader's lock is gone: the kernel released it), or this waiter
** has waited that long without leading (it has no descriptor to lock). */
static int unled_too_long(volatile flush_region *r, i64 waitingSince){
  u64 since = load64(&r->leaderSince);
  i64 now = now_us();
  return (since && now - (i64)since>=(i64)STUCK_MS * 1000)
      || now - waitingSince>=(i64)STUCK_MS * 1000;
}

static int wait_counted(waldio_log *pLog, volatile flush_region *r, u64 ticket,
                        const volatile void *shm0){
  volatile u32 *w = wake_word(r, ticket);
  u32 seen;
  int rc;
  i64 since = now_us();
  for(;;){
    seen = load32(w);
    if( load64(&r->durable)>=ticket ) return SQLITE_OK;
    if( load32(&r->poison) ) return poisoned(pLog);
    rc = try_lead(pLog, r, ticket, shm0);
    if( rc==SQLITE_BUSY && unled_too_long(r, since) ) rc = flush_for_all(pLog, r, shm0);
    if( rc!=SQLITE_BUSY ){
      if( rc ) return rc;
      continue;
    }
    sleep_on(w, seen);
  }
}

int flush_region_wait(waldio_log *pLog, volatile flush_region *r, u64 ticket,
                      const volatile void *shm0){
  int rc;
  if( load64(&r->durable)>=ticket ) return SQLITE_OK;
  log_count_group(pLog, LOG_GROUP_WAIT);
  __atomic_add_fetch(&r->waiters, 1, __ATOMIC_SEQ_CST);    /* before `durable` */
  rc = wait_counted(pLog, r, ticket, shm0);
  __atomic_sub_fetch(&r->waiters, 1, __ATOMIC_SEQ_CST);
  return rc;
}
