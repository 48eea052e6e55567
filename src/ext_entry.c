/*
** ext_entry.c — the loadable-extension entry point (waldio.so).
**
**   .load ./waldio                                   (sqlite3 shell)
**   sqlite3_load_extension(db, "./waldio.so", 0, &zErr);
**   apsw: conn.enable_load_extension(True); conn.load_extension("waldio.so")
**
** Registers the VFS "waldio" as the process's default VFS and returns
** SQLITE_OK_LOAD_PERMANENTLY: the VFS must outlive the connection that
** loaded it. Loading it again is harmless. Only this symbol is exported;
** everything else is hidden, so two copies loaded into two different SQLite
** libraries in one process never bind to each other's routine table.
*/
#include "sqlite_api.h"
SQLITE_EXTENSION_INIT1

#include "errors.h"
#include "waldio.h"

int waldio_connection_setup(sqlite3 *db);

__attribute__((visibility("default")))
int sqlite3_waldio_init(sqlite3 *db, char **pzErrMsg,
                        const sqlite3_api_routines *pApi){
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  rc = waldio_register(WALDIO_VFS_NAME, 1, 0);
  if( rc==SQLITE_OK ) rc = waldio_connection_setup(db);
  if( rc!=SQLITE_OK ){
    char zMsg[1024];
    waldio_last_error(zMsg, sizeof(zMsg));
    *pzErrMsg = sqlite3_mprintf("waldio: %s", zMsg);
    return rc;
  }
  return SQLITE_OK_LOAD_PERMANENTLY;
}
