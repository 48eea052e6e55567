/*
** pager.h — the file, the node cache, and the commit write (DESIGN.md §5.1).
**
** Every logical page p has two slots; cur[p] says which one holds p's last
** committed content (LSM_NO_SLOT: none, the page is free and never held a
** node). Invariants:
**   P1  a commit writes each dirty node once, into the slot that is NOT
**       cur[p]; cur[p] changes only after the commit's fdatasync returned.
**       So a crash or a failed write never touches committed content.
**   P2  dirty nodes stay in memory until the commit; clean nodes are evicted
**       least-recently-used, and only between operations (a node pointer
**       obtained during one engine call stays valid for that call).
**   P3  a page is reused only from the committed free list: pages released
**       during a transaction become reusable after its commit.
**   P4  after a failed commit the slots it wrote are zeroed and synced
**       ("repair") before anything else is written; if that fails too the
**       handle is broken and only a reopen (recovery) continues.
*/
#ifndef LSMVBT_PAGER_H
#define LSMVBT_PAGER_H

#include "node.h"

typedef struct lsm_u32vec { uint32_t *a; uint32_t n, nalloc; } lsm_u32vec;
int lsm_u32vec_push(lsm_u32vec *v, uint32_t x);

typedef struct lsm_pager {
  lsmvbt_db *db;
  lsmvbt_io *io;
  int fd;
  uint32_t ps;            /* page (= slot) size */
  uint32_t npage;         /* pages [0, npage) exist */
  uint64_t file_bytes;    /* bytes of the file allocated (zero-filled or written) */
  uint64_t prealloc;      /* growth chunk; 0: grow by writing */
  uint8_t *cur;           /* current slot of each page */
  uint32_t ncur;
  lsm_u32vec freel;       /* committed free pages (pop from the end) */
  lsm_u32vec txn_alloc;   /* pages handed out in the open transaction */
  lsm_u32vec txn_free;    /* pages released in it (free after commit) */
  lsm_node **hash;
  uint32_t nhash, ncached, cache_max;
  lsm_node lru;           /* sentinel; clean nodes, most recent first */
  lsm_node dirty;         /* sentinel; dirty nodes */
  uint32_t ndirty;
  uint8_t *buf;           /* one slot */
  int broken;             /* P4 failed */
} lsm_pager;

int lsm_pager_init(lsm_pager *p, lsmvbt_db *db, lsmvbt_io *io, int fd,
                   uint32_t ps, uint32_t cache_max, uint64_t prealloc);
void lsm_pager_close(lsm_pager *p);
int lsm_pager_set_npage(lsm_pager *p, uint32_t npage);

int lsm_pager_get(lsm_pager *p, uint32_t pgno, lsm_node **pp);
int lsm_pager_new(lsm_pager *p, int level, lsm_node **pp);
void lsm_pager_dirty(lsm_pager *p, lsm_node *n);
void lsm_pager_shrink(lsm_pager *p);

/* Write the dirty nodes (and the superblock if with_super) as version
** `version`, fdatasync if sync, then make them current (P1). *pn: slots
** written. On failure: repair (P4), nothing committed, the dirty nodes are
** kept so the caller can roll back. */
int lsm_pager_commit(lsm_pager *p, uint64_t version, uint32_t root,
                     uint32_t prev_root, int with_super, int sync, uint32_t *pn);
void lsm_pager_rollback(lsm_pager *p);
/* Replace the free list: every page in [1, npage) whose bit is clear. */
int lsm_pager_set_free(lsm_pager *p, const uint8_t *bitmap);

/* The superblock body (page 0). */
void lsm_super_encode(uint8_t *buf, uint32_t ps, const lsm_page_hdr *h);

#endif
