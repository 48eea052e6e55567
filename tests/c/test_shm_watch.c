/*
** test_shm_watch.c — when shm_watch.c says the processes sharing "-shm"
** must be counted again (shm_watch.h W1-W3), driven with explicit clock
** values so that no step depends on how fast the machine is:
**   - a count only SETTLE after the watch starts, then none while nothing
**     opens or closes the file;
**   - an open of either file (-shm, the side file) makes the last count
**     stale at once, and owes a new one SETTLE later, no sooner than POLL
**     after the last; a close does so only to a count that found a process
**     without waldio (a close cannot add one);
**   - the file deleted (its watch removed): counts every POLL;
**   - -shm missing: counts every POLL from the start;
**   - an ended watch's inotify instance is parked and taken by the next
**     watch of the process, with nothing left in its queue; a forked child
**     never takes its parent's (the two would read one queue: here the
**     child would read the event the parent's watch is owed).
*/
#include "check.h"
#include "shm_watch.h"
#include "test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL

static void touch_open_close(const char *zPath){
  int fd = open(zPath, O_RDONLY);
  CHECK(fd>=0);
  if( fd>=0 ) close(fd);
}

/* A count due at nowNs, and what it finds. */
static void count(shm_watch *w, const char *zShm, const char *zSide,
                  long long nowNs, int sole){
  CHECK_EQ(shm_watch_count_due(w, zShm, zSide, nowNs), 1);
  shm_watch_counted(w, sole);
}

static void watched_files(const char *zShm, const char *zSide){
  shm_watch w;
  long long t = 1000 * MS;
  int i, fd;
  for(i=0; i<2; i++){
    fd = open(i ? zSide : zShm, O_RDWR|O_CREAT, 0644);
    CHECK(fd>=0);
    if( fd>=0 ) close(fd);
  }
  shm_watch_init(&w);

  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t), 0);        /* W1: settle first */
  CHECK(w.fd>=0);                                               /* inotify works */
  CHECK_EQ(shm_watch_sole(&w), 0);
  count(&w, zShm, zSide, t + 10*MS, 1);
  CHECK_EQ(shm_watch_sole(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 500*MS), 0);  /* nothing happened */
  CHECK_EQ(shm_watch_sole(&w), 1);

  fd = open(zShm, O_RDONLY);                                    /* a process comes */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 520*MS), 0);  /* noticed: settle */
  CHECK_EQ(shm_watch_sole(&w), 0);
  count(&w, zShm, zSide, t + 531*MS, 1);
  CHECK_EQ(shm_watch_sole(&w), 1);
  if( fd>=0 ) close(fd);                                        /* and goes */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 600*MS), 0);  /* a close adds */
  CHECK_EQ(shm_watch_sole(&w), 1);                                /* no stock process */

  fd = open(zSide, O_RDONLY);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 620*MS), 0);
  count(&w, zShm, zSide, t + 631*MS, 0);                        /* found one */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 700*MS), 0);  /* it stands */
  CHECK_EQ(shm_watch_sole(&w), 0);
  if( fd>=0 ) close(fd);                                        /* it may have left: */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 710*MS), 0);  /* settle */
  count(&w, zShm, zSide, t + 721*MS, 1);
  CHECK_EQ(shm_watch_sole(&w), 1);

  touch_open_close(zSide);                                      /* W3: 50 ms apart */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 740*MS), 0);
  CHECK_EQ(shm_watch_sole(&w), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 755*MS), 0);
  count(&w, zShm, zSide, t + 771*MS, 1);

  CHECK_EQ(unlink(zShm), 0);                                    /* W2 from here */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 800*MS), 0);
  CHECK(w.fd<0);
  CHECK_EQ(shm_watch_sole(&w), 0);
  count(&w, zShm, zSide, t + 821*MS, 1);
  CHECK_EQ(shm_watch_sole(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 850*MS), 0);
  CHECK_EQ(shm_watch_sole(&w), 1);
  count(&w, zShm, zSide, t + 871*MS, 1);
  shm_watch_close(&w);
}

static void missing_file(const char *zShm, const char *zSide){
  shm_watch w;
  long long t = 2000 * MS;
  shm_watch_init(&w);
  count(&w, zShm, zSide, t, 1);                                 /* W2 at once */
  CHECK(w.fd<0);
  CHECK_EQ(shm_watch_sole(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 49*MS), 0);
  count(&w, zShm, zSide, t + 50*MS, 1);
  shm_watch_close(&w);
}

/* A watch past its settle, with a count that found only waldio. */
static void settled(shm_watch *w, const char *zShm, const char *zSide,
                    long long t){
  shm_watch_init(w);
  CHECK_EQ(shm_watch_count_due(w, zShm, zSide, t), 0);
  CHECK(w->fd>=0);
  count(w, zShm, zSide, t + 10*MS, 1);
}

static void parked_instances(const char *zShm, const char *zSide){
  shm_watch a, b, c;
  long long t = 3000 * MS;
  int fdA, dummy, toChild[2], toParent[2], st = 0;
  char x;
  pid_t pid;
  close(open(zShm, O_RDWR|O_CREAT, 0644));       /* watched_files deleted it */
  settled(&a, zShm, zSide, t);
  fdA = a.fd;
  touch_open_close(zShm);           /* queued, never read by a */
  shm_watch_close(&a);
  CHECK_EQ(a.fd, -1);
  dummy = open(zSide, O_RDONLY);    /* takes fdA's number had a closed it */
  CHECK(dummy>=0 && dummy!=fdA);
  settled(&b, zShm, zSide, t);
  CHECK_EQ(b.fd, fdA);              /* parked, taken again */
  close(dummy);
  CHECK_EQ(shm_watch_count_due(&b, zShm, zSide, t + 500*MS), 0);
  CHECK_EQ(shm_watch_sole(&b), 1);  /* a's event is gone */
  touch_open_close(zShm);
  CHECK_EQ(shm_watch_count_due(&b, zShm, zSide, t + 520*MS), 0);
  CHECK_EQ(shm_watch_sole(&b), 0);  /* b's own is seen */
  shm_watch_close(&b);              /* parked: the parent's */

  CHECK_EQ(pipe(toChild), 0);
  CHECK_EQ(pipe(toParent), 0);
  pid = fork();
  if( pid==0 ){
    settled(&c, zShm, zSide, t);
    if( write(toParent[1], "s", 1)!=1 ) _exit(2);
    if( read(toChild[0], &x, 1)!=1 ) _exit(2);
    shm_watch_count_due(&c, zShm, zSide, t + 500*MS);   /* reads its queue */
    if( write(toParent[1], "r", 1)!=1 ) _exit(2);
    _exit(0);
  }
  CHECK(pid>0);
  CHECK_EQ(read(toParent[0], &x, 1), 1);                /* the child watches */
  settled(&c, zShm, zSide, t);                          /* takes the parked one */
  touch_open_close(zShm);
  CHECK_EQ(write(toChild[1], "g", 1), 1);
  CHECK_EQ(read(toParent[0], &x, 1), 1);                /* the child has read */
  CHECK_EQ(shm_watch_count_due(&c, zShm, zSide, t + 500*MS), 0);
  CHECK_EQ(shm_watch_sole(&c), 0);                      /* the open is ours */
  CHECK_EQ(waitpid(pid, &st, 0), pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st)==0);
  shm_watch_close(&c);
  close(toChild[0]); close(toChild[1]); close(toParent[0]); close(toParent[1]);
}

int main(void){
  char zDir[300], zShm[400], zSide[400], zMissing[400];
  test_dir(zDir, sizeof(zDir), "shmwatch");
  snprintf(zShm, sizeof(zShm), "%s/w.db-shm", zDir);
  snprintf(zSide, sizeof(zSide), "%s/w.db-waldio", zDir);
  snprintf(zMissing, sizeof(zMissing), "%s/none.db-shm", zDir);
  watched_files(zShm, zSide);
  missing_file(zMissing, zSide);
  parked_instances(zShm, zSide);
  unlink(zShm);
  unlink(zSide);
  rmdir(zDir);
  return CHECK_DONE();
}
