/*
** tree.h — the multi-version B+-tree operations (DESIGN.md §3).
**
** Routing. An internal cell (key=b, [s,e), child) says: at versions in
** [s,e), the child holds the keys k <= b that are above the previous such
** bound. At any version v the cells of a node alive at v and inside the
** node's own key range (lo, hi] have distinct bounds, ascending, the last
** one equal to hi (invariant T1). A node's range only changes together with
** the parent cell that points to it: that cell is ended and a new one, with
** start = the version of the change, is added (T2). So the range through
** which a node is reached at v is fixed over the lifetime [s,e) of that
** cell, and `since` = s is when it began.
**
** Laziness. A cell left in a node after its key moved out of the node's
** range (lazy split: the upper half is copied to a new node and the old node
** is not written) still has end = INF on disk; readers never see it because
** every read filters by the range (T3). When the node is next modified the
** cell is "materialized": end = since (touch()). Garbage collection removes
** cells with end <= horizon, the oldest version anyone may still read.
**
** In-place safety. A node rewritten at version w only (a) adds cells with
** start = w, (b) sets end = w or end = since <= w on cells, (c) removes
** cells that no version >= horizon sees. Its content at every version
** <= w-1 that is still readable is therefore unchanged (T4), which is what
** lets readers pinned at older versions share the node, and what lets a
** rollback of the uncommitted version just drop the dirty node.
*/
#ifndef LSMVBT_TREE_H
#define LSMVBT_TREE_H

#include "node.h"

#define LSM_MAX_DEPTH 40

typedef struct lsm_range {
  int64_t lo, hi;        /* keys k with lo < k <= hi (no lower bound if !has_lo) */
  uint64_t since;        /* version from which the node has had this range */
  int has_lo;
} lsm_range;

typedef struct lsm_root { uint64_t since; uint32_t pgno; } lsm_root;

typedef struct lsm_tree {
  lsmvbt_db *db;
  lsm_root *roots;       /* root history, ascending `since` */
  int nroot, nroot_alloc;
  uint64_t w;            /* version being written (0: no write transaction) */
  uint64_t horizon;      /* cells with end <= horizon are garbage */
  uint64_t dropped;      /* routing cells removed since the last reclamation */
  uint32_t body;         /* page_size - header: room for cells */
  uint32_t limit;        /* body - reserve: fill limit of a node that is not lazy */
} lsm_tree;

int lsm_tree_init(lsm_tree *t, lsmvbt_db *db, uint32_t root, uint64_t since);
void lsm_tree_close(lsm_tree *t);
uint32_t lsm_tree_root(const lsm_tree *t, uint64_t v);
/* Drop root-history entries of version w (a rollback). */
void lsm_tree_forget(lsm_tree *t, uint64_t w);

/* Reads at version v. lsm_tree_get sets *pc to the live cell or NULL; the
** pointer is valid until the next tree or pager call. */
int lsm_tree_get(lsm_tree *t, uint64_t v, int64_t key, const lsm_cell **pc);
int lsm_tree_last_key(lsm_tree *t, uint64_t v, int64_t *pKey, int *pFound);
/* Call xCell for every live cell with key >= key in the leaf holding key,
** in key order; *pHi receives the leaf's upper bound. */
int lsm_tree_leaf_scan(lsm_tree *t, uint64_t v, int64_t key, int64_t *pHi,
                       int (*xCell)(void*, const lsm_cell*), void *ctx);

/* Writes at version t->w. Before changing anything, *pOld and *pnOld receive a
** malloc'd copy of the previous value (if pOld) and *pHad whether there was
** one. LSMVBT_CONSTRAINT / LSMVBT_NOTFOUND leave the tree unchanged. */
int lsm_tree_put(lsm_tree *t, int64_t key, const void *val, uint32_t n, int mode,
                 uint8_t **pOld, uint32_t *pnOld, int *pHad);
int lsm_tree_delete(lsm_tree *t, int64_t key, uint8_t **pOld, uint32_t *pnOld);

/* lazy_gc=0: rewrite every node holding garbage (the periodic pass). */
int lsm_tree_gc_pass(lsm_tree *t);
/* Set a bit for every page reachable by a version >= horizon. */
int lsm_tree_mark(lsm_tree *t, uint8_t *bitmap, uint32_t npage);
/* Structural check of version v (lsmvbt_check). */
int lsm_tree_check(lsm_tree *t, uint64_t v);
int lsm_tree_height(lsm_tree *t, uint64_t v, uint32_t *pHeight);

#endif
