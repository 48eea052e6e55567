/*
** test_wal_index.c — wal_index_newest_frames() against SQLite's own
** wal-index: after ~5,000 commits (frames in regions 0 and 1), the frames it
** names must be exactly the newest frame of every page, as the log's own
** frame headers tell (read from the file, independently of the wal-index),
** and with a limit, the newest of those.
*/
#include "check.h"
#include "test_util.h"
#include "test_layout.h"
#include "vfs_internal.h"
#include "wal_index.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_FRAMES 20000

/* Page number of every frame 1..mx, from the frame headers in the log. */
static void pages_from_log(const char *zWal, const wal_geometry *g, u32 mx,
                           u32 *aPage){
  u8 *slot = malloc(g->slot), hdr[24];
  int fd = open(zWal, O_RDONLY);
  u32 f;
  CHECK(fd>=0 && slot);
  for(f=1; f<=mx && fd>=0; f++){
    CHECK_EQ(pread(fd, slot, g->slot, wf_slot_offset(g, f)), g->slot);
    wf_slot_to_logical(g, slot, 0, 24, hdr);
    aPage[f] = wf_get32(hdr);
  }
  if( fd>=0 ) close(fd);
  free(slot);
}

/* The newest frame of every page, ascending: the truth. */
static int newest_from_pages(const u32 *aPage, u32 mx, u32 *aOut){
  static u32 aLast[MAX_FRAMES];
  u32 f;
  int n = 0;
  memset(aLast, 0, sizeof(aLast));
  for(f=1; f<=mx; f++) aLast[aPage[f]] = f;
  for(f=1; f<=mx; f++) if( aLast[aPage[f]]==f ) aOut[n++] = f;
  return n;
}

int main(void){
  static u32 aPage[MAX_FRAMES + 1], aWant[MAX_FRAMES], aGot[MAX_FRAMES];
  char zDir[300], zDb[400], zWal[410];
  sqlite3 *db = 0;
  sqlite3_file *pFile = 0;
  waldio_db_file *p;
  wal_geometry g;
  u32 mx;
  int i, nWant, nGot;

  test_dir(zDir, sizeof(zDir), "walindex");
  snprintf(zDb, sizeof(zDb), "%s/w.db", zDir);
  snprintf(zWal, sizeof(zWal), "%s-wal", zDb);
  if( test_register("waldio", 1, WALDIO_LAYOUT_EMBED)!=SQLITE_OK ) return 2;
  CHECK_EQ(sqlite3_open(zDb, &db), SQLITE_OK);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;"
      "PRAGMA wal_autocheckpoint=0; CREATE TABLE t(k INTEGER PRIMARY KEY, v);"
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2000)"
      " INSERT INTO t SELECT i, randomblob(200) FROM c;", 0, 0, 0), SQLITE_OK);
  for(i=0; i<5000; i++){
    char zSql[100];
    snprintf(zSql, sizeof(zSql), "UPDATE t SET v=randomblob(200) WHERE k=%d",
             1 + (i * 7919) % 2000);
    CHECK_EQ(sqlite3_exec(db, zSql, 0, 0, 0), SQLITE_OK);
  }
  CHECK_EQ(sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &pFile),
           SQLITE_OK);
  p = (waldio_db_file*)pFile;
  CHECK(p && p->shm0 && p->pWal);
  if( !p || !p->shm0 || !p->pWal ) return CHECK_DONE();
  memcpy(&mx, (const u8*)p->shm0 + 16, 4);
  CHECK(mx>4100 && mx<MAX_FRAMES);             /* frames in regions 0 and 1 */
  g = log_geometry(p->pWal->pLog);
  pages_from_log(zWal, &g, mx, aPage);
  nWant = newest_from_pages(aPage, mx, aWant);

  nGot = wal_index_newest_frames(&p->view, mx, aGot, MAX_FRAMES);
  CHECK_EQ(nGot, nWant);
  CHECK(nGot==nWant && memcmp(aGot, aWant, sizeof(u32) * (size_t)nWant)==0);

  nGot = wal_index_newest_frames(&p->view, mx, aGot, 10);   /* a limit */
  CHECK_EQ(nGot, 10);
  CHECK(memcmp(aGot, aWant + nWant - 10, sizeof(u32) * 10)==0);

  {                                  /* a region never mapped: no answer */
    wal_index_view v = p->view;
    v.apRegion[1] = 0;
    CHECK_EQ(wal_index_newest_frames(&v, mx, aGot, MAX_FRAMES), 0);
  }
  sqlite3_close(db);
  remove_db(zDb);
  rmdir(zDir);
  return CHECK_DONE();
}
