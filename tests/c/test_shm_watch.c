/*
** test_shm_watch.c — when shm_watch.c says the processes sharing "-shm"
** must be counted again (shm_watch.h W1-W3), driven with explicit clock
** values so that no step depends on how fast the machine is:
**   - a count only SETTLE after the watch starts, then none while nothing
**     opens or closes the file;
**   - an open and close of either file (-shm, the side file) make the last
**     count stale at once, and owe a new one SETTLE later, no sooner than
**     POLL after the last;
**   - the file deleted (its watch removed): counts every POLL;
**   - -shm missing: counts every POLL from the start.
*/
#include "check.h"
#include "shm_watch.h"
#include "test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define MS 1000000LL

static void touch_open_close(const char *zPath){
  int fd = open(zPath, O_RDONLY);
  CHECK(fd>=0);
  if( fd>=0 ) close(fd);
}

static void watched_files(const char *zShm, const char *zSide){
  shm_watch w;
  long long t = 1000 * MS;
  int i;
  for(i=0; i<2; i++){
    int fd = open(i ? zSide : zShm, O_RDWR|O_CREAT, 0644);
    CHECK(fd>=0);
    if( fd>=0 ) close(fd);
  }
  shm_watch_init(&w);

  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t), 0);         /* W1: settle first */
  CHECK_EQ(shm_watch_count_current(&w), 0);
  CHECK(w.fd>=0);                                         /* inotify works */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 10*MS), 1);
  CHECK_EQ(shm_watch_count_current(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 500*MS), 0); /* nothing happened */
  CHECK_EQ(shm_watch_count_current(&w), 1);

  touch_open_close(zShm);                                 /* a process came and went */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 520*MS), 0); /* noticed: settle */
  CHECK_EQ(shm_watch_count_current(&w), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 531*MS), 1);
  CHECK_EQ(shm_watch_count_current(&w), 1);

  touch_open_close(zSide);                                /* W3: 50 ms apart */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 560*MS), 0);
  CHECK_EQ(shm_watch_count_current(&w), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 575*MS), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 581*MS), 1);
  CHECK_EQ(shm_watch_count_current(&w), 1);

  CHECK_EQ(unlink(zShm), 0);                              /* W2 from here */
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 600*MS), 0);
  CHECK(w.fd<0);
  CHECK_EQ(shm_watch_count_current(&w), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 631*MS), 1);
  CHECK_EQ(shm_watch_count_current(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 650*MS), 0);
  CHECK_EQ(shm_watch_count_current(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 681*MS), 1);
  shm_watch_close(&w);
}

static void missing_file(const char *zShm, const char *zSide){
  shm_watch w;
  long long t = 2000 * MS;
  shm_watch_init(&w);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t), 1);          /* W2 at once */
  CHECK(w.fd<0);
  CHECK_EQ(shm_watch_count_current(&w), 1);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 49*MS), 0);
  CHECK_EQ(shm_watch_count_due(&w, zShm, zSide, t + 50*MS), 1);
  shm_watch_close(&w);
}

int main(void){
  char zDir[300], zShm[400], zSide[400], zMissing[400];
  test_dir(zDir, sizeof(zDir), "shmwatch");
  snprintf(zShm, sizeof(zShm), "%s/w.db-shm", zDir);
  snprintf(zSide, sizeof(zSide), "%s/w.db-waldio", zDir);
  snprintf(zMissing, sizeof(zMissing), "%s/none.db-shm", zDir);
  watched_files(zShm, zSide);
  missing_file(zMissing, zSide);
  unlink(zSide);
  rmdir(zDir);
  return CHECK_DONE();
}
