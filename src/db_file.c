/*
** db_file.c — the wrapper around each main database file.
**
** Database pages are never changed: every read and write passes through to
** the lower VFS (ORIGFILE). The wrapper exists for what SQLite asks the
** *database* file about the WAL:
**
**   xDeviceCharacteristics  never reports SEQUENTIAL, and for the slotted
**                           layouts always POWERSAFE_OVERWRITE: SQLite then
**                           never pads frames to sector boundaries (padding
**                           is computed in logical offsets, meaningless in
**                           their physical layout). The standard layout
**                           reports the device as it is: SQLite pads where
**                           it would pad without waldio.
**   SQLITE_FCNTL_PERSIST_WAL  answers "keep the WAL" so the preallocated
**                           log survives close; answers "delete" while the
**                           application leaves WAL mode, so that
**                           journal_mode=DELETE detaches the database (a
**                           refused switch -- the exclusive lock it needs
**                           was not granted, or the connection goes on
**                           writing the WAL -- keeps the log).
**   SQLITE_FCNTL_PRAGMA     waldio's PRAGMAs (pragmas.c), and notes
**                           PRAGMA synchronous / journal_mode as set.
**   xShm*                   waldio's wal-index is not "<db>-shm" but
**                           "<db>-wal-shm": the shm methods go to a second
**                           lower-VFS file object opened on the log's path,
**                           so the unix VFS's own shared-memory code serves
**                           it. A stock SQLite never shares it, and so always
**                           runs recovery, meets the guard header and stops
**                           (wal_format.c F4), instead of reading the physical
**                           log through a waldio wal-index.
**   xShmMap                 remembers wal-index region 0 for the cache epoch.
**   xShmLock                notes when this connection holds WAL_WRITE_LOCK,
**                           and its read lock (given back early by a
**                           durable commit that waits for its flush).
**   xShmBarrier             SQLite calls it between writing the two copies
**                           of the wal-index header, i.e. while publishing a
**                           commit: the held frame header is written first
**                           (wal_file.c W1), then the commit's header becomes
**                           the cache epoch (wal_log.c L3).
**   xShmUnmap               at the last close, after SQLite's checkpoint: if
**                           every frame was backfilled, the log is marked
**                           empty when the WAL closes.
**
** A database whose file is not plain SQLite format passes through whole
** (waldio_db_passthrough below).
**
** The wal-index header layout read here (mxFrame at byte 16 of each 48-byte
** copy, nBackfill at byte 96) is SQLite's documented shared-memory format
** (sqlite.org/walformat.html), unchanged since 3.7.0.
*/
#include "vfs_internal.h"
#include "errors.h"
#include "options.h"
#include "stock_guard.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifndef SQLITE_FCNTL_BLOCK_ON_CONNECT
# define SQLITE_FCNTL_BLOCK_ON_CONNECT 44   /* SQLite 3.48+ */
#endif

/* SQLite's default busy handler sleeps 1, 2, 5, 10 ... ms and counts the
** nominal times against the busy timeout. Only its first two sleeps are
** cut short (waldio_busy_sleep): a connection can then lose at most 3 ms
** of its timeout to early wake-ups. */
#define BUSY_SLEEP_MAX_US 2000
#define SHM_MXFRAME   16
#define SHM_NBACKFILL 96

static waldio_db_file *D(sqlite3_file *f){ return (waldio_db_file*)f; }

/* ------------------------------------------------------ the wal-index host */

static void close_shm_host(waldio_db_file *p){
  if( p->pShmHost ){                  /* never ORIGFILE: that is not cached */
    if( p->pShmHost->pMethods ) p->pShmHost->pMethods->xClose(p->pShmHost);
    sqlite3_free(p->pShmHost);
  }
  sqlite3_free_filename(p->zShmHostName);
  p->pShmHost = 0;
  p->zShmHostName = 0;
}

/* Non-zero if a waldio log (a valid superblock in block 0) is at the WAL
** path. Read with a plain descriptor: nothing locks or depends on it. */
int waldio_db_has_slotted_log(waldio_db_file *p){
  u8 meta[WALDIO_META_BYTES];
  wal_superblock sb;
  int fd, ok = 0;
  if( !p->zWalPath ) return 0;
  fd = open(p->zWalPath, O_RDONLY|O_CLOEXEC);
  if( fd<0 ) return 0;
  ok = pread(fd, meta, sizeof(meta), 0)==(ssize_t)sizeof(meta)
    && wf_decode_block0(meta, &sb)!=0;
  close(fd);
  return ok;
}

/* A database whose file does not start with SQLite's header is being
** transformed by a VFS above waldio (encryption, compression, obfuscation):
** its WAL would be as opaque as its pages, so waldio cannot lay it out.
** Such a database passes through: WAL and wal-index are the lower VFS's,
** exactly as without waldio. Every process decides alike, from the file.
** A file too short for a header (a new database) is not decided yet; an
** error reading it is stored in *pRc (0 returned), never taken for either. */
int waldio_db_passthrough(waldio_db_file *p, int *pRc){
  sqlite3_file *f = ORIGFILE(p);
  static const char zMagic[16] = "SQLite format 3";
  char h[16];
  int rc;
  if( p->passthrough<0 ){
    rc = f->pMethods->xRead(f, h, sizeof(h), 0);
    if( rc==SQLITE_OK ){
      /* A waldio log beside it says otherwise: page 1 was torn by a crash
      ** (its good copy is in the log, which recovery replays). */
      p->passthrough = memcmp(h, zMagic, sizeof(h))!=0 && !waldio_db_has_slotted_log(p);
    }else if( rc!=SQLITE_IOERR_SHORT_READ ){
      *pRc = rc;
      return 0;
    }
  }
  return p->passthrough>0;
}

/* The lower-VFS file whose shared memory is this database's wal-index
** (the database file itself when it passes through). On failure, nothing
** is left behind (an allocation failure is SQLITE_NOMEM). */
static sqlite3_file *shm_host(waldio_db_file *p, int *pRc){
  sqlite3_vfs *pLower = p->pVfs->pLower;
  const char *azParam[2] = { "readonly_shm", "1" };
  int nParam, flags = 0;

  *pRc = SQLITE_OK;
  if( p->pShmHost ) return p->pShmHost;
  if( p->nativeShm ) return ORIGFILE(p);
  if( waldio_db_passthrough(p, pRc) ) return ORIGFILE(p);
  if( *pRc ) return 0;
  if( !p->zWalPath ){
    *pRc = waldio_error(SQLITE_CANTOPEN, "a database without a file name has"
                        " no wal-index file");
    return 0;
  }
  nParam = sqlite3_uri_boolean(p->zName, "readonly_shm", 0) ? 1 : 0;
  p->zShmHostName = sqlite3_create_filename(p->zWalPath, "", "", nParam, azParam);
  p->pShmHost = sqlite3_malloc(pLower->szOsFile);
  if( p->pShmHost ) memset(p->pShmHost, 0, pLower->szOsFile);
  if( !p->zShmHostName || !p->pShmHost ){
    close_shm_host(p);
    *pRc = SQLITE_NOMEM;
    return 0;
  }
  *pRc = pLower->xOpen(pLower, p->zShmHostName, p->pShmHost,
                       SQLITE_OPEN_READWRITE|SQLITE_OPEN_MAIN_DB, &flags);
  if( *pRc==SQLITE_OK && p->pShmHost->pMethods->iVersion<2 ) *pRc = SQLITE_CANTOPEN;
  if( *pRc ){
    if( *pRc!=SQLITE_NOMEM ){
      waldio_error(*pRc, "%s: cannot open the wal-index of %s", p->zName,
                   p->zWalPath);
    }
    close_shm_host(p);
    return 0;
  }
  return p->pShmHost;
}

/* ------------------------------------------------ finding a WAL's database */

/* The database file this thread used last: SQLite opens a WAL right after
** reading its database file (pagerPagecount, lockBtree), on the same thread.
** Only compared with the VFS's list of open files, never dereferenced
** unless it is on that list. */
static __thread waldio_db_file *t_lastDb;

/* The connection of this thread whose group-mode write lock attempt just
** failed (busy, or granted on a stale snapshot and given back unused):
** SQLite's busy handler is about to sleep (waldio_busy_sleep). Compared
** with the open files, never dereferenced otherwise. */
static __thread waldio_db_file *t_lockMiss;

static void db_list_add(waldio_db_file *p){
  waldio_vfs *v = p->pVfs;
  pthread_mutex_lock(&v->dbMutex);
  p->pNextDb = v->pDbList;
  v->pDbList = p;
  pthread_mutex_unlock(&v->dbMutex);
}

static void db_list_remove(waldio_db_file *p){
  waldio_vfs *v = p->pVfs;
  waldio_db_file **pp;
  pthread_mutex_lock(&v->dbMutex);
  for(pp=&v->pDbList; *pp; pp=&(*pp)->pNextDb){
    if( *pp==p ){ *pp = p->pNextDb; break; }
  }
  pthread_mutex_unlock(&v->dbMutex);
  if( t_lastDb==p ) t_lastDb = 0;
  if( t_lockMiss==p ) t_lockMiss = 0;
}

waldio_db_file *waldio_db_for_wal(waldio_vfs *v, const char *zWal){
  waldio_db_file *p, *pFound = 0;
  int nFree = 0;
  pthread_mutex_lock(&v->dbMutex);
  for(p=v->pDbList; p; p=p->pNextDb){
    if( !p->zWalPath || strcmp(p->zWalPath, zWal)!=0 ) continue;
    if( p==t_lastDb ){ pFound = p; break; }
    if( !p->pWal ){ nFree++; if( !pFound ) pFound = p; }
  }
  pthread_mutex_unlock(&v->dbMutex);
  if( pFound && pFound!=t_lastDb && nFree>1 ) pFound = 0;   /* ambiguous */
  return pFound;
}

int waldio_busy_sleep(waldio_vfs *v, int us){
  waldio_db_file *p;
  int found = 0;
  if( !t_lockMiss || us>BUSY_SLEEP_MAX_US ) return 0;
  pthread_mutex_lock(&v->dbMutex);
  for(p=v->pDbList; p && !found; p=p->pNextDb) found = p==t_lockMiss;
  if( found && t_lockMiss->pFlush ){
    flush_region_await_writer(t_lockMiss->pFlush, us);
  }
  pthread_mutex_unlock(&v->dbMutex);
  t_lockMiss = 0;
  return found;
}

static int dbClose(sqlite3_file *f){
  waldio_db_file *p = D(f);
  sqlite3_file *o = ORIGFILE(f);
  if( p->pShmHost ){
    p->pShmHost->pMethods->xShmUnmap(p->pShmHost, 0);
    close_shm_host(p);
  }
  db_list_remove(p);
  sqlite3_free(p->zWalPath);
  p->zWalPath = 0;
  return o->pMethods ? o->pMethods->xClose(o) : SQLITE_OK;
}
static int dbRead(sqlite3_file *f, void *z, int n, sqlite3_int64 off){
  t_lastDb = D(f);
  if( D(f)->releasedSlot ) return waldio_db_read_released(D(f));
  return ORIGFILE(f)->pMethods->xRead(ORIGFILE(f), z, n, off);
}
static int dbWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 off){
  return ORIGFILE(f)->pMethods->xWrite(ORIGFILE(f), z, n, off);
}
static int dbTruncate(sqlite3_file *f, sqlite3_int64 size){
  return ORIGFILE(f)->pMethods->xTruncate(ORIGFILE(f), size);
}
static int dbSync(sqlite3_file *f, int flags){
  return ORIGFILE(f)->pMethods->xSync(ORIGFILE(f), flags);
}
static int dbFileSize(sqlite3_file *f, sqlite3_int64 *pSize){
  t_lastDb = D(f);
  return ORIGFILE(f)->pMethods->xFileSize(ORIGFILE(f), pSize);
}
/* For a refused close's wait (L8): 1 in a slotted layout; in the standard
** layout, 1 if no stock process has the database open (stock_guard.h,
** counted a few times per refused close only): one that stays would hold
** no ACTIVE and make every such close wait its whole bound. */
static int no_stock_process(waldio_db_file *p){
  char zShm[PATH_MAX];            /* no SQLite allocation on a close's path */
  int n;
  if( !p->nativeShm ) return 1;
  if( !p->zWalPath ) return 0;
  n = snprintf(zShm, sizeof(zShm), "%.*s-shm", (int)strlen(p->zWalPath) - 4,
               p->zWalPath);
  if( n<0 || n>=(int)sizeof(zShm) ) return 0;
  return stock_sqlite_shares(zShm, p->zWalPath)==0;
}

static int try_exclusive(void *f){
  return ORIGFILE(f)->pMethods->xLock(ORIGFILE(f), SQLITE_LOCK_EXCLUSIVE);
}
static int dbLock(sqlite3_file *f, int level){
  int rc;
  t_lastDb = D(f);
  rc = ORIGFILE(f)->pMethods->xLock(ORIGFILE(f), level);
  /* Refused, a close (or a journal-mode switch) of a connection with the
  ** log open waits for the closes of other processes (wal_log.h L8). In the
  ** standard layout only while no stock process has the database open (a
  ** stock process holds no ACTIVE: one that stays, Litestream's for one,
  ** would make every close wait its bound); else a log left with its frames
  ** is SQLite's own, which stock SQLite and the next opener recover. */
  if( rc==SQLITE_BUSY && level==SQLITE_LOCK_EXCLUSIVE && D(f)->pWal
   && no_stock_process(D(f)) ){
    rc = log_last_close_lock(&D(f)->pVfs->registry, D(f)->pWal->pLog,
                             try_exclusive, f);
  }
  if( rc==SQLITE_OK ) D(f)->lockLevel = level;
  if( rc==SQLITE_OK && level==SQLITE_LOCK_SHARED ) waldio_reserve_decide(D(f));
  /* Leaving WAL mode takes the database exclusively: refused, the switch
  ** failed and the database stays in WAL mode (its log is kept). */
  if( rc && level==SQLITE_LOCK_EXCLUSIVE ) D(f)->leavingWal = 0;
  return rc;
}
static int dbUnlock(sqlite3_file *f, int level){
  int rc = ORIGFILE(f)->pMethods->xUnlock(ORIGFILE(f), level);
  if( rc==SQLITE_OK ) D(f)->lockLevel = level;
  /* Back to SHARED, not closing: the connection goes on (L8). */
  if( level==SQLITE_LOCK_SHARED && D(f)->pWal ) log_reactivate(D(f)->pWal->pLog);
  return rc;
}
static int dbCheckReservedLock(sqlite3_file *f, int *pOut){
  return ORIGFILE(f)->pMethods->xCheckReservedLock(ORIGFILE(f), pOut);
}
static int dbSectorSize(sqlite3_file *f){
  return ORIGFILE(f)->pMethods->xSectorSize(ORIGFILE(f));
}
static int dbDeviceCharacteristics(sqlite3_file *f){
  int dc = ORIGFILE(f)->pMethods->xDeviceCharacteristics(ORIGFILE(f));
  dc &= ~SQLITE_IOCAP_SEQUENTIAL;
  /* A slotted layout writes every frame in whole blocks: power-safe. The
  ** standard layout keeps SQLite's offsets and reports the device as it
  ** is, from the pager's first question on: where it is not power-safe
  ** (psow=0), the pager journals whole sectors (pager.c
  ** pagerWriteLargeSector) and SQLite pads each synced commit to the
  ** sector, as without waldio, so a commit never shares a sector with a
  ** synced one (layout_standard.c T2 then rewrites only unsynced padding). */
  return D(f)->slotted ? (dc | SQLITE_IOCAP_POWERSAFE_OVERWRITE) : dc;
}

/* PRAGMA synchronous values as sqlite3GetSafetyLevel reads them. */
static int parse_sync_level(const char *z){
  static const struct { const char *zName; int level; } a[] = {
    {"off",0}, {"no",0}, {"false",0}, {"normal",1}, {"on",1}, {"yes",1},
    {"true",1}, {"full",2}, {"extra",3},
  };
  size_t i;
  if( z[0]>='0' && z[0]<='9' ) return z[0]-'0' > 3 ? -1 : z[0]-'0';
  for(i=0; i<sizeof(a)/sizeof(a[0]); i++){
    if( strcasecmp(z, a[i].zName)==0 ) return a[i].level;
  }
  return -1;
}

int waldio_db_sync_level(const waldio_db_file *p){
  return p->syncLevel>=0 ? p->syncLevel : p->pVfs->defaultSyncLevel;
}

/* Remember settings waldio depends on before SQLite applies them. */
static void note_pragma(waldio_db_file *p, const char *zName, const char *zArg){
  if( !zArg ) return;
  if( strcasecmp(zName, "synchronous")==0 ){
    int level = parse_sync_level(zArg);
    if( level>=0 ) p->syncLevel = level;
  }else if( strcasecmp(zName, "page_size")==0 ){
    waldio_reserve_note_page_size(p, zArg);
  }else if( strcasecmp(zName, "journal_mode")==0 ){
    p->leavingWal = strcasecmp(zArg, "wal")!=0;
  }else if( strcasecmp(zName, "journal_size_limit")==0 ){
    int hex = zArg[0]=='0' && (zArg[1]=='x' || zArg[1]=='X');
    long long n = strtoll(zArg, 0, hex ? 16 : 10);   /* sqlite3DecOrHexToI64 */
    p->journalSizeLimit = n<-1 ? -1 : n;             /* as pragma.c clamps it */
  }
}

/* Early read-lock release. A commit that waits for its flush after SQLite
** released the WAL write lock would hold its read lock, whose read mark is
** older than the commit, until COMMIT returns: no checkpoint could backfill
** its frames, nor any after them, while it waits, and SQLite restarts the
** log only after a checkpoint backfilled all of it. When no other
** statement of the connection is running, SQLite ends the read transaction
** right after COMMIT_PHASETWO without reading a page (btree.c
** btreeEndTransaction: nVdbeRead<=1; the running statement counts until
** sqlite3VdbeHalt returns), so the lock is given back before the wait.
** SQLite's own unlock of it is then skipped (dbShmLock), and a read in
** between fails closed (dbRead, wal_file.c), which only a shared-cache
** sibling could attempt. (Under a saturating load other commits land during
** every checkpoint; restart_assist.c lets the log restart all the same.) */
int waldio_db_only_statement(waldio_db_file *p){
  sqlite3 *db = p->ppBtreeDb ? *p->ppBtreeDb : 0;
  sqlite3_stmt *pStmt = 0;
  int n = 0;
  if( !db ) return 0;
  while( (pStmt = sqlite3_next_stmt(db, pStmt))!=0 ){
    if( sqlite3_stmt_busy(pStmt) && ++n>1 ) return 0;
  }
  return n==1;                  /* none: not a statement's commit (backup) */
}

/* Where stock processes share the wal-index, only while none does: a
** stock checkpointer with synchronous=OFF copies frames without syncing
** the log first, and this lock is what keeps it from copying a commit that
** is not durable yet (docs/interop.md, "What a stock process does"). */
static int only_waldio_shares(waldio_db_file *p){
  waldio_log *pLog;
  int sole, counted;
  if( !p->nativeShm ) return 1;
  if( !p->pWal ) return 0;
  pLog = p->pWal->pLog;
  sole = flush_side_sole_users(&pLog->side, &counted);
  if( counted ) log_count_group(pLog, LOG_GROUP_SHARER_COUNT);
  return sole;
}

static void release_read_lock_early(waldio_db_file *p){
  int rc;
  sqlite3_file *h;
  if( !only_waldio_shares(p) ) return;
  if( !p->readSlot || !waldio_db_only_statement(p) ) return;
  h = shm_host(p, &rc);
  if( h && h->pMethods->xShmLock(h, p->readSlot, 1,
                                 SQLITE_SHM_UNLOCK|SQLITE_SHM_SHARED)==SQLITE_OK ){
    p->releasedSlot = p->readSlot;
    p->readSlot = 0;
    log_count_group(p->pWal->pLog, LOG_GROUP_EARLY_RELEASE);
  }
}

int waldio_db_read_released(waldio_db_file *p){
  return waldio_error(SQLITE_IOERR_READ, "%s: a read after this connection's"
      " wal-index read lock was given back for a durable commit's wait (is"
      " the database open in shared-cache mode?)", p->zName);
}

/* COMMIT_PHASETWO of a group commit: return once it is durable (durable,
** strict), at once otherwise (async: the deadline flushes it). */
static int wait_for_commit(waldio_db_file *p, waldio_wal_file *pWal){
  u64 seq = pWal->commitSeq;
  int shared = pWal->commitShared, rc = SQLITE_OK;
  volatile flush_region *pFlush;
  pWal->commitSeq = 0;
  pWal->commitShared = 0;
  pWal->inCommit = 0;
  if( log_group_mode(pWal->pLog)<WALDIO_GROUP_DURABLE ) return SQLITE_OK;
  release_read_lock_early(p);
  if( !shared ){
    rc = group_wait(pWal->pLog, seq);
    if( rc==SQLITE_OK ) p->strictOwed = 0;
    return rc;
  }
  pFlush = waldio_db_flush_region(p, &rc);
  if( pFlush ) rc = flush_region_wait(pWal->pLog, pFlush, seq, p->shm0);
  if( rc==SQLITE_OK ){
    log_note_flushed(pWal->pLog, pWal->commitWriteSeq);
    p->strictOwed = 0;              /* durable, and all it saw before it */
  }
  return rc;
}

static int dbFileControl(sqlite3_file *f, int op, void *pArg){
  waldio_db_file *p = D(f);
  sqlite3_file *o = ORIGFILE(f);
  int rc;
  switch( op ){
    case WALDIO_FCNTL_SELF:
      *(waldio_db_file**)pArg = p;
      return SQLITE_OK;
    case SQLITE_FCNTL_PERSIST_WAL: {
      int *pVal = pArg;
      if( p->passthrough>0 || p->zStockIo ) break;   /* the lower VFS's WAL */
      if( *pVal>=0 ){
        p->persistWal = *pVal;
      }else{
        *pVal = (p->leavingWal || p->persistWal==0) ? 0 : 1;
      }
      return SQLITE_OK;
    }
    case SQLITE_FCNTL_PDB:
      p->ppBtreeDb = pArg;               /* the reserve of a new database (vfs.c) */
      break;
    case SQLITE_FCNTL_PRAGMA: {
      char **az = pArg;
      rc = waldio_pragma(p, az);
      if( rc!=SQLITE_NOTFOUND ) return rc;
      note_pragma(p, az[1], az[2]);
      break;
    }
    case SQLITE_FCNTL_LOCK_TIMEOUT:
    case SQLITE_FCNTL_BLOCK_ON_CONNECT:
      /* Blocking wal-index locks are taken on the host: tell it too. */
      if( p->pShmHost ){
        int v = *(int*)pArg;
        p->pShmHost->pMethods->xFileControl(p->pShmHost, op, &v);
      }
      break;
    case SQLITE_FCNTL_COMMIT_PHASETWO:
      /* Before COMMIT returns. persistent and ns promise a commit survives
      ** an OS crash without SQLite's sync: frames the commit wrote through
      ** the page cache are synced by waldio_wal_barrier, which xShmBarrier
      ** runs, except with a heap-memory wal-index (locking_mode=EXCLUSIVE):
      ** then here. */
      if( p->pWal && p->pWal->needsSync && !log_inherited(p->pWal->pLog) ){
        rc = waldio_wal_barrier(p->pWal);
        if( rc ) return rc;
      }
      /* After SQLite released the WAL write lock: a durable group commit
      ** waits here for the group write (solo) or the flush (shared)
      ** carrying it (log_group.h). */
      if( p->pWal && p->pWal->commitSeq && !log_inherited(p->pWal->pLog) ){
        return wait_for_commit(p, p->pWal);
      }
      break;
    case SQLITE_FCNTL_HAS_MOVED:
      /* SQLite asks this as a connection closes (pager.c sqlite3PagerClose),
      ** right before sqlite3WalClose tries the exclusive lock for the last
      ** close's checkpoint: the log's close work begins here, not inside
      ** that window (wal_log.h log_close_begins; the graceful stop,
      ** docs/durability.md). */
      if( p->pWal ) log_close_begins(&p->pVfs->registry, p->pWal->pLog);
      break;
    case SQLITE_FCNTL_CKPT_START:
      /* A checkpoint must never copy a frame that is not in the log yet.
      ** (Durable is another matter: SQLite's WAL sync, just before this,
      ** made it so where the synchronous setting asks, wal_file.c.) With
      ** synchronous=OFF there was no sync, and a solo group buffer may
      ** still hold frames. */
      if( p->pWal && !log_inherited(p->pWal->pLog)
       && log_group_mode(p->pWal->pLog)!=WALDIO_GROUP_OFF ){
        rc = group_write_all(p->pWal->pLog);
        if( rc ) return rc;
      }
      break;
    case SQLITE_FCNTL_EXTERNAL_READER:
      if( p->passthrough>0 || p->nativeShm ) break;
      if( p->pShmHost ){
        return p->pShmHost->pMethods->xFileControl(p->pShmHost, op, pArg);
      }
      *(int*)pArg = 0;
      return SQLITE_OK;
    default:
      break;
  }
  rc = o->pMethods->xFileControl(o, op, pArg);
  if( rc==SQLITE_OK && op==SQLITE_FCNTL_VFSNAME ){
    char **pz = pArg;
    *pz = sqlite3_mprintf("%s/%z", p->pVfs->zName, *pz);
  }
  return rc;
}

/* Region 0 of waldio's wal-index file is the flush region; SQLite's
** region i is the file's region i+1. (A passthrough database's wal-index
** is the lower VFS's own, unshifted.) */
static int host_region(waldio_db_file *p, int iRegion){
  return p->pShmHost ? iRegion + 1 : iRegion;
}

volatile flush_region *waldio_db_flush_region(waldio_db_file *p, int *pRc){
  volatile void *pMap = 0;
  sqlite3_file *h;
  *pRc = SQLITE_OK;
  if( p->pFlush || !p->shm0 ) return p->pFlush;
  if( p->nativeShm ){
    waldio_log *pLog = p->pWal ? p->pWal->pLog : 0;
    if( pLog && log_group_mode(pLog)!=WALDIO_GROUP_OFF ){
      p->pFlush = flush_side_region(&pLog->side, pLog->sys, pLog->zPath,
                                    log_group_auto(pLog), pRc);
    }
    return p->pFlush;
  }
  if( !p->pShmHost ) return p->pFlush;
  h = p->pShmHost;
  *pRc = h->pMethods->xShmMap(h, 0, WAL_INDEX_REGION_BYTES, 1, &pMap);
  if( *pRc==SQLITE_OK && !pMap ) *pRc = SQLITE_IOERR_SHMMAP;
  if( *pRc==SQLITE_OK ){
    *pRc = flush_region_attach((volatile flush_region*)pMap, p->zWalPath, 0);
  }
  if( *pRc ) return 0;
  p->pFlush = (volatile flush_region*)pMap;
  return p->pFlush;
}

static int dbShmMap(sqlite3_file *f, int iRegion, int szRegion, int bExtend,
                    void volatile **pp){
  int rc;
  sqlite3_file *h = shm_host(D(f), &rc);
  *pp = 0;
  if( !h ) return rc;
  rc = h->pMethods->xShmMap(h, host_region(D(f), iRegion), szRegion, bExtend, pp);
  if( (rc==SQLITE_OK || rc==SQLITE_READONLY) && *pp ){
    if( iRegion==0 ) D(f)->shm0 = *pp;
    if( iRegion<WAL_INDEX_REGIONS && szRegion==WAL_INDEX_REGION_BYTES ){
      D(f)->view.apRegion[iRegion] = *pp;
    }
  }
  return rc;
}

/* Strict group mode: a read transaction sees only durable commits. Every
** commit it can see took its ticket (or was appended to the solo buffer)
** before it was published, so waiting for what was handed out by now
** suffices.
**
** When. A wait at the read lock would make every writer wait too (an SQLite
** write transaction begins as a read transaction), one flush before its
** commit and one after. So the wait is made at the transaction's first
** read of a log frame holding a page other than page 1 (the header SQLite
** reads to begin), while it does not hold the WAL write lock
** (waldio_db_strict_read). A transaction that takes the write lock first
** skips it: its own COMMIT returns only once durable, which covers every
** commit it saw. If it rolls back instead, pages it read may stay in
** SQLite's cache, so the next read transaction waits at once (strictOwed).
** Frames are the only way to commits not yet durable: the database file
** holds only checkpointed frames, which are durable (F5). And a frame a
** flush is known to cover (frame_is_durable) is no way either: the wait is
** due at the first read of a frame that is not, so a reader of pages that
** a commit under way did not change reads on (the bench's web workload,
** two processes: a process's readers waited 2,600 times in 2 s, now
** 1,700). */
static int wait_until_visible_is_durable(waldio_db_file *p){
  waldio_log *pLog = p->pWal->pLog;
  volatile flush_region *pFlush;
  int rc = SQLITE_OK;
  if( log_inherited(pLog) || log_group_mode(pLog)!=WALDIO_GROUP_STRICT ){
    return SQLITE_OK;
  }
  rc = group_wait_all(pLog);                    /* solo buffer, if any */
  if( rc==SQLITE_OK && !log_group_solo(pLog)
   && (pFlush = waldio_db_flush_region(p, &rc))!=0 ){
    rc = flush_region_wait(pLog, pFlush, flush_region_written(pFlush), p->shm0);
  }
  return rc;
}

/* A flush that began after frame was published has succeeded (F6), and
** the frame is of the log's current generation: no reader of this process
** can hold a frame of another generation while it reads the log (a
** restart waits for every read lock above 0). Shared mode only: a solo
** buffer's commits take no part in the region's flushes. */
static int frame_is_durable(waldio_db_file *p, u32 frame){
  volatile flush_region *pFlush;
  int rc = SQLITE_OK;
  if( log_group_solo(p->pWal->pLog) ) return 0;
  pFlush = waldio_db_flush_region(p, &rc);
  return pFlush && flush_region_frames_cover(pFlush,
                                             wal_index_frame_mark(p->shm0, frame));
}

int waldio_db_strict_read(waldio_db_file *p, u32 frame){
  int rc;
  if( !p->strictPending || p->holdsWriteLock ) return SQLITE_OK;
  if( frame && wal_index_frame_page(&p->view, frame)==1 ) return SQLITE_OK;
  if( frame && frame_is_durable(p, frame) ) return SQLITE_OK;
  p->strictPending = 0;
  rc = wait_until_visible_is_durable(p);
  if( rc ) p->strictPending = 1;
  return rc;
}

/* A read lock was granted: the strict wait is due now (a rolled-back write
** transaction skipped it) or at the first frame read. */
static int strict_begin_read(waldio_db_file *p){
  int rc = SQLITE_OK;
  if( log_group_mode(p->pWal->pLog)!=WALDIO_GROUP_STRICT ) return SQLITE_OK;
  if( p->strictOwed ){
    rc = wait_until_visible_is_durable(p);
    if( rc==SQLITE_OK ) p->strictOwed = 0;
  }else{
    p->strictPending = 1;
  }
  return rc;
}

static int is_read_lock(int ofst, int n, int flags){
  return n==1 && ofst>=WAL_READ_LOCK_FIRST && ofst<WAL_READ_LOCK_FIRST + 5
      && flags==(SQLITE_SHM_LOCK|SQLITE_SHM_SHARED);
}

/* One xShmLock call on the host, as flush_region_lock_write retries it. */
typedef struct shm_lock_call {
  sqlite3_file *h;
  int ofst, n, flags;
} shm_lock_call;

static int try_shm_lock(void *pArg){
  shm_lock_call *c = pArg;
  return c->h->pMethods->xShmLock(c->h, c->ofst, c->n, c->flags);
}

/* Group mode: a commit holds the WAL write lock for microseconds, so a
** writer that finds it held waits for its release (flush_region.h) rather
** than go to SQLite's busy handler, whose sleeps (1, 2, 5 ms...) are each
** longer than a group flush: with many processes they would leave the
** flushes half empty. Bounded: then the busy handler takes over. */
#define WRITE_LOCK_WAIT_MS 5

/* Whether this connection's writes take part in group commit. Under auto
** (log_group.h) only those of synchronous=FULL and EXTRA connections do: a
** NORMAL connection's commits are made as with group commit off, and it
** waits for the write lock in SQLite's busy handler, as off does (8
** processes inserting at NORMAL: 0.41x off when they waited here). */
static int in_group_mode(waldio_db_file *p){
  waldio_log *pLog;
  if( !p->pFlush || !p->pWal ) return 0;
  pLog = p->pWal->pLog;
  return !log_inherited(pLog) && log_group_mode(pLog)!=WALDIO_GROUP_OFF
      && (!log_group_auto(pLog) || waldio_db_sync_level(p)>=2);
}

static int lock_waits_for_writer(waldio_db_file *p, int ofst, int n, int flags){
  return ofst==WAL_WRITE_LOCK_SLOT && n==1
      && flags==(SQLITE_SHM_LOCK|SQLITE_SHM_EXCLUSIVE) && in_group_mode(p);
}

/* SQLite's checkpoint lock, taken or released: published in the flush
** region, where group-mode writers of every process see it
** (restart_assist.c). */
static void note_checkpoint_lock(waldio_db_file *p, int on){
  if( on==p->holdsCkptLock ) return;
  p->holdsCkptLock = on;
  if( p->pFlush ) flush_region_checkpointing(p->pFlush, on);
}

static int dbShmLock(sqlite3_file *f, int ofst, int n, int flags){
  waldio_db_file *p = D(f);
  shm_lock_call call;
  int rc, waits;
  sqlite3_file *h = shm_host(p, &rc);
  if( !h ) return rc;
  if( p->releasedSlot && n==1 && ofst>=WAL_READ_LOCK_FIRST ){
    int skip = ofst==p->releasedSlot && flags==(SQLITE_SHM_UNLOCK|SQLITE_SHM_SHARED);
    p->releasedSlot = 0;                  /* the read transaction ended */
    if( skip ){
      p->strictPending = 0;
      return SQLITE_OK;                   /* given back already */
    }
  }
  call.h = h; call.ofst = ofst; call.n = n; call.flags = flags;
  waits = lock_waits_for_writer(p, ofst, n, flags);
  if( ofst==WAL_CKPT_LOCK_SLOT && n==1 && (flags & SQLITE_SHM_UNLOCK) ){
    note_checkpoint_lock(p, 0);           /* before another can take it */
  }
  if( waits ){
    rc = waldio_restart_gate(p);
    if( rc==SQLITE_OK ){
      rc = flush_region_lock_write(p->pFlush, try_shm_lock, &call,
                                   WRITE_LOCK_WAIT_MS);
    }
  }else if( waldio_restart_is_attempt(p, ofst, n, flags) && in_group_mode(p) ){
    rc = waldio_restart_lock_readers(try_shm_lock, &call);
  }else{
    rc = try_shm_lock(&call);
  }
  if( rc==SQLITE_OK && ofst==WAL_CKPT_LOCK_SLOT && n==1
   && (flags & SQLITE_SHM_LOCK) ){
    note_checkpoint_lock(p, 1);
  }
  if( waits && rc==SQLITE_BUSY ) t_lockMiss = p;
  if( rc==SQLITE_OK && p->pWal && is_read_lock(ofst, n, flags) ){
    if( t_lockMiss==p ) t_lockMiss = 0;
    rc = strict_begin_read(p);
    if( rc ) h->pMethods->xShmLock(h, ofst, n, SQLITE_SHM_UNLOCK|SQLITE_SHM_SHARED);
    else p->readSlot = ofst;
    return rc;
  }
  if( rc==SQLITE_OK && n==1 && ofst>=WAL_READ_LOCK_FIRST
   && flags==(SQLITE_SHM_UNLOCK|SQLITE_SHM_SHARED) ){
    p->strictPending = 0;                 /* the read transaction ended */
    if( ofst==p->readSlot ) p->readSlot = 0;
  }
  if( rc==SQLITE_OK && ofst<=WAL_WRITE_LOCK_SLOT
   && WAL_WRITE_LOCK_SLOT<ofst+n ){
    if( flags & SQLITE_SHM_UNLOCK ){
      if( p->holdsWriteLock && p->pFlush ){
        flush_region_writing(p->pFlush, 0);
        flush_region_released(p->pFlush);
        /* Given back without a write: a stale snapshot (SQLITE_BUSY_
        ** SNAPSHOT), and the busy handler sleeps next. */
        if( p->pWal && !p->pWal->wroteUnderLock ) t_lockMiss = p;
      }
      p->holdsWriteLock = 0;
      if( p->pWal ){
        p->pWal->wroteSinceBarrier = 0;
        waldio_wal_discard(p->pWal);    /* a rolled-back transaction's frames */
      }
    }else if( flags & SQLITE_SHM_EXCLUSIVE ){
      p->holdsWriteLock = 1;
      if( p->strictPending ){             /* a writer: its COMMIT covers it */
        p->strictPending = 0;
        p->strictOwed = 1;
      }
      if( p->pWal ) p->pWal->wroteUnderLock = 0;
      if( t_lockMiss==p ) t_lockMiss = 0;
      if( p->pFlush ) flush_region_writing(p->pFlush, 1);
    }
  }
  return rc;
}

static void dbShmBarrier(sqlite3_file *f){
  waldio_db_file *p = D(f);
  int rc;
  sqlite3_file *h = shm_host(p, &rc);
  if( h ){
    h->pMethods->xShmBarrier(h);
  }else{
    __sync_synchronize();
  }
  if( !p->pWal ) return;
  /* A failure here is kept in the log (poison or last error) and seen by
  ** the next WAL call; xShmBarrier itself cannot fail. */
  waldio_wal_barrier(p->pWal);
  p->pWal->inCommit = 0;
  if( p->pWal->wroteSinceBarrier && p->shm0
   && (p->holdsWriteLock || p->lockLevel==SQLITE_LOCK_EXCLUSIVE) ){
    log_publish(p->pWal->pLog, (const volatile char*)p->shm0 + WALINDEX_HDR_BYTES);
    p->pWal->wroteSinceBarrier = 0;
  }
}

static u32 shm_u32(const volatile void *shm, int off){
  u32 v;
  memcpy(&v, (const char*)shm + off, sizeof(v));
  return v;
}

static int dbShmUnmap(sqlite3_file *f, int deleteFlag){
  waldio_db_file *p = D(f);
  const volatile void *shm = p->shm0;
  int rc = SQLITE_OK;
  if( p->pWal && shm && !deleteFlag && p->lockLevel==SQLITE_LOCK_EXCLUSIVE
   && memcmp((const void*)shm, (const char*)shm + WALINDEX_HDR_BYTES,
             WALINDEX_HDR_BYTES)==0
   && shm_u32(shm, SHM_MXFRAME)==shm_u32(shm, SHM_NBACKFILL) ){
    p->pWal->closeClean = 1;
  }
  p->shm0 = 0;
  p->pFlush = 0;
  memset(&p->view, 0, sizeof(p->view));
  if( p->pShmHost ){
    rc = p->pShmHost->pMethods->xShmUnmap(p->pShmHost, deleteFlag);
    close_shm_host(p);
  }else if( p->passthrough>0 || p->nativeShm ){
    rc = ORIGFILE(p)->pMethods->xShmUnmap(ORIGFILE(p), deleteFlag);
  }
  return rc;
}

static int dbFetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp){
  sqlite3_file *o = ORIGFILE(f);
  if( o->pMethods->iVersion<3 ){ *pp = 0; return SQLITE_OK; }
  return o->pMethods->xFetch(o, off, n, pp);
}
static int dbUnfetch(sqlite3_file *f, sqlite3_int64 off, void *pPage){
  sqlite3_file *o = ORIGFILE(f);
  if( o->pMethods->iVersion<3 ) return SQLITE_OK;
  return o->pMethods->xUnfetch(o, off, pPage);
}

const sqlite3_io_methods waldio_db_io_methods = {
  3, dbClose, dbRead, dbWrite, dbTruncate, dbSync, dbFileSize, dbLock,
  dbUnlock, dbCheckReservedLock, dbFileControl, dbSectorSize,
  dbDeviceCharacteristics, dbShmMap, dbShmLock, dbShmBarrier, dbShmUnmap,
  dbFetch, dbUnfetch
};

/* A layout of waldio's own (a slotted log beside the database, or one
** asked for by name) cannot share the database with stock SQLite. */
static int wants_slotted(waldio_db_file *p){
  const wal_layout *pAsked = wal_layout_find(p->opts.layout);
  if( pAsked && !(pAsked->flags & LAYOUT_NATIVE_SHM) ) return 1;
  return waldio_db_has_slotted_log(p);
}

/* A database that stock SQLite has open in WAL mode is refused here, at
** sqlite3_open, if this connection would give it a slotted log: refused
** when its WAL is opened, at the first statement, the SQLITE_BUSY would make
** SQLite retry for the whole busy timeout first (btree.c retries a
** transaction start). The slotted layouts check again for a stock process
** that came in between (log_superblock.c). The standard layout shares the
** database with stock SQLite. Lower file closed. */
static int refuse_if_stock(waldio_db_file *p){
  char *zShm;
  int rc = SQLITE_OK;
  if( !p->slotted ) return SQLITE_OK;
  zShm = sqlite3_mprintf("%s-shm", p->zName);
  if( !zShm ){
    rc = SQLITE_NOMEM;
  }else if( stock_sqlite_active(zShm) && !waldio_db_passthrough(p, &rc) && rc==SQLITE_OK ){
    rc = waldio_stock_refusal(zShm);
  }
  sqlite3_free(zShm);
  if( rc ) ORIGFILE(p)->pMethods->xClose(ORIGFILE(p));
  return rc;
}

int waldio_db_open(waldio_vfs *v, const char *zName, waldio_db_file *p,
                   int flags, int *pOutFlags){
  sqlite3_vfs *pLower = v->pLower;
  int rc;
  memset(p, 0, sizeof(*p));
  p->pVfs = v;
  p->zName = zName;
  p->opts = v->opts;
  p->syncLevel = -1;
  p->journalSizeLimit = v->defaultJournalSizeLimit;
  p->persistWal = -1;
  p->passthrough = -1;                  /* decided once the file has a header */
  rc = waldio_options_from_uri(&p->opts, zName);
  if( rc ) return rc;
  p->zGroupFrom = sqlite3_uri_parameter(zName, "waldio_group") ? GROUP_WHY_URI
      : v->opts.group!=WALDIO_GROUP_AUTO ? GROUP_WHY_VFS : 0;
  p->flushAlone = sqlite3_uri_boolean(zName, "waldio_flush_alone", 1);
  if( zName ){
    p->zWalPath = sqlite3_mprintf("%s-wal", zName);
    if( !p->zWalPath ) return SQLITE_NOMEM;
  }
  rc = pLower->xOpen(pLower, zName, ORIGFILE(p), flags, pOutFlags);
  if( rc==SQLITE_OK && ORIGFILE(p)->pMethods->iVersion<2 ){
    ORIGFILE(p)->pMethods->xClose(ORIGFILE(p));
    rc = waldio_error(SQLITE_CANTOPEN, "%s: the VFS below waldio has no"
                      " shared-memory methods", zName ? zName : "");
  }
  if( rc==SQLITE_OK ){
    p->slotted = p->zName && wants_slotted(p);
    rc = refuse_if_stock(p);
  }
  if( rc ){
    sqlite3_free(p->zWalPath);
    p->zWalPath = 0;
    return rc;
  }
  p->base.pMethods = &waldio_db_io_methods;
  db_list_add(p);
  return SQLITE_OK;
}

waldio_db_file *waldio_db_of(sqlite3_file *pTop){
  waldio_db_file *p = 0;
  if( !pTop || !pTop->pMethods ) return 0;
  if( pTop->pMethods==&waldio_db_io_methods ) return (waldio_db_file*)pTop;
  if( pTop->pMethods->xFileControl(pTop, WALDIO_FCNTL_SELF, &p)!=SQLITE_OK ){
    return 0;
  }
  return p;
}
