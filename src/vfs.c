/*
** vfs.c — registering waldio, routing xOpen, and per-connection setup.
**
** waldio stacks on the VFS that is the default when it registers (normally
** "unix"). xOpen routes by the flags SQLite passes:
**   SQLITE_OPEN_MAIN_DB  -> waldio_db_file (db_file.c), lower file inside it
**   SQLITE_OPEN_WAL      -> waldio_wal_file (wal_file.c), our own log I/O
**                           (in the standard layout where the file system
**                           has no direct I/O: the lower VFS's own WAL)
**   anything else        -> opened by the lower VFS directly on SQLite's
**                           file object, so journals, temp files and the
**                           like cost nothing (as in ext/misc/cksumvfs.c)
** Every other VFS method is forwarded. xSetSystemCall knows the names of
** waldio's own system calls ("waldio_pwrite", ...; syscalls.h) and passes
** the rest to the lower VFS.
**
** Per connection (an auto-extension run by sqlite3_open): a database that
** is still empty and asked for header embedding gets 24 reserved bytes per
** page before its first page is written (below), and the SQL function
** waldio_last_error() and the tables pragma_waldio... (pragma_vtab.c) are
** registered.
*/
#include "vfs_internal.h"
#include "errors.h"
#include "options.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RESERVE_FOR_EMBED 24

static waldio_vfs *V(sqlite3_vfs *p){ return (waldio_vfs*)p->pAppData; }
static sqlite3_vfs *LOWER(sqlite3_vfs *p){ return V(p)->pLower; }

static int vOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile,
                 int flags, int *pOutFlags){
  waldio_vfs *v = V(pVfs);
  if( flags & SQLITE_OPEN_MAIN_DB ){
    return waldio_db_open(v, zName, (waldio_db_file*)pFile, flags, pOutFlags);
  }
  if( flags & SQLITE_OPEN_WAL ){
    return waldio_wal_open(v, zName, (waldio_wal_file*)pFile, flags, pOutFlags);
  }
  return v->pLower->xOpen(v->pLower, zName, pFile, flags, pOutFlags);
}

static int vDelete(sqlite3_vfs *p, const char *z, int syncDir){
  return LOWER(p)->xDelete(LOWER(p), z, syncDir);
}
static int vAccess(sqlite3_vfs *p, const char *z, int flags, int *pOut){
  return LOWER(p)->xAccess(LOWER(p), z, flags, pOut);
}
static int vFullPathname(sqlite3_vfs *p, const char *z, int n, char *zOut){
  return LOWER(p)->xFullPathname(LOWER(p), z, n, zOut);
}
static void *vDlOpen(sqlite3_vfs *p, const char *z){
  return LOWER(p)->xDlOpen(LOWER(p), z);
}
static void vDlError(sqlite3_vfs *p, int n, char *z){
  LOWER(p)->xDlError(LOWER(p), n, z);
}
static void (*vDlSym(sqlite3_vfs *p, void *h, const char *z))(void){
  return LOWER(p)->xDlSym(LOWER(p), h, z);
}
static void vDlClose(sqlite3_vfs *p, void *h){ LOWER(p)->xDlClose(LOWER(p), h); }
static int vRandomness(sqlite3_vfs *p, int n, char *z){
  return LOWER(p)->xRandomness(LOWER(p), n, z);
}
static int vSleep(sqlite3_vfs *p, int us){
  if( waldio_busy_sleep(V(p), us) ) return us;
  return LOWER(p)->xSleep(LOWER(p), us);
}
static int vCurrentTime(sqlite3_vfs *p, double *pOut){
  return LOWER(p)->xCurrentTime(LOWER(p), pOut);
}
static int vGetLastError(sqlite3_vfs *p, int n, char *z){
  return LOWER(p)->xGetLastError ? LOWER(p)->xGetLastError(LOWER(p), n, z) : 0;
}
static int vCurrentTimeInt64(sqlite3_vfs *p, sqlite3_int64 *pOut){
  return LOWER(p)->xCurrentTimeInt64(LOWER(p), pOut);
}

static int vSetSystemCall(sqlite3_vfs *p, const char *z, sqlite3_syscall_ptr f){
  sqlite3_vfs *pLower = LOWER(p);
  int rcLower = SQLITE_NOTFOUND;
  if( z==0 ){
    waldio_syscalls_default(&V(p)->sys);
  }else if( waldio_syscall_set(&V(p)->sys, z, f) ){
    return SQLITE_OK;
  }
  if( pLower->iVersion>=3 && pLower->xSetSystemCall ){
    rcLower = pLower->xSetSystemCall(pLower, z, f);
  }
  return z==0 ? SQLITE_OK : rcLower;
}

static sqlite3_syscall_ptr vGetSystemCall(sqlite3_vfs *p, const char *z){
  sqlite3_vfs *pLower = LOWER(p);
  int found;
  sqlite3_syscall_ptr f = waldio_syscall_get(&V(p)->sys, z, &found);
  if( found ) return f;
  if( pLower->iVersion>=3 && pLower->xGetSystemCall ){
    return pLower->xGetSystemCall(pLower, z);
  }
  return 0;
}

static const char *vNextSystemCall(sqlite3_vfs *p, const char *z){
  sqlite3_vfs *pLower = LOWER(p);
  int found = 0;
  if( z ) waldio_syscall_get(&V(p)->sys, z, &found);
  if( !found && pLower->iVersion>=3 && pLower->xNextSystemCall ){
    const char *zNext = pLower->xNextSystemCall(pLower, z);
    if( zNext ) return zNext;
    return waldio_syscall_next(0);
  }
  return waldio_syscall_next(z);
}

static const sqlite3_vfs vfs_template = {
  3, 0, 0, 0, 0, 0,
  vOpen, vDelete, vAccess, vFullPathname, vDlOpen, vDlError, vDlSym,
  vDlClose, vRandomness, vSleep, vCurrentTime, vGetLastError,
  vCurrentTimeInt64, vSetSystemCall, vGetSystemCall, vNextSystemCall
};

static int is_waldio_vfs(const sqlite3_vfs *p){
  return p && p->xOpen==vOpen;
}

/* -------------------------------------------------- per-connection setup */

static void fn_last_error(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  char zMsg[1024];
  (void)argc; (void)argv;
  waldio_last_error(zMsg, sizeof(zMsg));
  sqlite3_result_text(ctx, zMsg, -1, SQLITE_TRANSIENT);
}

/* ------------------------------------------- the reserve of a new database
**
** Header embedding stores each frame's 24-byte header in the last bytes of
** its page: a new database that will use it needs 24 reserved bytes per
** page, and one that will not (pages smaller than a block: the auto layout
** pads) must not get them -- they only cost space and change SQLite's page
** counts against stock. SQLite reads the reserve when it writes page 1 of
** an empty database (btree.c newDatabase), and SQLITE_FCNTL_RESERVE_BYTES
** can raise it before that but never lower it again. So the decision waits
** for the last moment the page size may still change:
**   - at open the connection remembers its database (main only) and the
**     page size SQLite would give it: SQLITE_DEFAULT_PAGE_SIZE (pager.c
**     raises it to the sector size only for files without
**     POWERSAFE_OVERWRITE, which waldio's database files always report);
**   - PRAGMA page_size=N on the empty database updates that page size
**     (waldio_reserve_note_page_size, from SQLITE_FCNTL_PRAGMA);
**   - each time the connection takes its SHARED lock on the still empty
**     file (waldio_reserve_decide, from xLock), which every transaction
**     does before SQLite sizes its cells: if the page size fits embedding,
**     24 bytes are reserved now, for good.
** A page size changed after a read of the still empty database comes too
** late to drop the reserve; the auto layout then pads, as for any database
** without a usable reserve. ATTACHed databases get no reserve (they pad).
** The connection that takes the lock is the one SQLite names through
** SQLITE_FCNTL_PDB (the B-tree's current user: with a shared cache, not
** necessarily the one that opened the file). */

static void reserve_remember(sqlite3 *db){
  sqlite3_file *pTop = 0;
  waldio_db_file *p;
  sqlite3_int64 size = -1;
  if( sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &pTop)
   || (p = waldio_db_of(pTop))==0
   || p->opts.layout!=WALDIO_LAYOUT_EMBED ){
    return;
  }
  if( p->reserveState!=RESERVE_NONE || !p->ppBtreeDb ) return;  /* shared cache */
  if( ORIGFILE(p)->pMethods->xFileSize(ORIGFILE(p), &size)==SQLITE_OK && size==0 ){
    p->reservePage = p->pVfs->defaultPageSize;
    p->reserveState = RESERVE_PENDING;
  }
}

void waldio_reserve_note_page_size(waldio_db_file *p, const char *zArg){
  long n = zArg ? strtol(zArg, 0, 10) : 0;
  /* As btree.c accepts it: a power of two in 512..65536. */
  if( p->reserveState==RESERVE_PENDING && n>=512 && n<=65536 && (n & (n-1))==0 ){
    p->reservePage = (u32)n;
  }
}

void waldio_reserve_decide(waldio_db_file *p){
  const char *zWhy;
  sqlite3_int64 size = -1;
  int n = RESERVE_FOR_EMBED;
  if( p->reserveState!=RESERVE_PENDING ) return;
  if( ORIGFILE(p)->pMethods->xFileSize(ORIGFILE(p), &size)!=SQLITE_OK || size>0 ){
    p->reserveState = RESERVE_NEVER;         /* created meanwhile: its own */
    return;
  }
  if( wf_choose_layout((u32)p->opts.layout, waldio_block_size(p->zName),
                       p->reservePage, RESERVE_FOR_EMBED, &zWhy)==WALDIO_LAYOUT_EMBED ){
    p->reserveState = RESERVE_DONE;
    /* Re-entrant, from inside the pager's lock request, on the connection
    ** now using the B-tree (it holds that connection's mutex): RESERVE_BYTES
    ** with page size 0 only sets the pager's reserve, no I/O and no
    ** reallocation (btree.c sqlite3BtreeSetPageSize); lockBtree sizes cells
    ** after this lock returns, newDatabase writes the reserve into page 1. */
    sqlite3_file_control(*p->ppBtreeDb, "main", SQLITE_FCNTL_RESERVE_BYTES, &n);
  }
}

u32 waldio_block_size(const char *zDb){
  struct stat st;
  return (zDb && stat(zDb, &st)==0 && st.st_blksize>4096) ? (u32)st.st_blksize : 4096;
}

static int connection_setup(sqlite3 *db, char **pzErr, const void *pApi){
  int rc;
  (void)pzErr; (void)pApi;
  reserve_remember(db);
  rc = sqlite3_create_function(db, "waldio_last_error", 0,
      SQLITE_UTF8|SQLITE_INNOCUOUS, 0, fn_last_error, 0, 0);
  return rc ? rc : waldio_register_pragma_tables(db);
}

int waldio_connection_setup(sqlite3 *db){ return connection_setup(db, 0, 0); }

/* -------------------------------------------------------- registration */

/* The synchronous level SQLite applies to a WAL database whose application
** never set one: SQLITE_DEFAULT_WAL_SYNCHRONOUS, which defaults to
** SQLITE_DEFAULT_SYNCHRONOUS, which defaults to FULL (sqliteInt.h). */
static int sync_level_default(void){
  static const char *azOpt[] = { "DEFAULT_WAL_SYNCHRONOUS=", "DEFAULT_SYNCHRONOUS=" };
  int i, level;
  for(i=0; i<2; i++){
    for(level=0; level<=3; level++){
      char z[48];
      sqlite3_snprintf(sizeof(z), z, "%s%d", azOpt[i], level);
      if( sqlite3_compileoption_used(z) ) return level;
    }
  }
  return 2;
}

/* A numeric compile-time option of this SQLite ("DEFAULT_PAGE_SIZE=" ...),
** or dflt if the build does not list it. What a connection that never runs
** the matching PRAGMA has: journal_size_limit (-1 unless a build sets it),
** the page size of a new database (4096). */
static long long compile_option(const char *zOpt, long long dflt){
  size_t n = strlen(zOpt);
  const char *z;
  int i;
  for(i=0; (z = sqlite3_compileoption_get(i))!=0; i++){
    if( strncmp(z, zOpt, n)==0 ) return strtoll(z + n, 0, 0);
  }
  return dflt;
}

static int check_options(const waldio_options *o){
  if( o->layout<WALDIO_LAYOUT_AUTO || o->layout>WALDIO_LAYOUT_STANDARD
   || o->sync<WALDIO_SYNC_AUTO || o->sync>WALDIO_SYNC_NS
   || o->io<WALDIO_IO_DIRECT || o->io>WALDIO_IO_BUFFERED
   || o->prealloc_bytes<WALDIO_MIN_PREALLOC || o->cache_bytes<0
   || o->flush_ms<1 || o->flush_ms>WALDIO_MAX_FLUSH_MS
   || o->group<WALDIO_GROUP_OFF || o->group>WALDIO_GROUP_AUTO
   || o->group_bytes<4096 || o->group_bytes>WALDIO_MAX_GROUP_BYTES
   || o->group_ms<1 || o->group_ms>WALDIO_MAX_FLUSH_MS ){
    return waldio_error(SQLITE_MISUSE, "waldio_register: an option is out of"
                        " range (see waldio.h)");
  }
  return SQLITE_OK;
}

int waldio_register(const char *zName, int makeDefault,
                    const waldio_options *pOpts){
  sqlite3_vfs *pExisting, *pLower;
  waldio_vfs *v;
  waldio_options o;
  int rc;

  if( sqlite3_libversion_number()<3032000 ){
    return waldio_error(SQLITE_ERROR, "waldio needs SQLite 3.32.0 or later;"
                        " this is %s", sqlite3_libversion());
  }
  if( !zName ) zName = WALDIO_VFS_NAME;
  if( strlen(zName)>=sizeof(v->zName) ){
    return waldio_error(SQLITE_MISUSE, "waldio_register: VFS name too long");
  }
  if( pOpts ){ o = *pOpts; }else{ waldio_options_default(&o); }
  rc = check_options(&o);
  if( rc ) return rc;
  pExisting = sqlite3_vfs_find(zName);
  if( pExisting ){
    if( !is_waldio_vfs(pExisting) ){
      return waldio_error(SQLITE_ERROR, "a VFS named \"%s\" exists and is not"
                          " waldio", zName);
    }
    V(pExisting)->opts = o;
    /* Registering again after sqlite3_shutdown() + sqlite3_initialize()
    ** (which drop auto-extensions and make "unix" the default again) must
    ** restore both; sqlite3_auto_extension() ignores a duplicate. */
    rc = makeDefault ? sqlite3_vfs_register(pExisting, 1) : SQLITE_OK;
    if( rc==SQLITE_OK ) rc = sqlite3_auto_extension((void(*)(void))connection_setup);
    return rc;
  }
  pLower = sqlite3_vfs_find(0);
  if( is_waldio_vfs(pLower) ) pLower = V(pLower)->pLower;
  if( !pLower ) return waldio_error(SQLITE_ERROR, "no default VFS to stack on");

  v = calloc(1, sizeof(*v));
  if( !v ) return SQLITE_NOMEM;
  v->base = vfs_template;
  v->base.iVersion = pLower->iVersion<3 ? pLower->iVersion : 3;
  v->base.szOsFile = (int)sizeof(waldio_db_file) + pLower->szOsFile;
  if( v->base.szOsFile<(int)sizeof(waldio_wal_file) ){
    v->base.szOsFile = (int)sizeof(waldio_wal_file);
  }
  v->base.mxPathname = pLower->mxPathname;
  v->base.zName = v->zName;
  v->base.pAppData = v;
  memcpy(v->zName, zName, strlen(zName) + 1);
  v->pLower = pLower;
  v->opts = o;
  v->defaultSyncLevel = sync_level_default();
  v->defaultJournalSizeLimit = compile_option("DEFAULT_JOURNAL_SIZE_LIMIT=", -1);
  v->defaultPageSize = (u32)compile_option("DEFAULT_PAGE_SIZE=", 4096);
  waldio_syscalls_default(&v->sys);
  rc = sqlite3_vfs_register(&v->base, makeDefault);
  if( rc==SQLITE_OK ){
    rc = sqlite3_auto_extension((void(*)(void))connection_setup);
  }
  if( rc ){
    sqlite3_vfs_unregister(&v->base);
    free(v);
    return waldio_error(rc, "cannot register the VFS \"%s\"", zName);
  }
  pthread_mutex_init(&v->dbMutex, 0);
  log_registry_init(&v->registry);
  return SQLITE_OK;
}

int waldio_unregister(const char *zName){
  sqlite3_vfs *p = sqlite3_vfs_find(zName ? zName : WALDIO_VFS_NAME);
  waldio_vfs *v;
  if( !is_waldio_vfs(p) ){
    return waldio_error(SQLITE_ERROR, "no waldio VFS named \"%s\"",
                        zName ? zName : WALDIO_VFS_NAME);
  }
  v = V(p);
  pthread_mutex_lock(&v->registry.mutex);
  if( v->registry.pList ){
    pthread_mutex_unlock(&v->registry.mutex);
    return waldio_error(SQLITE_BUSY, "VFS \"%s\" still has open logs", v->zName);
  }
  pthread_mutex_unlock(&v->registry.mutex);
  sqlite3_vfs_unregister(p);
  log_registry_remove(&v->registry);
  pthread_mutex_destroy(&v->dbMutex);
  free(v);
  return SQLITE_OK;
}

/* ---------------------------------------------------------------- detach */

int waldio_detach(const char *zDbPath, const char *zVfs){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  const char *zVfsName = zVfs ? zVfs : WALDIO_VFS_NAME;
  int rc;

  if( !is_waldio_vfs(sqlite3_vfs_find(zVfsName)) ){
    return waldio_error(SQLITE_ERROR, "no waldio VFS named \"%s\"", zVfsName);
  }
  rc = sqlite3_open_v2(zDbPath, &db, SQLITE_OPEN_READWRITE, zVfsName);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=DELETE", -1, &pStmt, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(pStmt);
    if( rc==SQLITE_ROW ){
      const char *zMode = (const char*)sqlite3_column_text(pStmt, 0);
      rc = (zMode && strcmp(zMode, "delete")==0) ? SQLITE_OK : SQLITE_BUSY;
    }
  }
  if( rc ){
    waldio_error(rc, "cannot detach %s: %s", zDbPath,
                 rc==SQLITE_BUSY ? "other connections have it open"
                                 : (db ? sqlite3_errmsg(db) : "out of memory"));
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return rc;
}
