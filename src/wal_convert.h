/*
** wal_convert.h — turning a standard-format SQLite WAL into a waldio log.
**
** A database used by stock SQLite may leave a "-wal" with committed,
** uncheckpointed transactions. The first waldio open must keep them. The
** frames are validated exactly as SQLite's recovery validates them (salts,
** chained checksums), every frame up to the last commit frame is re-laid
** into a new, preallocated file beside the old one, and that file is
** renamed over the old -wal only after it is durable. A crash at any point
** leaves either the old standard WAL or the complete new log.
*/
#ifndef WALDIO_WAL_CONVERT_H
#define WALDIO_WAL_CONVERT_H

#include "dio_file.h"
#include "syscalls.h"
#include "waldio.h"

/* Not an SQLite code: "the file was replaced, open it again". */
#define WALDIO_CONVERTED 0x57434e56

/* oldFile is the open standard WAL at zPath; the caller holds its
** LOG_LOCK_INIT and is alone (log_lock.h). The new log gets `layout`.
** Returns WALDIO_CONVERTED after a successful rename, or an error. */
int wal_convert_standard(const waldio_syscalls *sys, const char *zPath,
                         dio_file *oldFile, const waldio_options *o,
                         int layout);

#endif
