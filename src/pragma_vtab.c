/*
** pragma_vtab.c — waldio's PRAGMAs as table-valued functions.
**
**   SELECT * FROM pragma_waldio;                  -- as PRAGMA waldio
**   SELECT waldio FROM pragma_waldio('aux');      -- of an attached database
**   SELECT json_extract(waldio, '$.layout') FROM pragma_waldio;
**   SELECT * FROM pragma_waldio_stats;            -- and every other one
**
** SQLite offers its own pragmas as eponymous virtual tables named
** pragma_<name>, but only those it knows: a pragma a VFS answers through
** SQLITE_FCNTL_PRAGMA (pragmas.c) is not among them. So each connection gets
** one eponymous-only virtual table per waldio pragma (registered by vfs.c's
** connection setup), with the columns SQLite's pragma tables have: the
** answer, in a column named after the pragma, and a hidden `schema`
** ("main" unless given). A query asks the database file, exactly as the
** PRAGMA does, with no value: nothing is ever set this way.
**
** One row when the database is opened through waldio; none when it is not
** (another VFS) -- which is how a query tells whether waldio is on; no
** table at all when waldio is not loaded.
*/
#include "vfs_internal.h"

#include <string.h>

typedef struct pragma_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  const char *zPragma;       /* static: one of azPragma below */
} pragma_vtab;

typedef struct pragma_cursor {
  sqlite3_vtab_cursor base;
  char *zValue;              /* the answer (sqlite3_malloc), NULL at EOF */
  char *zSchema;
} pragma_cursor;

/* The pragmas pragmas.c answers without a value. */
static const char *const azPragma[] = {
  "waldio", "waldio_stats", "waldio_sync", "waldio_flush_ms", "waldio_group",
  "waldio_group_bytes", "waldio_group_ms", "waldio_layout",
};

#define COL_VALUE  0
#define COL_SCHEMA 1

static int pvConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                     sqlite3_vtab **ppVtab, char **pzErr){
  pragma_vtab *p;
  char *zSql;
  int rc;
  (void)argc; (void)argv; (void)pzErr;
  zSql = sqlite3_mprintf("CREATE TABLE x(\"%w\", schema HIDDEN)", (const char*)pAux);
  if( !zSql ) return SQLITE_NOMEM;
  rc = sqlite3_declare_vtab(db, zSql);
  sqlite3_free(zSql);
  if( rc ) return rc;
  p = sqlite3_malloc(sizeof(*p));
  if( !p ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->db = db;
  p->zPragma = pAux;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int pvDisconnect(sqlite3_vtab *pVtab){
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

/* schema = ? is the one constraint used; without it, "main". */
static int pvBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  int i;
  (void)pVtab;
  pInfo->idxNum = 0;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    if( c->iColumn!=COL_SCHEMA || c->op!=SQLITE_INDEX_CONSTRAINT_EQ ) continue;
    if( !c->usable ) return SQLITE_CONSTRAINT;
    pInfo->aConstraintUsage[i].argvIndex = 1;
    pInfo->aConstraintUsage[i].omit = 1;
    pInfo->idxNum = 1;
    break;
  }
  pInfo->estimatedCost = 1;
  pInfo->estimatedRows = 1;
  return SQLITE_OK;
}

static int pvOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCursor){
  pragma_cursor *c = sqlite3_malloc(sizeof(*c));
  (void)pVtab;
  if( !c ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *ppCursor = &c->base;
  return SQLITE_OK;
}

static void cursor_reset(pragma_cursor *c){
  sqlite3_free(c->zValue);
  sqlite3_free(c->zSchema);
  c->zValue = c->zSchema = 0;
}

static int pvClose(sqlite3_vtab_cursor *pCur){
  cursor_reset((pragma_cursor*)pCur);
  sqlite3_free(pCur);
  return SQLITE_OK;
}

static int pvFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  pragma_cursor *c = (pragma_cursor*)pCur;
  pragma_vtab *p = (pragma_vtab*)pCur->pVtab;
  const char *zSchema = "main";
  char *az[4];
  int rc;
  (void)idxStr;
  cursor_reset(c);
  if( idxNum==1 && argc==1 ){
    zSchema = (const char*)sqlite3_value_text(argv[0]);
    if( !zSchema ) return SQLITE_OK;                 /* schema = NULL: no row */
  }
  c->zSchema = sqlite3_mprintf("%s", zSchema);
  if( !c->zSchema ) return SQLITE_NOMEM;
  az[0] = 0;
  az[1] = (char*)p->zPragma;
  az[2] = 0;
  az[3] = 0;
  rc = sqlite3_file_control(p->db, c->zSchema, SQLITE_FCNTL_PRAGMA, az);
  if( rc==SQLITE_OK ){
    c->zValue = az[0] ? az[0] : sqlite3_mprintf("");
    return c->zValue ? SQLITE_OK : SQLITE_NOMEM;
  }
  if( az[0] ){                                       /* waldio's own error */
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = az[0];
    return rc;
  }
  return SQLITE_OK;           /* not a waldio database, or no such schema */
}

static int pvNext(sqlite3_vtab_cursor *pCur){
  pragma_cursor *c = (pragma_cursor*)pCur;
  sqlite3_free(c->zValue);
  c->zValue = 0;
  return SQLITE_OK;
}

static int pvEof(sqlite3_vtab_cursor *pCur){
  return ((pragma_cursor*)pCur)->zValue==0;
}

static int pvColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  pragma_cursor *c = (pragma_cursor*)pCur;
  sqlite3_result_text(ctx, i==COL_VALUE ? c->zValue : c->zSchema, -1, SQLITE_TRANSIENT);
  return SQLITE_OK;
}

static int pvRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  (void)pCur;
  *pRowid = 1;
  return SQLITE_OK;
}

/* iVersion 0, no xCreate (eponymous only), read-only. */
static const sqlite3_module pragma_module = {
  .iVersion = 0,
  .xConnect = pvConnect, .xBestIndex = pvBestIndex, .xDisconnect = pvDisconnect,
  .xOpen = pvOpen, .xClose = pvClose, .xFilter = pvFilter, .xNext = pvNext,
  .xEof = pvEof, .xColumn = pvColumn, .xRowid = pvRowid,
};

int waldio_register_pragma_tables(sqlite3 *db){
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; i<sizeof(azPragma)/sizeof(azPragma[0]) && rc==SQLITE_OK; i++){
    char *zName = sqlite3_mprintf("pragma_%s", azPragma[i]);
    if( !zName ) return SQLITE_NOMEM;
    rc = sqlite3_create_module(db, zName, &pragma_module, (void*)azPragma[i]);
    sqlite3_free(zName);
  }
  return rc;
}
