/*
** log_owner.c — the log ("<db>-wal") and its wal-index ("<db>-wal-shm")
** carry the database file's permissions, as SQLite gives its journals.
**
** Stock SQLite creates its WAL and -shm with the database file's mode, and
** with its owner when it runs as root (os_unix.c robust_open,
** robustFchown), and deletes them at the last close: every session's files
** reflect the database as it is then. waldio keeps its log between sessions
** (the preallocation is what makes commits cheap), so at every WAL open it
** brings both files back to the database's mode -- and owner, when this
** process runs as root -- if the database's changed since they were made:
** an application that tightens its database's mode must not leave its
** recent rows readable by all in the log.
**
** Invariants:
**   O1  A file is changed only through a descriptor opened without
**       following symbolic links: a link planted at "<db>-wal" never makes
**       a root process chmod or chown what it points to.
**   O2  A file this process may not change (another user's, without root)
**       is replaced instead, as stock SQLite would have deleted it, only
**       when nothing can need it: the log holds no generation (a clean
**       last close emptied it; a log with frames may hold committed
**       transactions and is never touched), and no other connection anywhere
**       has the database open -- an exclusive lock on the database file,
**       which sqlite3WalClose takes before it deletes its WAL, and which
**       every connection's SHARED lock in WAL mode excludes. The open then
**       creates fresh files (log_open.c, the lower VFS for the wal-index).
**   O3  Nothing here fails an open: a file that can be neither changed nor
**       replaced is used as it is, and a warning says why. errno is left
**       as it was found (the unix VFS reads errno after its own calls).
**   O4  Looking never costs a lock: the wal-index is only ever opened
**       O_PATH here, since closing an ordinary descriptor would drop the
**       POSIX locks this process's other connections hold on it (its
**       DMS lock among them; without it, the next process to open the
**       database would take the wal-index for unused and truncate it).
*/
#include "vfs_internal.h"
#include "errors.h"
#include "wal_layout.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* What conform() found. */
enum { OWNER_OK, OWNER_CANNOT };

/* The mode and owner SQLite gives a journal of a database with stat *pDb,
** compared with the file's (owner only for root: others cannot set it). */
static int matches(const struct stat *pFile, const struct stat *pDb, int root){
  return (pFile->st_mode & 0777)==(pDb->st_mode & 0777)
      && (!root || (pFile->st_uid==pDb->st_uid && pFile->st_gid==pDb->st_gid));
}

/* Give the file at zPath the database's mode and owner if it differs (O1).
** *pEmpty (if not NULL): set when the file is empty, or a log (bLog, any
** layout) holding no generation. A missing file is OWNER_OK: it will be
** created right.
**
** The wal-index is opened O_PATH (O4): the unix VFS of this process may
** hold POSIX locks on it, and closing any ordinary descriptor of a file
** drops all of them. The log carries only OFD locks, which a close of
** another descriptor leaves alone, so it is opened to be read. */
static int conform(const waldio_syscalls *sys, const char *zPath, int bLog,
                   const struct stat *pDb, int *pEmpty){
  struct stat st;
  u8 meta[WALDIO_META_BYTES];
  wal_superblock sb;
  int root = geteuid()==0, rc = OWNER_CANNOT;
  int fd = sys->xOpen(zPath, (bLog ? O_RDONLY|O_NONBLOCK : O_PATH)
                             |O_NOFOLLOW|O_CLOEXEC, 0);
  if( pEmpty ) *pEmpty = 0;
  if( fd<0 ) return errno==ENOENT ? OWNER_OK : OWNER_CANNOT;
  if( sys->xFstat(fd, &st)==0 && S_ISREG(st.st_mode) ){
    if( pEmpty && st.st_size==0 ){
      *pEmpty = 1;
    }else if( pEmpty && bLog ){
      ssize_t got = sys->xPread(fd, meta, sizeof(meta), 0);
      if( got==(ssize_t)sizeof(meta) && wf_decode_block0(meta, &sb)>0 ){
        *pEmpty = (sb.flags & SB_FLAG_HAS_HEADER)==0;
      }else if( got>=0 ){
        *pEmpty = wal_standard_holds_nothing(meta, (size_t)got);
      }
    }
    if( !matches(&st, pDb, root) ){
      /* Owner first: chown may clear set-id bits that the mode restores. */
      if( root ) sys->xFchown(fd, pDb->st_uid, pDb->st_gid);
      sys->xFchmod(fd, pDb->st_mode & 0777);
      if( sys->xFstat(fd, &st) ) memset(&st, 0, sizeof(st));
    }
    if( matches(&st, pDb, root) ) rc = OWNER_OK;
  }
  sys->xClose(fd);
  return rc;
}

/* O2: is this the only connection to the database anywhere? Asked with the
** lower file's own locks, returned to SHARED, where SQLite holds them while
** it opens its WAL (a failed EXCLUSIVE request leaves PENDING, which the
** unlock drops too). */
static int database_alone(waldio_db_file *db){
  sqlite3_file *f = ORIGFILE(db);
  int alone;
  if( db->lockLevel==SQLITE_LOCK_EXCLUSIVE ) return 1;
  if( db->lockLevel!=SQLITE_LOCK_SHARED ) return 0;
  alone = f->pMethods->xLock(f, SQLITE_LOCK_EXCLUSIVE)==SQLITE_OK;
  f->pMethods->xUnlock(f, SQLITE_LOCK_SHARED);
  return alone;
}

/* One wal-index file: conformed, or unlinked if that fails while this is
** the only connection (its first user rebuilds it). Returns OWNER_OK or
** not. */
static int conform_shm(const waldio_syscalls *sys, waldio_db_file *db,
                       const char *zShm, const struct stat *pDb, int readonly){
  if( conform(sys, zShm, 0, pDb, 0)==OWNER_OK ) return 1;
  return !readonly && database_alone(db) && sys->xUnlink(zShm)==0;
}

void waldio_log_conform(waldio_vfs *v, waldio_db_file *db, const char *zLog,
                        const struct stat *pDb, int readonly){
  const waldio_syscalls *sys = &v->sys;
  /* waldio's wal-index (slotted layouts), then SQLite's own (standard: a
  ** kept log keeps SQLite's -shm too, as stock with PERSIST_WAL does). */
  char *zShm = sqlite3_mprintf("%s-shm", zLog);
  char *zDbShm = db->zName ? sqlite3_mprintf("%s-shm", db->zName) : 0;
  int logEmpty = 0, logOk, shmOk, dbShmOk = 1, savedErrno = errno;
  if( !zShm || (db->zName && !zDbShm) ){
    sqlite3_free(zShm);
    sqlite3_free(zDbShm);
    return;
  }
  logOk = conform(sys, zLog, 1, pDb, &logEmpty)==OWNER_OK;
  shmOk = conform_shm(sys, db, zShm, pDb, readonly);
  if( zDbShm ) dbShmOk = conform_shm(sys, db, zDbShm, pDb, readonly);
  if( !logOk && logEmpty && !readonly && database_alone(db) ){
    /* Unlinked, as stock SQLite deletes its WAL: an empty log is nothing
    ** but its preallocation. */
    if( sys->xUnlink(zLog)==0 ) logOk = 1;
  }
  if( !logOk || !shmOk || !dbShmOk ){
    waldio_warning("%s keeps a mode or owner other than its database's (%04o,"
        " uid %d): this process (uid %d) may not change it and cannot replace"
        " it now (%s). Open the database once as the file's owner or as root"
        " with no other connection", !logOk ? zLog : !shmOk ? zShm : zDbShm,
        (unsigned)(pDb->st_mode & 0777), (int)pDb->st_uid, (int)geteuid(),
        readonly ? "a read-only connection"
        : (!logOk && !logEmpty) ? "the log holds transactions, or cannot be read"
        : "another connection has the database open");
  }
  sqlite3_free(zShm);
  sqlite3_free(zDbShm);
  errno = savedErrno;           /* O3: a failure here is nobody's business */
}
