/*
** pager.c — node cache, page allocation and preallocation, and the commit
** write: one slot per dirty node, then one fdatasync (invariants P1-P4 in
** pager.h).
*/
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lsm_u32vec_push(lsm_u32vec *v, uint32_t x){
  if( v->n==v->nalloc ){
    uint32_t na = v->nalloc ? v->nalloc*2 : 64;
    uint32_t *a = realloc(v->a, sizeof(uint32_t)*na);
    if( a==0 ) return LSMVBT_NOMEM;
    v->a = a;
    v->nalloc = na;
  }
  v->a[v->n++] = x;
  return LSMVBT_OK;
}

static void list_unlink(lsm_node *n){
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->prev = n->next = 0;
}
static void list_push(lsm_node *head, lsm_node *n){
  n->next = head->next;
  n->prev = head;
  head->next->prev = n;
  head->next = n;
}

static uint32_t hash_of(const lsm_pager *p, uint32_t pgno){
  return (pgno * 2654435761u) & (p->nhash-1);
}
static void hash_insert(lsm_pager *p, lsm_node *n){
  uint32_t h = hash_of(p, n->pgno);
  n->hnext = p->hash[h];
  p->hash[h] = n;
  p->ncached++;
}
static void hash_remove(lsm_pager *p, lsm_node *n){
  lsm_node **pp = &p->hash[hash_of(p, n->pgno)];
  while( *pp && *pp!=n ) pp = &(*pp)->hnext;
  if( *pp ){
    *pp = n->hnext;
    p->ncached--;
  }
}
static lsm_node *hash_find(const lsm_pager *p, uint32_t pgno){
  lsm_node *n = p->hash[hash_of(p, pgno)];
  while( n && n->pgno!=pgno ) n = n->hnext;
  return n;
}

int lsm_pager_init(lsm_pager *p, lsmvbt_db *db, lsmvbt_io *io, int fd,
                   uint32_t ps, uint32_t cache_max, uint64_t prealloc){
  memset(p, 0, sizeof(*p));
  p->db = db;
  p->io = io;
  p->fd = fd;
  p->ps = ps;
  p->cache_max = cache_max<16 ? 16 : cache_max;
  p->prealloc = prealloc;
  p->nhash = 256;
  while( p->nhash < p->cache_max ) p->nhash *= 2;
  p->hash = calloc(p->nhash, sizeof(lsm_node*));
  p->buf = malloc(ps);
  p->lru.next = p->lru.prev = &p->lru;
  p->dirty.next = p->dirty.prev = &p->dirty;
  if( p->hash==0 || p->buf==0 ) return LSMVBT_NOMEM;
  return LSMVBT_OK;
}

void lsm_pager_close(lsm_pager *p){
  uint32_t i;
  if( p->hash ){
    for(i=0; i<p->nhash; i++){
      lsm_node *n = p->hash[i];
      while( n ){
        lsm_node *nx = n->hnext;
        lsm_node_free(n);
        n = nx;
      }
    }
  }
  free(p->hash);
  free(p->buf);
  free(p->cur);
  free(p->freel.a);
  free(p->txn_alloc.a);
  free(p->txn_free.a);
  memset(p, 0, sizeof(*p));
}

int lsm_pager_set_npage(lsm_pager *p, uint32_t npage){
  if( npage>p->ncur ){
    uint32_t na = p->ncur ? p->ncur : 64;
    uint8_t *a;
    while( na<npage ) na *= 2;
    a = realloc(p->cur, na);
    if( a==0 ) return LSMVBT_NOMEM;
    memset(a + p->ncur, LSM_NO_SLOT, na - p->ncur);
    p->cur = a;
    p->ncur = na;
  }
  p->npage = npage;
  return LSMVBT_OK;
}

static off_t slot_offset(const lsm_pager *p, uint32_t pgno, int slot){
  return ((off_t)pgno*2 + slot) * (off_t)p->ps;
}

int lsm_pager_get(lsm_pager *p, uint32_t pgno, lsm_node **pp){
  lsm_node *n = hash_find(p, pgno);
  lsm_page_hdr h;
  int rc, slot;
  *pp = 0;
  if( n ){
    p->db->stats.cache_hits++;
    if( !n->dirty ){
      list_unlink(n);
      list_push(&p->lru, n);
    }
    *pp = n;
    return LSMVBT_OK;
  }
  if( pgno==0 || pgno>=p->npage || p->cur[pgno]==LSM_NO_SLOT ){
    return lsm_err(p->db, LSMVBT_CORRUPT, "page %u is referenced but holds no node", pgno);
  }
  slot = p->cur[pgno];
  rc = lsm_read_full(p->io, p->fd, p->buf, p->ps, slot_offset(p, pgno, slot));
  if( rc ) return lsm_err(p->db, rc, "read of page %u failed: %s", pgno, strerror(errno));
  p->db->stats.page_reads++;
  lsm_hdr_decode(p->buf, &h);
  if( !lsm_page_valid(p->buf, p->ps) || h.pgno!=pgno || h.slot!=(uint32_t)slot
   || h.page_size!=p->ps ){
    return lsm_err(p->db, LSMVBT_CORRUPT, "page %u slot %d: bad checksum or header", pgno, slot);
  }
  n = lsm_node_new(pgno, h.level);
  if( n==0 ) return LSMVBT_NOMEM;
  rc = lsm_node_decode(n, p->buf, p->ps);
  if( rc ){
    lsm_node_free(n);
    return lsm_err(p->db, rc, "page %u: malformed cells", pgno);
  }
  hash_insert(p, n);
  list_push(&p->lru, n);
  *pp = n;
  return LSMVBT_OK;
}

/* Make page pgno's slots part of the file. With preallocation the file grows
** by whole chunks of zeros followed by one fdatasync, so that the commits
** after it overwrite allocated blocks and never make the file system journal
** an allocation (the journaling-of-journal cost the WALDIO paper measures). */
static int ensure_space(lsm_pager *p, uint32_t pgno){
  uint64_t need = ((uint64_t)pgno+1) * 2 * p->ps;
  uint64_t target;
  int rc;
  if( p->prealloc==0 || need<=p->file_bytes ) return LSMVBT_OK;
  target = (need + p->prealloc - 1) / p->prealloc * p->prealloc;
  rc = lsm_zero_fill(p->io, p->fd, (off_t)p->file_bytes, target - p->file_bytes);
  if( rc==LSMVBT_OK ) rc = lsm_sync_data(p->io, p->fd);
  if( rc ) return lsm_err(p->db, rc, "preallocating the file failed: %s", strerror(errno));
  p->db->stats.prealloc_bytes += target - p->file_bytes;
  p->db->stats.syncs++;
  p->file_bytes = target;
  return LSMVBT_OK;
}

int lsm_pager_new(lsm_pager *p, int level, lsm_node **pp){
  uint32_t pgno;
  lsm_node *n;
  int rc;
  *pp = 0;
  if( p->freel.n>0 ){
    pgno = p->freel.a[--p->freel.n];
  }else{
    pgno = p->npage;
    if( pgno==0xffffffffu ) return lsm_err(p->db, LSMVBT_FULL, "file has 2^32 pages");
    rc = lsm_pager_set_npage(p, pgno+1);
    if( rc ) return rc;
  }
  rc = ensure_space(p, pgno);
  if( rc==LSMVBT_OK ) rc = lsm_u32vec_push(&p->txn_alloc, pgno);
  if( rc ){
    lsm_u32vec_push(&p->freel, pgno);
    return rc;
  }
  n = hash_find(p, pgno);
  if( n ){
    /* A reused page may still be cached with the content it had before it
    ** became unreachable (it is clean: dirty nodes are reachable). */
    list_unlink(n);
    hash_remove(p, n);
    lsm_node_free(n);
  }
  n = lsm_node_new(pgno, level);
  if( n==0 ) return LSMVBT_NOMEM;
  n->dirty = 1;
  n->fresh = 1;
  hash_insert(p, n);
  list_push(&p->dirty, n);
  p->ndirty++;
  *pp = n;
  return LSMVBT_OK;
}

void lsm_pager_dirty(lsm_pager *p, lsm_node *n){
  if( n->dirty ) return;
  list_unlink(n);
  list_push(&p->dirty, n);
  n->dirty = 1;
  p->ndirty++;
}

void lsm_pager_shrink(lsm_pager *p){
  while( p->ncached > p->cache_max && p->lru.prev!=&p->lru ){
    lsm_node *n = p->lru.prev;
    list_unlink(n);
    hash_remove(p, n);
    lsm_node_free(n);
  }
}

void lsm_super_encode(uint8_t *buf, uint32_t ps, const lsm_page_hdr *h){
  lsm_page_hdr hh = *h;
  memset(buf, 0, ps);
  hh.type = LSM_PAGE_SUPER;
  hh.level = 0;
  hh.ncell = 0;
  hh.pgno = 0;
  lsm_hdr_encode(buf, &hh);
  memcpy(buf + LSM_HDR_SIZE, LSM_FORMAT_TAG, sizeof(LSM_FORMAT_TAG));
  lsm_page_seal(buf, ps);
}

/* P4: wipe what a failed commit wrote, so no slot of an uncommitted version
** remains (recovery relies on it: see recovery.c R3). */
static int repair(lsm_pager *p, const uint32_t *aPg, const uint8_t *aSlot, uint32_t n){
  uint32_t i;
  int rc = LSMVBT_OK;
  memset(p->buf, 0, p->ps);
  for(i=0; i<n && rc==LSMVBT_OK; i++){
    rc = lsm_write_full(p->io, p->fd, p->buf, p->ps, slot_offset(p, aPg[i], aSlot[i]));
  }
  if( rc==LSMVBT_OK ) rc = lsm_sync_data(p->io, p->fd);
  if( rc ) p->broken = 1;
  return rc;
}

int lsm_pager_commit(lsm_pager *p, uint64_t version, uint32_t root,
                     uint32_t prev_root, int with_super, int sync, uint32_t *pn){
  uint32_t n = p->ndirty + (with_super ? 1 : 0), k = 0, i;
  uint32_t *aPg;
  uint8_t *aSlot;
  lsm_page_hdr h;
  lsm_node *nd;
  int rc = LSMVBT_OK, err = 0;
  *pn = 0;
  if( p->broken ) return lsm_err(p->db, LSMVBT_IOERR, "an earlier I/O error left the file unrepaired; reopen it");
  if( n==0 ) return LSMVBT_OK;
  aPg = malloc(sizeof(uint32_t)*n);
  aSlot = malloc(n);
  if( aPg==0 || aSlot==0 ){ free(aPg); free(aSlot); return LSMVBT_NOMEM; }
  memset(&h, 0, sizeof(h));
  h.npages = n;
  h.version = version;
  h.root = root;
  h.prev_root = prev_root;
  h.page_size = p->ps;
  for(nd=p->dirty.next; nd!=&p->dirty && rc==LSMVBT_OK; nd=nd->next){
    uint8_t cur = p->cur[nd->pgno];
    h.slot = (cur==0) ? 1 : 0;
    lsm_node_encode(nd, p->buf, p->ps, &h);
    aPg[k] = nd->pgno;
    aSlot[k++] = (uint8_t)h.slot;
    rc = lsm_write_full(p->io, p->fd, p->buf, p->ps, slot_offset(p, nd->pgno, (int)h.slot));
  }
  if( rc==LSMVBT_OK && with_super ){
    h.slot = (p->cur[0]==0) ? 1 : 0;
    lsm_super_encode(p->buf, p->ps, &h);
    aPg[k] = 0;
    aSlot[k++] = (uint8_t)h.slot;
    rc = lsm_write_full(p->io, p->fd, p->buf, p->ps, slot_offset(p, 0, (int)h.slot));
  }
  if( rc==LSMVBT_OK && sync ){
    rc = lsm_sync_data(p->io, p->fd);
    p->db->stats.syncs++;
  }
  if( rc ){
    err = errno;
    if( repair(p, aPg, aSlot, k) ){
      rc = lsm_err(p->db, LSMVBT_IOERR, "commit of version %llu failed (%s), and wiping its "
                   "pages failed too; reopen the file to recover", (unsigned long long)version,
                   strerror(err));
    }else{
      rc = lsm_err(p->db, LSMVBT_IOERR, "commit of version %llu failed: %s",
                   (unsigned long long)version, strerror(err));
    }
    free(aPg);
    free(aSlot);
    return rc;
  }
  for(i=0; i<k; i++){
    uint64_t end = (uint64_t)slot_offset(p, aPg[i], aSlot[i]) + p->ps;
    p->cur[aPg[i]] = aSlot[i];
    if( end>p->file_bytes ) p->file_bytes = end;
  }
  while( p->dirty.next!=&p->dirty ){
    nd = p->dirty.next;
    list_unlink(nd);
    nd->dirty = 0;
    nd->fresh = 0;
    list_push(&p->lru, nd);
  }
  p->ndirty = 0;
  p->txn_alloc.n = 0;
  for(i=0; i<p->txn_free.n; i++) lsm_u32vec_push(&p->freel, p->txn_free.a[i]);
  p->txn_free.n = 0;
  p->db->stats.pages_written += k;
  p->db->stats.bytes_written += (uint64_t)k * p->ps;
  p->db->stats.commit_pages[k>=5 ? 4 : k-1]++;
  p->db->stats.last_commit_pages = k;
  *pn = k;
  free(aPg);
  free(aSlot);
  return LSMVBT_OK;
}

void lsm_pager_rollback(lsm_pager *p){
  uint32_t i;
  while( p->dirty.next!=&p->dirty ){
    lsm_node *nd = p->dirty.next;
    list_unlink(nd);
    hash_remove(p, nd);
    lsm_node_free(nd);
  }
  p->ndirty = 0;
  for(i=p->txn_alloc.n; i>0; i--) lsm_u32vec_push(&p->freel, p->txn_alloc.a[i-1]);
  p->txn_alloc.n = 0;
  p->txn_free.n = 0;
}

int lsm_pager_set_free(lsm_pager *p, const uint8_t *bitmap){
  uint32_t pg;
  p->freel.n = 0;
  for(pg=p->npage; pg>1; pg--){
    uint32_t q = pg-1;
    if( !(bitmap[q/8] & (1u<<(q%8))) ){
      int rc = lsm_u32vec_push(&p->freel, q);
      if( rc ) return rc;
    }
  }
  return LSMVBT_OK;
}
