/*
** sqlite_api.h — which SQLite API a libwaldio source file is compiled against.
**
** libwaldio is built twice from the same sources:
**   - as a library (libwaldio.so / libwaldio.a) linked against libsqlite3, and
**   - as a SQLite loadable extension (waldio.so, WALDIO_EXTENSION defined) that
**     reaches SQLite only through the routine table handed to
**     sqlite3_waldio_init(), so it works inside any SQLite >= 3.32 that loads
**     it (Debian's 3.40.1, apsw's bundled 3.54.1, ...).
** Every file includes this header instead of sqlite3.h so that both builds see
** the same names.
*/
#ifndef WALDIO_SQLITE_API_H
#define WALDIO_SQLITE_API_H

#ifdef WALDIO_EXTENSION
# include <sqlite3ext.h>
  SQLITE_EXTENSION_INIT3
#else
# include <sqlite3.h>
#endif

#endif
