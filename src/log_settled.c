/*
** log_settled.c — is everything a log holds already in the database?
**
** A log whose header (standard: bytes 0..31) or block 0 (slotted layouts:
** the superblock) fails its checks while data follows is damage: it may
** hide committed transactions, and waldio refuses it, naming `waldio
** recover` (docs/format.md §8, §9). With one exception, the trace of a
** power loss while SQLite began a new generation: SQLite writes a new
** header only over a log that a checkpoint copied whole into the database
** (wal.c walRestartHdr, after nBackfill==mxFrame) and syncs it before any
** frame of the new generation, so a torn header then has behind it only
** frames the database holds already. Stock SQLite reads such a log as
** empty and loses nothing; so does waldio, once this proves it.
**
** The proof, in any layout (wal_geometry): the frames from frame 1 on that
** share frame 1's salts, up to the last commit frame among them; for each
** page, its newest copy there equals the database's page, byte for byte
** (where the layout stores fewer bytes than a page, embed's reserved tail,
** the database's bytes there are zero as SQLite wrote them). Anything that
** cannot be read or compared, or no commit frame at all, answers no.
*/
#include "wal_log.h"

#include <string.h>

/* The database's page size (its header, bytes 16..17), or 0. */
static u32 db_page_size(sqlite3_file *pDb){
  u8 h[100];
  u32 page;
  if( !pDb || pDb->pMethods->xRead(pDb, h, sizeof(h), 0)!=SQLITE_OK ) return 0;
  page = ((u32)h[16]<<8) | h[17];
  if( page==1 ) page = 65536;
  return page>=512 && page<=65536 && (page & (page-1))==0 ? page : 0;
}

/* Frames of frame 1's generation up to its last commit frame: how many. */
static u32 last_commit(dio_file *f, const wal_geometry *g, i64 size){
  u8 h[WAL_FRAME_HDR_BYTES], salt[8];
  u32 n = 0, nCommit = 0;
  for(;;){
    i64 slot = g->area + (i64)n*g->slot;
    size_t got = 0;
    if( slot + g->slot > size
     || dio_read(f, h, sizeof(h), slot + g->hdr_in_slot, &got)
     || got<sizeof(h) ) break;
    if( n==0 ) memcpy(salt, h+8, 8);
    if( memcmp(salt, h+8, 8)!=0 || wf_get32(h)==0 ) break;
    n++;
    if( wf_get32(h+4)!=0 ) nCommit = n;
  }
  return nCommit;
}

/* Frame i (from 1)'s page equals the database's page pgno. */
static int frame_matches(dio_file *f, const wal_geometry *g, sqlite3_file *pDb,
                         u32 i, u8 *aFrame, u8 *aDb, u32 *pPgno){
  i64 slot = g->area + (i64)(i-1)*g->slot;
  size_t got = 0;
  u32 j;
  *pPgno = 0;
  if( dio_read(f, aFrame, g->slot, slot, &got) || got<g->slot ) return 0;
  *pPgno = wf_get32(aFrame + g->hdr_in_slot);
  if( pDb->pMethods->xRead(pDb, aDb, (int)g->page, (i64)(*pPgno-1)*g->page) ){
    return 0;
  }
  if( memcmp(aDb, aFrame + g->page_in_slot, g->page_stored)!=0 ) return 0;
  for(j=g->page_stored; j<g->page; j++) if( aDb[j] ) return 0;
  return 1;
}

int log_settled(waldio_log *pLog, int layout, sqlite3_file *pDb, i64 size){
  wal_geometry g;
  sqlite3_int64 dbSize = 0;
  u32 page = db_page_size(pDb), nCommit, i, pgno = 0;
  i64 nDbPage;
  u8 *aFrame = 0, *aDb, *aSeen = 0;
  int ok = 0;
  if( !page || wf_geometry(&g, (u32)layout, pLog->file.block, page)
   || pDb->pMethods->xFileSize(pDb, &dbSize)!=SQLITE_OK ) return 0;
  nDbPage = dbSize / page;
  nCommit = last_commit(&pLog->file, &g, size);
  if( nCommit==0 ) return 0;
  aFrame = sqlite3_malloc64((u64)g.slot + page);
  aSeen = sqlite3_malloc64((u64)nDbPage/8 + 1);
  if( !aFrame || !aSeen ) goto done;
  aDb = aFrame + g.slot;
  memset(aSeen, 0, (size_t)(nDbPage/8 + 1));
  for(i=nCommit; i>0; i--){               /* newest copy of each page first */
    int same = frame_matches(&pLog->file, &g, pDb, i, aFrame, aDb, &pgno);
    u8 bit;
    if( pgno==0 || pgno>nDbPage ) goto done;
    bit = (u8)(1<<((pgno-1)%8));
    if( aSeen[(pgno-1)/8] & bit ) continue;   /* older: the newest decided */
    if( !same ) goto done;
    aSeen[(pgno-1)/8] |= bit;
  }
  ok = 1;
done:
  sqlite3_free(aFrame);
  sqlite3_free(aSeen);
  return ok;
}
