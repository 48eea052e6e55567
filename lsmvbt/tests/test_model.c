/*
** test_model.c — randomized model test of the LS-MVBT engine against an
** in-memory map: inserts, replaces, updates, deletes, point reads and range
** scans inside transactions that commit, roll back, roll back after sync
** (the compensating commit), and roll back to savepoints; cursors pinned at
** an old version across later commits (a reader sees one version, garbage
** collection spares it); reopen with different switches; under every
** combination of the five optimizations, with small pages so that trees
** are deep and every split and redistribution path runs.
**
** Usage: lsmvbt_test_model [seed [steps-per-config]]
*/
#include "test_util.h"

static char g_path[512];
static uint8_t g_val[70000];

static void random_options(lsmvbt_options *o, int cfg, uint32_t page_size){
  lsmvbt_options_default(o);
  o->lazy_split = (cfg & 1) ? 1 : 0;
  o->reserve_bytes = (cfg & 2) ? -1 : 0;
  o->lazy_gc = (cfg & 4) ? 1 : 0;
  o->gc_period = 5;
  o->embed_metadata = (cfg & 8) ? 1 : 0;
  o->redistribute = (cfg & 16) ? 1 : 0;
  o->sync = LSMVBT_SYNC_NORMAL;          /* the crash test covers sync=full */
  o->page_size = page_size;
  o->cache_pages = 16;                   /* evictions happen all the time */
  o->prealloc_bytes = (cfg & 32) ? 0 : 16*page_size;
}

typedef struct sp_entry { int id; model m; } sp_entry;

static void run_config(int cfg, uint32_t page_size, int steps){
  lsmvbt_options o;
  lsmvbt_db *db = 0;
  model committed = {0, 0}, txn = {0, 0}, snap = {0, 0};
  sp_entry sp[16];
  int nsp = 0, step, i, rc;
  lsmvbt_cursor *pinned = 0;
  int pinned_age = 0;
  uint64_t last_version = 0;
  uint32_t maxlen;
  char what[128];

  random_options(&o, cfg, page_size);
  rc = lsmvbt_open(g_path, LSMVBT_OPEN_TRUNCATE, &o, &db);
  CHECK_RC(db, rc, LSMVBT_OK);
  if( rc ){ lsmvbt_close(db); return; }
  model_init(&committed);
  model_init(&txn);
  memset(sp, 0, sizeof(sp));
  maxlen = lsmvbt_max_value(db);
  if( maxlen>300 ) maxlen = 300;

  for(step=0; step<steps && !FAILED_ENOUGH(); step++){
    int nops = 1 + (int)rng_below(rng_below(4)==0 ? 60 : 6), op, end;
    uint64_t v_before;
    lsmvbt_stats st;

    snprintf(what, sizeof(what), "cfg %d ps %u step %d", cfg, page_size, step);
    lsmvbt_get_stats(db, &st);
    v_before = st.version;
    CHECK_RC(db, lsmvbt_begin(db), LSMVBT_OK);
    model_copy(&txn, &committed);
    nsp = 0;
    for(op=0; op<nops && !FAILED_ENOUGH(); op++){
      int k = (int)rng_below((uint32_t)g_nkeys), kind = (int)rng_below(100);
      int64_t key = g_keys[k];
      int has = txn.v[k].has;
      uint32_t len;
      if( kind<30 ){
        len = make_value(g_val, maxlen);
        rc = lsmvbt_put(db, key, g_val, len, LSMVBT_INSERT);
        CHECK_RC(db, rc, has ? LSMVBT_CONSTRAINT : LSMVBT_OK);
        if( !has && rc==LSMVBT_OK ) model_set(&txn, k, g_val, len);
      }else if( kind<50 ){
        len = make_value(g_val, maxlen);
        CHECK_RC(db, lsmvbt_put(db, key, g_val, len, LSMVBT_REPLACE), LSMVBT_OK);
        model_set(&txn, k, g_val, len);
      }else if( kind<60 ){
        len = make_value(g_val, maxlen);
        rc = lsmvbt_put(db, key, g_val, len, LSMVBT_UPDATE);
        CHECK_RC(db, rc, has ? LSMVBT_OK : LSMVBT_NOTFOUND);
        if( has && rc==LSMVBT_OK ) model_set(&txn, k, g_val, len);
      }else if( kind<80 ){
        rc = lsmvbt_delete(db, key);
        CHECK_RC(db, rc, has ? LSMVBT_OK : LSMVBT_NOTFOUND);
        if( has ) model_del(&txn, k);
      }else if( kind<88 ){
        const void *v;
        uint32_t n;
        rc = lsmvbt_get(db, key, &v, &n);
        CHECK_RC(db, rc, has ? LSMVBT_OK : LSMVBT_NOTFOUND);
        if( has && rc==LSMVBT_OK ){
          CHECK_EQ(n, txn.v[k].len);
          CHECK(n==0 || memcmp(v, txn.v[k].val, n)==0);
        }
      }else if( kind<92 && nsp<16 ){
        CHECK_RC(db, lsmvbt_savepoint(db, nsp), LSMVBT_OK);
        sp[nsp].id = nsp;
        model_copy(&sp[nsp].m, &txn);
        nsp++;
      }else if( kind<95 && nsp>0 ){
        int id = (int)rng_below((uint32_t)nsp);
        CHECK_RC(db, lsmvbt_rollback_to(db, id), LSMVBT_OK);
        model_copy(&txn, &sp[id].m);
        nsp = id+1;
      }else if( kind<97 && nsp>0 ){
        int id = (int)rng_below((uint32_t)nsp);
        CHECK_RC(db, lsmvbt_release(db, id), LSMVBT_OK);
        nsp = id;
      }else{
        lsmvbt_cursor *c;
        CHECK_RC(db, lsmvbt_cursor_open(db, &c), LSMVBT_OK);
        CHECK(scan_matches(db, c, &txn, g_keys[k], what));
        lsmvbt_cursor_close(c);
      }
    }
    if( rng_below(50)==0 ){
      /* A value too long for a node is refused without side effects. */
      CHECK_RC(db, lsmvbt_put(db, 1, g_val, lsmvbt_max_value(db)+1, LSMVBT_REPLACE), LSMVBT_TOOBIG);
    }

    end = (int)rng_below(10);
    if( end<6 ){
      CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
      model_copy(&committed, &txn);
    }else if( end<8 ){
      CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
      lsmvbt_get_stats(db, &st);
      CHECK_EQ(st.version, v_before);
    }else if( end<9 ){
      /* Rolled back after the commit point: a compensating version (none
      ** if the transaction wrote nothing, or its net change was undone). */
      CHECK_RC(db, lsmvbt_sync(db), LSMVBT_OK);
      CHECK_RC(db, lsmvbt_rollback(db), LSMVBT_OK);
      lsmvbt_get_stats(db, &st);
      CHECK(st.version>=v_before && st.version<=v_before+2);
    }else{
      CHECK_RC(db, lsmvbt_sync(db), LSMVBT_OK);
      CHECK_RC(db, lsmvbt_commit(db), LSMVBT_OK);
      model_copy(&committed, &txn);
    }
    for(i=0; i<16; i++) model_free(&sp[i].m);
    lsmvbt_get_stats(db, &st);
    CHECK(st.version>=last_version);
    last_version = st.version;

    if( pinned && ++pinned_age>6 ){
      snprintf(what, sizeof(what), "cfg %d step %d: pinned snapshot", cfg, step);
      CHECK(scan_matches(db, pinned, &snap, INT64_MIN, what));
      lsmvbt_cursor_close(pinned);
      pinned = 0;
    }else if( !pinned && rng_below(20)==0 ){
      CHECK_RC(db, lsmvbt_cursor_open(db, &pinned), LSMVBT_OK);
      model_copy(&snap, &committed);
      pinned_age = 0;
    }
    if( rng_below(15)==0 ){
      int64_t last;
      int j;
      snprintf(what, sizeof(what), "cfg %d step %d: full scan", cfg, step);
      CHECK(db_matches(db, &committed, what));
      CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
      for(j=g_nkeys-1; j>=0 && !committed.v[j].has; j--);
      rc = lsmvbt_last_key(db, &last);
      CHECK_RC(db, rc, j>=0 ? LSMVBT_OK : LSMVBT_NOTFOUND);
      if( j>=0 && rc==LSMVBT_OK ) CHECK_EQ(last, g_keys[j]);
    }
    if( !pinned && rng_below(40)==0 ){
      /* Reopen, with the switches changed: they are open-time options. */
      CHECK_RC(db, lsmvbt_close(db), LSMVBT_OK);
      random_options(&o, (int)rng_below(64), page_size);
      rc = lsmvbt_open(g_path, 0, &o, &db);
      CHECK_RC(db, rc, LSMVBT_OK);
      if( rc ){ lsmvbt_close(db); db = 0; break; }
      lsmvbt_get_stats(db, &st);
      CHECK_EQ(st.version, last_version);
      snprintf(what, sizeof(what), "cfg %d step %d: after reopen", cfg, step);
      CHECK(db_matches(db, &committed, what));
      CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
      maxlen = lsmvbt_max_value(db);
      if( maxlen>300 ) maxlen = 300;
    }
  }
  if( pinned ) lsmvbt_cursor_close(pinned);
  if( db ){
    snprintf(what, sizeof(what), "cfg %d: final", cfg);
    CHECK(db_matches(db, &committed, what));
    CHECK_RC(db, lsmvbt_check(db), LSMVBT_OK);
    {
      lsmvbt_stats st;
      lsmvbt_get_stats(db, &st);
      if( getenv("LSMVBT_TEST_VERBOSE") ){
        fprintf(stderr, "cfg %2d ps %5u: v=%llu pages=%u free=%u h=%u lazy=%llu legacy=%llu "
                "copy=%llu vsplit=%llu redis=%llu reserve=%llu gc=%llu passes=%llu reclaimed=%llu\n",
                cfg, page_size, (unsigned long long)st.version, st.npages, st.free_pages, st.height,
                (unsigned long long)st.splits_lazy, (unsigned long long)st.splits_legacy,
                (unsigned long long)st.splits_copy, (unsigned long long)st.version_splits,
                (unsigned long long)st.redistributions, (unsigned long long)st.reserve_uses,
                (unsigned long long)st.gc_cells, (unsigned long long)st.gc_passes,
                (unsigned long long)st.pages_reclaimed);
      }
    }
    lsmvbt_close(db);
  }
  model_free(&committed);
  model_free(&txn);
  model_free(&snap);
}

int main(int argc, char **argv){
  char dir[300];
  uint64_t seed = argc>1 ? strtoull(argv[1], 0, 0) : 20260512;
  int steps = argc>2 ? atoi(argv[2]) : 300, cfg;
  rng_seed(seed);
  universe_init(500);
  test_dir(dir, sizeof(dir), "model");
  snprintf(g_path, sizeof(g_path), "%s/model.lsmvbt", dir);
  fprintf(stderr, "seed %llu, %d steps per configuration\n", (unsigned long long)seed, steps);
  for(cfg=0; cfg<32 && !FAILED_ENOUGH(); cfg++){
    run_config(cfg, 512, steps);
  }
  /* Larger pages, all optimizations on and all off. */
  if( !FAILED_ENOUGH() ) run_config(31 ^ 16, 4096, steps);
  if( !FAILED_ENOUGH() ) run_config(16, 1024, steps);
  lsmvbt_unlink(g_path, 0);
  rmdir(dir);
  free(g_keys);
  return CHECK_DONE();
}
