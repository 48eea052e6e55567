/*
** recovery.c — creating a file, and opening one: find the last committed
** version, wipe what an interrupted commit left, rebuild the free list.
** The argument that this yields exactly the last committed version is in
** DESIGN.md §5; the rules it rests on:
**
**   R1  Versions are consecutive: the commit after version V is V+1, and it
**       starts writing only after V is durable (sync=full: V's fdatasync
**       returned). So at most one version, the newest, can be incomplete.
**   R2  Every slot written by commit V carries V and npages(V), the number
**       of slots V wrote, plus root(V) and root(V-1). V is complete iff
**       exactly npages(V) valid slots (magic, checksum, pgno, slot) carry V.
**   R3  A commit writes a page's non-current slot (pager.h P1), so no slot
**       of the last complete version is overwritten before the next version
**       is complete. A torn or missing slot of an incomplete version leaves
**       the page's other slot, with its committed content, intact.
**   R4  Recovery zeroes every slot newer than the chosen version and every
**       invalid slot before the file is written again (and a failed commit
**       does the same, pager.h P4). So the slot of a page with the highest
**       version <= C is that page's content at C, and a later commit that
**       reuses version C+1 never meets stale slots carrying C+1.
**
** Let M be the highest version on any valid slot. If M is complete, C = M
** and the root is root(M); otherwise C = M-1 (committed by R1) and the root
** is root(M-1), read from any valid slot of M, and C must itself be
** complete (R3) — if not, the file was not written with sync=full (or was
** damaged) and recovery reports LSMVBT_CORRUPT rather than guessing.
*/
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define ST_EMPTY   0
#define ST_VALID   1
#define ST_INVALID 2

/* A new file: superblock and an empty root leaf as version 0, written under
** a temporary name, synced, renamed into place, directory synced. A crash
** leaves either no file or a complete one. */
int lsm_create_file(lsmvbt_db *db, const char *zPath){
  lsmvbt_io *io = db->io;
  uint32_t ps = db->opt.page_size;
  size_t nTmp = strlen(zPath) + 16;
  char *zTmp = malloc(nTmp);
  uint8_t *buf = malloc(ps);
  lsm_page_hdr h;
  lsm_node *root = lsm_node_new(1, 0);
  uint64_t size = 4ull*ps;
  int fd = -1, rc = LSMVBT_OK;

  if( zTmp==0 || buf==0 || root==0 ){ rc = LSMVBT_NOMEM; goto done; }
  snprintf(zTmp, nTmp, "%s-creating", zPath);
  fd = io->xOpen(zTmp, O_RDWR|O_CREAT|O_TRUNC, 0644);
  if( fd<0 ){
    rc = lsm_err(db, LSMVBT_CANTOPEN, "cannot create %s: %s", zTmp, strerror(errno));
    goto done;
  }
  memset(&h, 0, sizeof(h));
  h.npages = 2;
  h.version = 0;
  h.root = 1;
  h.prev_root = 1;
  h.page_size = ps;
  h.slot = 0;
  lsm_super_encode(buf, ps, &h);
  rc = lsm_write_full(io, fd, buf, ps, 0);
  if( rc==LSMVBT_OK ){
    lsm_node_encode(root, buf, ps, &h);
    rc = lsm_write_full(io, fd, buf, ps, 2*(off_t)ps);
  }
  if( db->opt.prealloc_bytes>size ){
    size = (db->opt.prealloc_bytes + 2ull*ps - 1) / (2ull*ps) * (2ull*ps);
  }
  if( rc==LSMVBT_OK ) rc = lsm_zero_fill(io, fd, 3*(off_t)ps, size - 3ull*ps);
  if( rc==LSMVBT_OK ) rc = lsm_sync_data(io, fd);
  if( rc==LSMVBT_OK && io->xRename(zTmp, zPath)!=0 ) rc = LSMVBT_IOERR;
  if( rc==LSMVBT_OK ) rc = lsm_sync_dir(io, zPath);
  if( rc ) rc = lsm_err(db, rc, "creating %s failed: %s", zPath, strerror(errno));
done:
  if( fd>=0 ) io->xClose(fd);
  if( rc && zTmp ) io->xUnlink(zTmp);
  lsm_node_free(root);
  free(buf);
  free(zTmp);
  return rc;
}

/* The page size, from the superblock: slot 0 of page 0, or slot 1 if slot 0
** is unreadable (the static header fields are the same in every copy, so a
** torn superblock write still shows them). */
static int find_page_size(lsmvbt_db *db, uint64_t size, uint32_t *pPs){
  uint8_t b[LSM_HDR_SIZE];
  lsm_page_hdr h;
  uint32_t ps;
  if( lsm_read_full(db->io, db->fd, b, sizeof(b), 0) ) return LSMVBT_IOERR;
  lsm_hdr_decode(b, &h);
  if( lsm_get32(b)==LSM_MAGIC && h.type==LSM_PAGE_SUPER && h.pgno==0
   && h.page_size>=512 && h.page_size<=65536 && (h.page_size & (h.page_size-1))==0 ){
    *pPs = h.page_size;
    return LSMVBT_OK;
  }
  for(ps=512; ps<=65536 && ps<size; ps*=2){
    if( lsm_read_full(db->io, db->fd, b, sizeof(b), ps) ) return LSMVBT_IOERR;
    lsm_hdr_decode(b, &h);
    if( lsm_get32(b)==LSM_MAGIC && h.type==LSM_PAGE_SUPER && h.pgno==0
     && h.page_size==ps && h.slot==1 ){
      *pPs = ps;
      return LSMVBT_OK;
    }
  }
  return lsm_err(db, LSMVBT_NOTADB, "%s is not an LS-MVBT file", db->zPath);
}

static uint64_t now_usec(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec*1000000u + (uint64_t)ts.tv_nsec/1000u;
}

int lsm_recover(lsmvbt_db *db){
  lsmvbt_io *io = db->io;
  struct stat st;
  uint32_t ps = 0, npage, nslot, i, chunk = 64;
  uint64_t *ver = 0, M = 0, C, t0 = now_usec();
  uint8_t *state = 0, *buf = 0, *bm = 0;
  uint32_t nM = 0, npM = 0, rootM = 0, prevM = 0, nC = 0, npC = 0, rootC = 0, root;
  uint32_t nclean = 0;
  int haveM = 0, rc;

  if( io->xFstat(db->fd, &st)!=0 ) return lsm_err(db, LSMVBT_IOERR, "fstat: %s", strerror(errno));
  rc = find_page_size(db, (uint64_t)st.st_size, &ps);
  if( rc ) return rc;
  rc = lsm_pager_init(&db->pager, db, io, db->fd, ps, db->opt.cache_pages, db->opt.prealloc_bytes);
  if( rc ) return rc;
  nslot = (uint32_t)(((uint64_t)st.st_size + ps - 1) / ps);
  npage = (nslot + 1) / 2;
  if( npage<2 ) return lsm_err(db, LSMVBT_NOTADB, "%s is too short", db->zPath);

  ver = calloc(2*(size_t)npage, sizeof(uint64_t));
  state = calloc(2*(size_t)npage, 1);
  buf = malloc((size_t)chunk*ps);
  if( ver==0 || state==0 || buf==0 ){ rc = LSMVBT_NOMEM; goto done; }

  /* Pass 1: classify every slot (R2) and find M. */
  for(i=0; i<2*npage; i+=chunk){
    uint32_t n = 2*npage - i < chunk ? 2*npage - i : chunk, k;
    rc = lsm_read_full(io, db->fd, buf, (size_t)n*ps, (off_t)i*ps);
    if( rc ){ rc = lsm_err(db, rc, "read: %s", strerror(errno)); goto done; }
    for(k=0; k<n; k++){
      const uint8_t *b = buf + (size_t)k*ps;
      uint32_t s = i+k, pg = s/2;
      lsm_page_hdr h;
      lsm_hdr_decode(b, &h);
      if( lsm_page_is_zero(b, ps) ){
        state[s] = ST_EMPTY;
      }else if( lsm_page_valid(b, ps) && h.pgno==pg && h.slot==s%2 && h.page_size==ps
             && (pg==0 ? h.type==LSM_PAGE_SUPER : (h.type==LSM_PAGE_LEAF || h.type==LSM_PAGE_INTERNAL)) ){
        state[s] = ST_VALID;
        ver[s] = h.version;
        if( !haveM || h.version>M ){ haveM = 1; M = h.version; }
      }else{
        state[s] = ST_INVALID;
      }
    }
  }
  db->stats.recovery_slots_scanned = 2ull*npage;
  if( !haveM ){ rc = lsm_err(db, LSMVBT_NOTADB, "%s holds no valid page", db->zPath); goto done; }

  /* Pass 2: is M complete? (R2) Headers of M and M-1, re-read. */
  for(i=0; i<2*npage; i++){
    uint8_t b[LSM_HDR_SIZE];
    lsm_page_hdr h;
    if( state[i]!=ST_VALID || (ver[i]!=M && !(M>0 && ver[i]==M-1)) ) continue;
    rc = lsm_read_full(io, db->fd, b, sizeof(b), (off_t)i*ps);
    if( rc ) goto done;
    lsm_hdr_decode(b, &h);
    if( ver[i]==M ){
      if( nM>0 && (h.npages!=npM || h.root!=rootM || h.prev_root!=prevM) ){
        rc = lsm_err(db, LSMVBT_CORRUPT, "slots of version %llu disagree", (unsigned long long)M);
        goto done;
      }
      nM++; npM = h.npages; rootM = h.root; prevM = h.prev_root;
    }else{
      nC++; npC = h.npages; rootC = h.root;
    }
  }
  if( nM==npM ){
    C = M;
    root = rootM;
  }else if( M==0 ){
    rc = lsm_err(db, LSMVBT_CORRUPT, "%s: its creation is incomplete", db->zPath);
    goto done;
  }else{
    C = M-1;
    root = prevM;
    if( nC==0 || nC!=npC || rootC!=root ){
      rc = lsm_err(db, LSMVBT_CORRUPT, "version %llu is incomplete and so is version %llu: "
                   "the file was not written with sync=full, or is damaged",
                   (unsigned long long)M, (unsigned long long)C);
      goto done;
    }
  }

  /* Pass 3: current slots, and wipe the rest (R4). */
  rc = lsm_pager_set_npage(&db->pager, npage);
  if( rc ) goto done;
  memset(buf, 0, ps);
  for(i=0; i<npage && rc==LSMVBT_OK; i++){
    int s;
    db->pager.cur[i] = LSM_NO_SLOT;
    for(s=0; s<2; s++){
      uint32_t k = 2*i + (uint32_t)s;
      if( state[k]==ST_INVALID || (state[k]==ST_VALID && ver[k]>C) ){
        rc = lsm_write_full(io, db->fd, buf, ps, (off_t)k*ps);
        nclean++;
        state[k] = ST_EMPTY;
        continue;
      }
      if( state[k]==ST_VALID && (db->pager.cur[i]==LSM_NO_SLOT || ver[k]>ver[2*i+db->pager.cur[i]]) ){
        db->pager.cur[i] = (uint8_t)s;
      }
    }
  }
  if( rc==LSMVBT_OK && nclean>0 ){
    rc = lsm_sync_data(io, db->fd);
    db->stats.syncs++;
  }
  if( rc ){ rc = lsm_err(db, rc, "wiping uncommitted pages failed: %s", strerror(errno)); goto done; }
  db->stats.recovery_slots_cleaned = nclean;
  if( db->pager.cur[0]==LSM_NO_SLOT ){
    rc = lsm_err(db, LSMVBT_CORRUPT, "the superblock has no committed copy");
    goto done;
  }
  db->pager.file_bytes = (uint64_t)st.st_size;
  db->C = C;

  /* The tree at C, and the pages it reaches: the rest is free. */
  rc = lsm_tree_init(&db->tree, db, root, 0);
  if( rc ) goto done;
  db->tree_ok = 1;
  db->tree.horizon = C;
  bm = calloc(npage/8 + 1, 1);
  if( bm==0 ){ rc = LSMVBT_NOMEM; goto done; }
  rc = lsm_tree_mark(&db->tree, bm, npage);
  if( rc==LSMVBT_OK ) rc = lsm_pager_set_free(&db->pager, bm);
  db->stats.recovery_usec = now_usec() - t0;

done:
  free(ver);
  free(state);
  free(buf);
  free(bm);
  return rc;
}
