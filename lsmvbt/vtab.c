/*
** vtab.c — LS-MVBT as a SQLite virtual-table module (the glue; the engine
** is lsmvbt.h and knows nothing of SQLite). Built as the loadable extension
** lsmvbt.so, entry point sqlite3_lsmvbt_init; it reaches SQLite only through
** the routine table of whichever SQLite loads it (Debian's 3.40, apsw's
** 3.54, the sqlite3 shell).
**
**   .load ./lsmvbt
**   CREATE VIRTUAL TABLE tblMyList USING lsmvbt(
**       id INTEGER PRIMARY KEY, Value TEXT, creation_date long,
**       sync=full, lazy_split=on);
**
** Arguments are column definitions, as in CREATE TABLE, and options
** name=value (table in DESIGN.md §7): sync=full|normal, lazy_split,
** reserve, lazy_gc, gc_period, embed_metadata, redistribute, page_size,
** cache_pages, prealloc, file. Without columns the table is
** (key INTEGER PRIMARY KEY, value). The column declared INTEGER PRIMARY KEY
** is the tree's key and equals the rowid; the other columns are stored as
** one record per row (the tree's value). AUTOINCREMENT is accepted and
** means max(key)+1, as without it. Constraints other than the key's
** uniqueness are not enforced (SQLite does not enforce them on virtual
** tables).
**
** The file is <database>-<table>.lsmvbt next to the database, or file=.
** CREATE makes a new, empty file (replacing a stale one); DROP deletes it.
**
** Transactions follow SQLite's: xBegin opens the engine's write
** transaction, xSync writes the dirty nodes and fdatasyncs (the commit
** point), xCommit ends it, xRollback discards it (or, after xSync, commits
** a compensating version); savepoints undo logically. Lookups by key (=),
** ranges (<, <=, >, >=) and ORDER BY key are served by the tree
** (xBestIndex/xFilter); a statement reads one version.
**
** SQL functions: lsmvbt_stats(table) and lsmvbt_options(table) return JSON;
** lsmvbt_check(table) returns 'ok' or the problem. A VFS named "lsmvbt"
** (a copy of the default VFS) exposes the engine's system-call table
** through xSetSystemCall: names "lsmvbt_open", "lsmvbt_pwrite",
** "lsmvbt_fdatasync", ... (crash recorders and fault injection).
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include "lsmvbt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct lv_table lv_table;
typedef struct lv_conn {
  sqlite3 *db;
  lv_table *tables;            /* open tables of this connection */
} lv_conn;

struct lv_table {
  sqlite3_vtab base;
  sqlite3 *db;
  lv_conn *conn;
  char *zName;
  char *zFile;
  int file_given;
  lsmvbt_db *eng;
  int ncol;
  int keycol;                  /* column that is the key, -1: only the rowid */
  lv_table *next;
};

typedef struct lv_cursor {
  sqlite3_vtab_cursor base;
  lsmvbt_cursor *c;
  int eof;
  int64_t hi;                  /* stop after this key */
} lv_cursor;

/* ---- Results and messages ---------------------------------------------------- */

static int set_err(lv_table *t, int rc, const char *zMsg){
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = sqlite3_mprintf("lsmvbt %s: %s", t->zName, zMsg);
  return rc;
}
static int eng_err(lv_table *t, int rc){
  if( rc==LSMVBT_NOTFOUND ) rc = SQLITE_ERROR;
  return set_err(t, rc, lsmvbt_errmsg(t->eng));
}

/* ---- Arguments ---------------------------------------------------------------- */

typedef struct lv_args {
  lsmvbt_options opt;
  char *zFile;
  sqlite3_str *decl;
  int ncol, keycol;
} lv_args;

static char *trim(const char *z){
  size_t n;
  while( *z==' ' || *z=='\t' || *z=='\n' || *z=='\r' ) z++;
  n = strlen(z);
  while( n>0 && (z[n-1]==' ' || z[n-1]=='\t' || z[n-1]=='\n' || z[n-1]=='\r') ) n--;
  return sqlite3_mprintf("%.*s", (int)n, z);
}

static char *dequote(const char *z){
  size_t n = strlen(z);
  if( n>=2 && (z[0]=='\'' || z[0]=='"') && z[n-1]==z[0] ){
    return sqlite3_mprintf("%.*s", (int)n-2, z+1);
  }
  return sqlite3_mprintf("%s", z);
}

static int parse_bool(const char *z, int *p){
  if( !strcasecmp(z, "on") || !strcasecmp(z, "1") || !strcasecmp(z, "yes") || !strcasecmp(z, "true") ){
    *p = 1; return 1;
  }
  if( !strcasecmp(z, "off") || !strcasecmp(z, "0") || !strcasecmp(z, "no") || !strcasecmp(z, "false") ){
    *p = 0; return 1;
  }
  return 0;
}

/* Bytes, with an optional K/M/G suffix. */
static int parse_size(const char *z, uint64_t *p){
  char *end;
  unsigned long long v;
  errno = 0;
  v = strtoull(z, &end, 10);
  if( errno || end==z ) return 0;
  if( *end=='k' || *end=='K' ){ v <<= 10; end++; }
  else if( *end=='m' || *end=='M' ){ v <<= 20; end++; }
  else if( *end=='g' || *end=='G' ){ v <<= 30; end++; }
  if( *end ) return 0;
  *p = v;
  return 1;
}

/* Is this argument name=value with a known name? Then apply it. *pErr set
** (and 1 returned) for a known name with a bad value. */
static int parse_option(lv_args *a, const char *zArg, char **pErr){
  const char *eq = strchr(zArg, '=');
  char *zName, *zVal;
  int b, known = 1;
  uint64_t n;
  if( eq==0 ) return 0;
  zName = sqlite3_mprintf("%.*s", (int)(eq-zArg), zArg);
  {
    char *t = trim(zName);
    sqlite3_free(zName);
    zName = t;
  }
  {
    char *t = trim(eq+1);
    zVal = dequote(t);
    sqlite3_free(t);
  }
#define BAD(what) *pErr = sqlite3_mprintf("option %s=%s: %s", zName, zVal, what)
  if( !strcasecmp(zName, "sync") ){
    if( !strcasecmp(zVal, "full") ) a->opt.sync = LSMVBT_SYNC_FULL;
    else if( !strcasecmp(zVal, "normal") ) a->opt.sync = LSMVBT_SYNC_NORMAL;
    else BAD("expected full or normal");
  }else if( !strcasecmp(zName, "lazy_split") ){
    if( parse_bool(zVal, &b) ) a->opt.lazy_split = b; else BAD("expected on or off");
  }else if( !strcasecmp(zName, "lazy_gc") ){
    if( parse_bool(zVal, &b) ) a->opt.lazy_gc = b; else BAD("expected on or off");
  }else if( !strcasecmp(zName, "embed_metadata") || !strcasecmp(zName, "metadata_embedding") ){
    if( parse_bool(zVal, &b) ) a->opt.embed_metadata = b; else BAD("expected on or off");
  }else if( !strcasecmp(zName, "redistribute") || !strcasecmp(zName, "sibling_redistribution") ){
    if( parse_bool(zVal, &b) ) a->opt.redistribute = b; else BAD("expected on or off");
  }else if( !strcasecmp(zName, "reserve") ){
    if( parse_bool(zVal, &b) ) a->opt.reserve_bytes = b ? -1 : 0;
    else if( parse_size(zVal, &n) && n<65536 ) a->opt.reserve_bytes = (int)n;
    else BAD("expected on, off or a number of bytes");
  }else if( !strcasecmp(zName, "gc_period") ){
    if( parse_size(zVal, &n) && n>0 && n<(1u<<30) ) a->opt.gc_period = (int)n; else BAD("expected a positive number");
  }else if( !strcasecmp(zName, "page_size") ){
    if( parse_size(zVal, &n) && n>=512 && n<=65536 && (n & (n-1))==0 ) a->opt.page_size = (uint32_t)n;
    else BAD("expected a power of two in 512..65536");
  }else if( !strcasecmp(zName, "cache_pages") ){
    if( parse_size(zVal, &n) && n>0 && n<(1u<<30) ) a->opt.cache_pages = (uint32_t)n; else BAD("expected a positive number");
  }else if( !strcasecmp(zName, "prealloc") ){
    if( parse_bool(zVal, &b) && b==0 ) a->opt.prealloc_bytes = 0;
    else if( parse_size(zVal, &n) ) a->opt.prealloc_bytes = n;
    else BAD("expected a size such as 1M, or off");
  }else if( !strcasecmp(zName, "file") ){
    sqlite3_free(a->zFile);
    a->zFile = sqlite3_mprintf("%s", zVal);
  }else{
    known = 0;
  }
#undef BAD
  sqlite3_free(zName);
  sqlite3_free(zVal);
  return known;
}

/* Does a column definition declare INTEGER PRIMARY KEY? Also strips
** AUTOINCREMENT (allowed on real tables only) from the declaration. */
static char *column_decl(const char *zDef, int *pIsKey){
  char *up = sqlite3_mprintf("%s", zDef), *p, *out;
  for(p=up; *p; p++) if( *p>='a' && *p<='z' ) *p = (char)(*p - 'a' + 'A');
  *pIsKey = strstr(up, " INTEGER ")!=0 && strstr(up, "PRIMARY")!=0 && strstr(up, "KEY")!=0;
  if( !*pIsKey ){
    /* "id INTEGER PRIMARY KEY" has INTEGER followed by a space; accept
    ** "id integer primary key" at the end too. */
    *pIsKey = strstr(up, " INTEGER")!=0 && strstr(up, "PRIMARY KEY")!=0;
  }
  p = strstr(up, "AUTOINCREMENT");
  if( p ){
    out = sqlite3_mprintf("%.*s%s", (int)(p-up), zDef, zDef + (p-up) + 13);
  }else{
    out = sqlite3_mprintf("%s", zDef);
  }
  sqlite3_free(up);
  return out;
}

static int parse_args(int argc, const char *const *argv, lv_args *a, char **pErr){
  int i;
  memset(a, 0, sizeof(*a));
  lsmvbt_options_default(&a->opt);
  a->keycol = -1;
  a->decl = sqlite3_str_new(0);
  sqlite3_str_appendall(a->decl, "CREATE TABLE x(");
  for(i=3; i<argc; i++){
    char *z = trim(argv[i]);
    if( *z==0 ){ sqlite3_free(z); continue; }
    if( !parse_option(a, z, pErr) ){
      int isKey;
      char *d = column_decl(z, &isKey);
      if( isKey ){
        if( a->keycol>=0 ){
          *pErr = sqlite3_mprintf("two INTEGER PRIMARY KEY columns");
        }
        a->keycol = a->ncol;
      }
      sqlite3_str_appendf(a->decl, "%s%s", a->ncol ? ", " : "", d);
      sqlite3_free(d);
      a->ncol++;
    }
    sqlite3_free(z);
    if( *pErr ) return SQLITE_ERROR;
  }
  if( a->ncol==0 ){
    sqlite3_str_appendall(a->decl, "key INTEGER PRIMARY KEY, value");
    a->ncol = 2;
    a->keycol = 0;
  }
  sqlite3_str_appendall(a->decl, ")");
  return SQLITE_OK;
}

/* ---- Rows: the non-key columns as one record ------------------------------------
** Per column: a type byte, then 0 bytes (NULL), 8 (INTEGER, REAL: little-
** endian), or a u32 length and the bytes (TEXT, BLOB). */

static void put_u64(sqlite3_str *s, uint64_t v){
  char b[8];
  int i;
  for(i=0; i<8; i++) b[i] = (char)(v>>(8*i));
  sqlite3_str_append(s, b, 8);
}
static uint64_t get_u64(const uint8_t *p){
  uint64_t v = 0;
  int i;
  for(i=7; i>=0; i--) v = (v<<8) | p[i];
  return v;
}

static void encode_row(lv_table *t, sqlite3_value **cols, sqlite3_str *s){
  int i;
  for(i=0; i<t->ncol; i++){
    sqlite3_value *v = cols[i];
    if( i==t->keycol ) continue;
    switch( sqlite3_value_type(v) ){
      case SQLITE_INTEGER:
        sqlite3_str_appendchar(s, 1, 1);
        put_u64(s, (uint64_t)sqlite3_value_int64(v));
        break;
      case SQLITE_FLOAT: {
        double d = sqlite3_value_double(v);
        uint64_t u;
        memcpy(&u, &d, 8);
        sqlite3_str_appendchar(s, 1, 2);
        put_u64(s, u);
        break;
      }
      case SQLITE_TEXT:
      case SQLITE_BLOB: {
        int isText = sqlite3_value_type(v)==SQLITE_TEXT;
        const void *p = isText ? (const void*)sqlite3_value_text(v) : sqlite3_value_blob(v);
        uint32_t n = (uint32_t)sqlite3_value_bytes(v), k;
        char b[4];
        sqlite3_str_appendchar(s, 1, isText ? 3 : 4);
        for(k=0; k<4; k++) b[k] = (char)(n>>(8*k));
        sqlite3_str_append(s, b, 4);
        if( n ) sqlite3_str_append(s, p, (int)n);
        break;
      }
      default:
        sqlite3_str_appendchar(s, 1, 0);
    }
  }
}

/* Result the value of column iCol (not the key) from a record. */
static int decode_column(lv_table *t, const uint8_t *p, uint32_t n, int iCol, sqlite3_context *ctx){
  const uint8_t *end = p + n;
  int i;
  for(i=0; i<t->ncol; i++){
    uint32_t len = 0;
    uint8_t type;
    if( i==t->keycol ) continue;
    if( p>=end ) break;                          /* a column added later: NULL */
    type = *p++;
    if( type==1 || type==2 ) len = 8;
    else if( type==3 || type==4 ){
      if( end-p<4 ) return SQLITE_CORRUPT_VTAB;
      len = (uint32_t)p[0] | (uint32_t)p[1]<<8 | (uint32_t)p[2]<<16 | (uint32_t)p[3]<<24;
      p += 4;
    }else if( type!=0 ) return SQLITE_CORRUPT_VTAB;
    if( (uint64_t)(end-p)<len ) return SQLITE_CORRUPT_VTAB;
    if( i==iCol ){
      switch( type ){
        case 0: sqlite3_result_null(ctx); break;
        case 1: sqlite3_result_int64(ctx, (sqlite3_int64)get_u64(p)); break;
        case 2: { double d; uint64_t u = get_u64(p); memcpy(&d, &u, 8); sqlite3_result_double(ctx, d); break; }
        case 3: sqlite3_result_text(ctx, (const char*)p, (int)len, SQLITE_TRANSIENT); break;
        case 4: sqlite3_result_blob(ctx, p, (int)len, SQLITE_TRANSIENT); break;
      }
      return SQLITE_OK;
    }
    p += len;
  }
  sqlite3_result_null(ctx);
  return SQLITE_OK;
}

/* ---- Create, connect, destroy ------------------------------------------------ */

static int lv_init(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                   sqlite3_vtab **ppVtab, char **pzErr, int create){
  lv_conn *conn = pAux;
  lv_table *t = 0;
  lv_args a;
  char *zDecl = 0, *zErr = 0;
  int rc;

  rc = parse_args(argc, argv, &a, &zErr);
  zDecl = sqlite3_str_finish(a.decl);
  if( rc ){
    *pzErr = sqlite3_mprintf("lsmvbt: %s", zErr);
    goto fail;
  }
  if( zDecl==0 ){ rc = SQLITE_NOMEM; goto fail; }
  t = sqlite3_malloc(sizeof(*t));
  if( t==0 ){ rc = SQLITE_NOMEM; goto fail; }
  memset(t, 0, sizeof(*t));
  t->db = db;
  t->conn = conn;
  t->ncol = a.ncol;
  t->keycol = a.keycol;
  t->zName = sqlite3_mprintf("%s", argv[2]);
  if( a.zFile ){
    t->zFile = sqlite3_mprintf("%s", a.zFile);
    t->file_given = 1;
  }else{
    const char *zDb = sqlite3_db_filename(db, argv[1]);
    if( zDb==0 || zDb[0]==0 ){
      *pzErr = sqlite3_mprintf("lsmvbt: database %s has no file: give the table one with file=PATH", argv[1]);
      rc = SQLITE_ERROR;
      goto fail;
    }
    t->zFile = sqlite3_mprintf("%s-%s.lsmvbt", zDb, argv[2]);
  }
  rc = sqlite3_declare_vtab(db, zDecl);
  if( rc ){
    *pzErr = sqlite3_mprintf("lsmvbt: bad column definitions: %s", zDecl);
    goto fail;
  }
  sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
  rc = lsmvbt_open(t->zFile, create ? LSMVBT_OPEN_TRUNCATE : 0, &a.opt, &t->eng);
  if( rc ){
    *pzErr = sqlite3_mprintf("lsmvbt: %s", t->eng ? lsmvbt_errmsg(t->eng) : "out of memory");
    if( rc==LSMVBT_NOTFOUND ) rc = SQLITE_CANTOPEN;
    goto fail;
  }
  t->next = conn->tables;
  conn->tables = t;
  *ppVtab = &t->base;
  sqlite3_free(zDecl);
  sqlite3_free(a.zFile);
  return SQLITE_OK;

fail:
  if( t ){
    lsmvbt_close(t->eng);
    sqlite3_free(t->zName);
    sqlite3_free(t->zFile);
    sqlite3_free(t);
  }
  sqlite3_free(zErr);
  sqlite3_free(zDecl);
  sqlite3_free(a.zFile);
  return rc;
}

static int lv_create(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                     sqlite3_vtab **ppVtab, char **pzErr){
  return lv_init(db, pAux, argc, argv, ppVtab, pzErr, 1);
}
static int lv_connect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                      sqlite3_vtab **ppVtab, char **pzErr){
  return lv_init(db, pAux, argc, argv, ppVtab, pzErr, 0);
}

/* The system-call table the table's engine uses (lsmvbt.h). */
static lsmvbt_io *table_io(lv_table *t){
  lsmvbt_io *io = lsmvbt_get_options(t->eng)->io;
  return io ? io : lsmvbt_io_default();
}

static void lv_free(lv_table *t){
  lv_table **pp = &t->conn->tables;
  while( *pp && *pp!=t ) pp = &(*pp)->next;
  if( *pp ) *pp = t->next;
  lsmvbt_close(t->eng);
  sqlite3_free(t->zName);
  sqlite3_free(t->zFile);
  sqlite3_free(t->base.zErrMsg);
  sqlite3_free(t);
}

static int lv_disconnect(sqlite3_vtab *pVtab){
  lv_free((lv_table*)pVtab);
  return SQLITE_OK;
}

static int lv_destroy(sqlite3_vtab *pVtab){
  lv_table *t = (lv_table*)pVtab;
  char *zFile = sqlite3_mprintf("%s", t->zFile);
  lsmvbt_io *io = table_io(t);
  lv_free(t);
  if( zFile ) lsmvbt_unlink(zFile, io);
  sqlite3_free(zFile);
  return SQLITE_OK;
}

static int lv_rename(sqlite3_vtab *pVtab, const char *zNew){
  lv_table *t = (lv_table*)pVtab;
  char *zFile;
  if( t->file_given ) return SQLITE_OK;
  /* The default file name follows the table name. */
  {
    size_t nOld = strlen(t->zFile), nSuffix = strlen(t->zName) + 8;
    if( nOld<nSuffix ) return SQLITE_OK;
    zFile = sqlite3_mprintf("%.*s-%s.lsmvbt", (int)(nOld-nSuffix), t->zFile, zNew);
  }
  if( zFile==0 ) return SQLITE_NOMEM;
  if( table_io(t)->xRename(t->zFile, zFile)!=0 ){
    set_err(t, SQLITE_IOERR, "cannot rename the table's file");
    sqlite3_free(zFile);
    return SQLITE_IOERR;
  }
  sqlite3_free(t->zFile);
  t->zFile = zFile;
  sqlite3_free(t->zName);
  t->zName = sqlite3_mprintf("%s", zNew);
  return SQLITE_OK;
}

/* ---- Planning and scanning ------------------------------------------------------ */

#define LV_EQ       1
#define LV_LO       2
#define LV_LO_GT    4
#define LV_HI       8
#define LV_HI_LT   16

static int lv_best_index(sqlite3_vtab *pVtab, sqlite3_index_info *info){
  lv_table *t = (lv_table*)pVtab;
  int i, eq = -1, lo = -1, hi = -1, idx = 0, n = 0;
  for(i=0; i<info->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if( !c->usable ) continue;
    if( c->iColumn!=-1 && c->iColumn!=t->keycol ) continue;
    switch( c->op ){
      case SQLITE_INDEX_CONSTRAINT_EQ: if( eq<0 ) eq = i; break;
      case SQLITE_INDEX_CONSTRAINT_GT:
      case SQLITE_INDEX_CONSTRAINT_GE: if( lo<0 ) lo = i; break;
      case SQLITE_INDEX_CONSTRAINT_LT:
      case SQLITE_INDEX_CONSTRAINT_LE: if( hi<0 ) hi = i; break;
    }
  }
  /* SQLite re-checks every constraint (omit stays 0): the conversions of
  ** non-integer arguments in xFilter only have to be conservative. */
  if( eq>=0 ){
    idx = LV_EQ;
    info->aConstraintUsage[eq].argvIndex = ++n;
    info->estimatedCost = 10.0;
    info->estimatedRows = 1;
    info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  }else{
    if( lo>=0 ){
      idx |= LV_LO;
      if( info->aConstraint[lo].op==SQLITE_INDEX_CONSTRAINT_GT ) idx |= LV_LO_GT;
      info->aConstraintUsage[lo].argvIndex = ++n;
    }
    if( hi>=0 ){
      idx |= LV_HI;
      if( info->aConstraint[hi].op==SQLITE_INDEX_CONSTRAINT_LT ) idx |= LV_HI_LT;
      info->aConstraintUsage[hi].argvIndex = ++n;
    }
    info->estimatedCost = n==2 ? 1000.0 : n==1 ? 50000.0 : 1000000.0;
    info->estimatedRows = n==2 ? 100 : n==1 ? 50000 : 1000000;
  }
  if( info->nOrderBy==1 && !info->aOrderBy[0].desc
   && (info->aOrderBy[0].iColumn==-1 || info->aOrderBy[0].iColumn==t->keycol) ){
    info->orderByConsumed = 1;
  }
  info->idxNum = idx;
  return SQLITE_OK;
}

static int lv_open(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  lv_cursor *c = sqlite3_malloc(sizeof(*c));
  (void)pVtab;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  c->eof = 1;
  *ppCur = &c->base;
  return SQLITE_OK;
}

static int lv_close(sqlite3_vtab_cursor *cur){
  lv_cursor *c = (lv_cursor*)cur;
  lsmvbt_cursor_close(c->c);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* Bounds from an argument of any type, conservatively (SQLite re-checks):
** returns 0 if no integer key can satisfy the constraint. */
static int arg_lower(sqlite3_value *v, int strict, int64_t *pLo){
  int type = sqlite3_value_numeric_type(v);
  if( type==SQLITE_INTEGER ){
    int64_t k = sqlite3_value_int64(v);
    if( strict ){
      if( k==INT64_MAX ) return 0;
      k++;
    }
    if( k>*pLo ) *pLo = k;
    return 1;
  }
  if( type==SQLITE_FLOAT ){
    double d = sqlite3_value_double(v);
    if( d!=d ) return 0;
    if( d>=9.2233720368547758e18 ) return 0;
    if( d>-9.2233720368547758e18 ){
      int64_t k = (int64_t)floor(d);
      if( k>*pLo ) *pLo = k;
    }
    return 1;
  }
  return 0;        /* NULL compares false; an integer is never > text or blob */
}

static int arg_upper(sqlite3_value *v, int strict, int64_t *pHi){
  int type = sqlite3_value_numeric_type(v);
  if( type==SQLITE_INTEGER ){
    int64_t k = sqlite3_value_int64(v);
    if( strict ){
      if( k==INT64_MIN ) return 0;
      k--;
    }
    if( k<*pHi ) *pHi = k;
    return 1;
  }
  if( type==SQLITE_FLOAT ){
    double d = sqlite3_value_double(v);
    if( d!=d ) return 0;
    if( d<=-9.2233720368547758e18 ) return 0;
    if( d<9.2233720368547758e18 ){
      int64_t k = (int64_t)ceil(d);
      if( k<*pHi ) *pHi = k;
    }
    return 1;
  }
  if( type==SQLITE_NULL ) return 0;
  return 1;        /* an integer is always < text or blob */
}

static int lv_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                     int argc, sqlite3_value **argv){
  lv_cursor *c = (lv_cursor*)cur;
  lv_table *t = (lv_table*)cur->pVtab;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  int ok = 1, i = 0, rc;
  (void)idxStr;
  (void)argc;
  if( idxNum & LV_EQ ){
    int64_t l2 = INT64_MIN, h2 = INT64_MAX;
    ok = arg_lower(argv[0], 0, &l2) && arg_upper(argv[0], 0, &h2);
    lo = l2;
    hi = h2;
  }else{
    if( idxNum & LV_LO ) ok = ok && arg_lower(argv[i++], (idxNum & LV_LO_GT)!=0, &lo);
    if( idxNum & LV_HI ) ok = ok && arg_upper(argv[i++], (idxNum & LV_HI_LT)!=0, &hi);
  }
  /* A new engine cursor per scan: it reads the version of this moment. */
  lsmvbt_cursor_close(c->c);
  c->c = 0;
  c->eof = 1;
  if( !ok || lo>hi ) return SQLITE_OK;
  rc = lsmvbt_cursor_open(t->eng, &c->c);
  if( rc==LSMVBT_OK ) rc = lsmvbt_cursor_seek(c->c, lo);
  if( rc ) return eng_err(t, rc);
  c->hi = hi;
  c->eof = lsmvbt_cursor_eof(c->c) || lsmvbt_cursor_key(c->c)>hi;
  return SQLITE_OK;
}

static int lv_next(sqlite3_vtab_cursor *cur){
  lv_cursor *c = (lv_cursor*)cur;
  int rc;
  if( c->eof ) return SQLITE_OK;
  rc = lsmvbt_cursor_next(c->c);
  if( rc ) return eng_err((lv_table*)cur->pVtab, rc);
  c->eof = lsmvbt_cursor_eof(c->c) || lsmvbt_cursor_key(c->c)>c->hi;
  return SQLITE_OK;
}

static int lv_eof(sqlite3_vtab_cursor *cur){
  return ((lv_cursor*)cur)->eof;
}

static int lv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int iCol){
  lv_cursor *c = (lv_cursor*)cur;
  lv_table *t = (lv_table*)cur->pVtab;
  const uint8_t *p;
  uint32_t n;
  if( c->eof ) return SQLITE_OK;
  if( iCol==t->keycol ){
    sqlite3_result_int64(ctx, lsmvbt_cursor_key(c->c));
    return SQLITE_OK;
  }
  p = lsmvbt_cursor_value(c->c, &n);
  return decode_column(t, p, n, iCol, ctx);
}

static int lv_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *pRowid){
  lv_cursor *c = (lv_cursor*)cur;
  *pRowid = c->eof ? 0 : lsmvbt_cursor_key(c->c);
  return SQLITE_OK;
}

/* ---- Writing ------------------------------------------------------------------ */

/* The integer a key column value stands for (SQLite's INTEGER PRIMARY KEY
** rules: integers, and reals or text that are exactly integers). */
static int key_of(sqlite3_value *v, int64_t *pKey){
  int type = sqlite3_value_numeric_type(v);
  if( type==SQLITE_INTEGER ){ *pKey = sqlite3_value_int64(v); return 1; }
  if( type==SQLITE_FLOAT ){
    double d = sqlite3_value_double(v);
    if( d>=-9.2233720368547758e18 && d<9.2233720368547758e18 && d==(double)(int64_t)d ){
      *pKey = (int64_t)d;
      return 1;
    }
  }
  return 0;
}

static int key_exists(lv_table *t, int64_t key, int *pExists){
  const void *v;
  uint32_t n;
  int rc = lsmvbt_get(t->eng, key, &v, &n);
  *pExists = rc==LSMVBT_OK;
  return (rc==LSMVBT_OK || rc==LSMVBT_NOTFOUND) ? LSMVBT_OK : rc;
}

static int constraint_failed(lv_table *t){
  char *z = sqlite3_mprintf("UNIQUE constraint failed: %s.%s", t->zName,
                            t->keycol>=0 ? "key" : "rowid");
  sqlite3_free(t->base.zErrMsg);
  t->base.zErrMsg = z;
  return SQLITE_CONSTRAINT;
}

static int lv_update(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv, sqlite_int64 *pRowid){
  lv_table *t = (lv_table*)pVtab;
  sqlite3_str *s;
  char *rec;
  int n, rc, exists, replace;
  int64_t key, old, kcol = 0;
  int has_rowid, has_kcol = 0;

  /* A table created inside this transaction joined it without xBegin. */
  if( !lsmvbt_in_txn(t->eng) && (rc = lsmvbt_begin(t->eng))!=LSMVBT_OK ) return eng_err(t, rc);
  if( argc==1 ){
    rc = lsmvbt_delete(t->eng, sqlite3_value_int64(argv[0]));
    if( rc==LSMVBT_NOTFOUND ) rc = LSMVBT_OK;
    return rc ? eng_err(t, rc) : SQLITE_OK;
  }
  if( argc!=2 + t->ncol ) return set_err(t, SQLITE_ERROR, "unexpected column count");
  has_rowid = sqlite3_value_type(argv[1])!=SQLITE_NULL;
  if( t->keycol>=0 && sqlite3_value_type(argv[2+t->keycol])!=SQLITE_NULL ){
    if( !key_of(argv[2+t->keycol], &kcol) ) return set_err(t, SQLITE_MISMATCH, "datatype mismatch");
    has_kcol = 1;
  }
  replace = sqlite3_vtab_on_conflict(t->db)==SQLITE_REPLACE;

  s = sqlite3_str_new(t->db);
  encode_row(t, argv+2, s);
  n = sqlite3_str_length(s);
  rec = sqlite3_str_finish(s);
  if( rec==0 && n>0 ) return SQLITE_NOMEM;
  if( (uint32_t)n > lsmvbt_max_value(t->eng) ){
    sqlite3_free(rec);
    return set_err(t, SQLITE_TOOBIG, "row too large for the page size (use page_size=)");
  }

  if( sqlite3_value_type(argv[0])==SQLITE_NULL ){
    /* INSERT: the key is the rowid, else the key column, else max+1. */
    if( has_rowid ){
      key = sqlite3_value_int64(argv[1]);
      if( has_kcol && kcol!=key ){ sqlite3_free(rec); return set_err(t, SQLITE_MISMATCH, "rowid and key differ"); }
    }else if( has_kcol ){
      key = kcol;
    }else{
      rc = lsmvbt_last_key(t->eng, &key);
      if( rc==LSMVBT_NOTFOUND ){ key = 0; rc = LSMVBT_OK; }
      if( rc ){ sqlite3_free(rec); return eng_err(t, rc); }
      if( key==INT64_MAX ){ sqlite3_free(rec); return set_err(t, SQLITE_FULL, "no key left above the largest"); }
      key++;
    }
    rc = lsmvbt_put(t->eng, key, rec, (uint32_t)n, replace ? LSMVBT_REPLACE : LSMVBT_INSERT);
    sqlite3_free(rec);
    if( rc==LSMVBT_CONSTRAINT ) return constraint_failed(t);
    if( rc ) return eng_err(t, rc);
    *pRowid = key;
    return SQLITE_OK;
  }

  /* UPDATE: the key changes if the rowid or the key column does. */
  old = sqlite3_value_int64(argv[0]);
  key = old;
  if( has_rowid && sqlite3_value_int64(argv[1])!=old ) key = sqlite3_value_int64(argv[1]);
  if( has_kcol && kcol!=old ){
    if( key!=old && key!=kcol ){ sqlite3_free(rec); return set_err(t, SQLITE_MISMATCH, "rowid and key differ"); }
    key = kcol;
  }
  if( key!=old ){
    rc = key_exists(t, key, &exists);
    if( rc==LSMVBT_OK && exists && !replace ){ sqlite3_free(rec); return constraint_failed(t); }
    if( rc==LSMVBT_OK ) rc = lsmvbt_delete(t->eng, old);
    if( rc==LSMVBT_NOTFOUND ) rc = LSMVBT_OK;
    if( rc ){ sqlite3_free(rec); return eng_err(t, rc); }
  }
  rc = lsmvbt_put(t->eng, key, rec, (uint32_t)n, LSMVBT_REPLACE);
  sqlite3_free(rec);
  return rc ? eng_err(t, rc) : SQLITE_OK;
}

/* ---- Transactions ----------------------------------------------------------------- */

/* SQLite puts a table it just created into the transaction without xBegin:
** its first xUpdate begins the engine transaction (lv_update); until then
** xSync/xCommit/xRollback find no engine transaction, and do nothing. */
static int lv_begin(sqlite3_vtab *pVtab){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_begin(t->eng);
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_sync(sqlite3_vtab *pVtab){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_sync(t->eng) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_commit(sqlite3_vtab *pVtab){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_commit(t->eng) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_rollback(sqlite3_vtab *pVtab){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_rollback(t->eng) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_savepoint(sqlite3_vtab *pVtab, int i){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_savepoint(t->eng, i) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_release(sqlite3_vtab *pVtab, int i){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_release(t->eng, i) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}
static int lv_rollback_to(sqlite3_vtab *pVtab, int i){
  lv_table *t = (lv_table*)pVtab;
  int rc = lsmvbt_in_txn(t->eng) ? lsmvbt_rollback_to(t->eng, i) : LSMVBT_OK;
  return rc ? eng_err(t, rc) : SQLITE_OK;
}

static sqlite3_module lv_module = {
  2,                 /* iVersion: savepoints */
  lv_create, lv_connect, lv_best_index, lv_disconnect, lv_destroy,
  lv_open, lv_close, lv_filter, lv_next, lv_eof, lv_column, lv_rowid,
  lv_update, lv_begin, lv_sync, lv_commit, lv_rollback,
  0,                 /* xFindFunction */
  lv_rename, lv_savepoint, lv_release, lv_rollback_to,
  0                  /* xShadowName */
};

/* ---- SQL functions ---------------------------------------------------------------- */

static lv_table *find_table(sqlite3_context *ctx, sqlite3_value *v){
  lv_conn *conn = sqlite3_user_data(ctx);
  const char *z = (const char*)sqlite3_value_text(v);
  lv_table *t;
  if( z ){
    for(t=conn->tables; t; t=t->next) if( sqlite3_stricmp(t->zName, z)==0 ) return t;
  }
  {
    char *msg = sqlite3_mprintf("lsmvbt: no open lsmvbt table named %s (read it once first)",
                                z ? z : "NULL");
    sqlite3_result_error(ctx, msg, -1);
    sqlite3_free(msg);
  }
  return 0;
}

static void fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  lv_table *t = find_table(ctx, argv[0]);
  lsmvbt_stats s;
  char *z;
  (void)argc;
  if( t==0 ) return;
  lsmvbt_get_stats(t->eng, &s);
#define U(x) (unsigned long long)(x)
  z = sqlite3_mprintf(
    "{\"version\":%llu,\"page_size\":%u,\"npages\":%u,\"free_pages\":%u,\"height\":%u,"
    "\"commits\":%llu,\"empty_commits\":%llu,\"rollbacks\":%llu,\"compensations\":%llu,"
    "\"pages_written\":%llu,\"bytes_written\":%llu,\"syncs\":%llu,"
    "\"commit_pages\":[%llu,%llu,%llu,%llu,%llu],\"last_commit_pages\":%llu,"
    "\"page_reads\":%llu,\"cache_hits\":%llu,\"prealloc_bytes\":%llu,"
    "\"splits_lazy\":%llu,\"splits_legacy\":%llu,\"splits_copy\":%llu,\"version_splits\":%llu,"
    "\"root_splits\":%llu,\"redistributions\":%llu,\"reserve_uses\":%llu,"
    "\"gc_cells\":%llu,\"gc_passes\":%llu,\"pages_reclaimed\":%llu,"
    "\"recovery_slots_scanned\":%llu,\"recovery_slots_cleaned\":%llu,\"recovery_usec\":%llu}",
    U(s.version), s.page_size, s.npages, s.free_pages, s.height,
    U(s.commits), U(s.empty_commits), U(s.rollbacks), U(s.compensations),
    U(s.pages_written), U(s.bytes_written), U(s.syncs),
    U(s.commit_pages[0]), U(s.commit_pages[1]), U(s.commit_pages[2]), U(s.commit_pages[3]),
    U(s.commit_pages[4]), U(s.last_commit_pages),
    U(s.page_reads), U(s.cache_hits), U(s.prealloc_bytes),
    U(s.splits_lazy), U(s.splits_legacy), U(s.splits_copy), U(s.version_splits),
    U(s.root_splits), U(s.redistributions), U(s.reserve_uses),
    U(s.gc_cells), U(s.gc_passes), U(s.pages_reclaimed),
    U(s.recovery_slots_scanned), U(s.recovery_slots_cleaned), U(s.recovery_usec));
#undef U
  sqlite3_result_text(ctx, z, -1, sqlite3_free);
}

static void fn_options(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  lv_table *t = find_table(ctx, argv[0]);
  const lsmvbt_options *o;
  char *z;
  (void)argc;
  if( t==0 ) return;
  o = lsmvbt_get_options(t->eng);
  z = sqlite3_mprintf(
    "{\"file\":\"%w\",\"sync\":\"%s\",\"lazy_split\":%d,\"reserve\":%d,\"lazy_gc\":%d,"
    "\"gc_period\":%d,\"embed_metadata\":%d,\"redistribute\":%d,\"page_size\":%u,"
    "\"cache_pages\":%u,\"prealloc\":%llu,\"max_value\":%u}",
    t->zFile, o->sync==LSMVBT_SYNC_FULL ? "full" : "normal", o->lazy_split, o->reserve_bytes,
    o->lazy_gc, o->gc_period, o->embed_metadata, o->redistribute, o->page_size,
    o->cache_pages, (unsigned long long)o->prealloc_bytes, lsmvbt_max_value(t->eng));
  sqlite3_result_text(ctx, z, -1, sqlite3_free);
}

static void fn_check(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  lv_table *t = find_table(ctx, argv[0]);
  (void)argc;
  if( t==0 ) return;
  if( lsmvbt_check(t->eng)==LSMVBT_OK ) sqlite3_result_text(ctx, "ok", -1, SQLITE_STATIC);
  else sqlite3_result_text(ctx, lsmvbt_errmsg(t->eng), -1, SQLITE_TRANSIENT);
}

/* ---- The system-call VFS ------------------------------------------------------------
** "lsmvbt": a copy of the default VFS whose xSetSystemCall family also
** reaches the engine's table (names "lsmvbt_<call>"); other names go to the
** VFS it copies. */

static sqlite3_vfs lv_vfs;
static sqlite3_vfs *lv_base;

static int vfs_set(sqlite3_vfs *p, const char *zName, sqlite3_syscall_ptr fn){
  (void)p;
  if( zName && strncmp(zName, "lsmvbt_", 7)==0 ){
    return lsmvbt_io_set(lsmvbt_io_default(), zName+7, (lsmvbt_io_fn)fn)==LSMVBT_OK
           ? SQLITE_OK : SQLITE_NOTFOUND;
  }
  if( zName==0 ){
    const char *z;
    for(z=lsmvbt_io_next(0); z; z=lsmvbt_io_next(z)) lsmvbt_io_set(lsmvbt_io_default(), z, 0);
  }
  return lv_base->xSetSystemCall ? lv_base->xSetSystemCall(lv_base, zName, fn) : SQLITE_OK;
}
static sqlite3_syscall_ptr vfs_get(sqlite3_vfs *p, const char *zName){
  (void)p;
  if( zName && strncmp(zName, "lsmvbt_", 7)==0 ){
    return (sqlite3_syscall_ptr)lsmvbt_io_get(lsmvbt_io_default(), zName+7);
  }
  return lv_base->xGetSystemCall ? lv_base->xGetSystemCall(lv_base, zName) : 0;
}
static const char *vfs_next(sqlite3_vfs *p, const char *zName){
  static char names[16][24];
  static int init;
  const char *z;
  int i = 0;
  (void)p;
  if( !init ){
    for(z=lsmvbt_io_next(0); z && i<16; z=lsmvbt_io_next(z), i++) snprintf(names[i], 24, "lsmvbt_%s", z);
    init = 1;
  }
  if( zName==0 ) return names[0];
  if( strncmp(zName, "lsmvbt_", 7)==0 ){
    z = lsmvbt_io_next(zName+7);
    if( z ){
      for(i=0; i<16; i++) if( strcmp(names[i]+7, z)==0 ) return names[i];
    }
    return lv_base->xNextSystemCall ? lv_base->xNextSystemCall(lv_base, 0) : 0;
  }
  return lv_base->xNextSystemCall ? lv_base->xNextSystemCall(lv_base, zName) : 0;
}

static int register_vfs(void){
  if( sqlite3_vfs_find("lsmvbt") ) return SQLITE_OK;
  lv_base = sqlite3_vfs_find(0);
  if( lv_base==0 ) return SQLITE_ERROR;
  lv_vfs = *lv_base;
  lv_vfs.pNext = 0;
  lv_vfs.zName = "lsmvbt";
  if( lv_vfs.iVersion>=3 ){
    lv_vfs.xSetSystemCall = vfs_set;
    lv_vfs.xGetSystemCall = vfs_get;
    lv_vfs.xNextSystemCall = vfs_next;
  }
  return sqlite3_vfs_register(&lv_vfs, 0);
}

/* ---- Entry point ------------------------------------------------------------------ */

__attribute__((visibility("default")))
int sqlite3_lsmvbt_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi){
  lv_conn *conn;
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  conn = sqlite3_malloc(sizeof(*conn));
  if( conn==0 ) return SQLITE_NOMEM;
  memset(conn, 0, sizeof(*conn));
  conn->db = db;
  rc = sqlite3_create_module_v2(db, "lsmvbt", &lv_module, conn, sqlite3_free);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "lsmvbt_stats", 1, SQLITE_UTF8, conn, fn_stats, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "lsmvbt_options", 1, SQLITE_UTF8, conn, fn_options, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "lsmvbt_check", 1, SQLITE_UTF8, conn, fn_check, 0, 0);
  if( rc==SQLITE_OK ) rc = register_vfs();
  if( rc ){
    *pzErrMsg = sqlite3_mprintf("lsmvbt: cannot register the module (%d)", rc);
    return rc;
  }
  /* The VFS outlives this connection: the library must stay loaded. */
  return SQLITE_OK_LOAD_PERMANENTLY;
}
