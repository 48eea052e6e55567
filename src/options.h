/*
** options.h — waldio's tunables: defaults (written once, here), parsing of
** URI parameters and PRAGMA arguments, and their names for status output.
*/
#ifndef WALDIO_OPTIONS_H
#define WALDIO_OPTIONS_H

#include "waldio.h"

#define WALDIO_DEFAULT_PREALLOC   (4LL << 20)
/* The most a log keeps after the last connection closes (durability.md, "The
** log left beside an idle database", which shows the measurement behind it:
** bench/idle-bound); smaller with a smaller prealloc or PRAGMA
** journal_size_limit. One first runway (wal_log.c GROW_MIN): sessions that
** commit up to that much directly start without a zero-fill. */
#define WALDIO_IDLE_LOG_BYTES     (256LL << 10)
#define WALDIO_DEFAULT_CACHE      (4LL << 20)
#define WALDIO_DEFAULT_FLUSH_MS   100
#define WALDIO_MIN_PREALLOC       (64LL << 10)
#define WALDIO_MAX_FLUSH_MS       60000
#define WALDIO_DEFAULT_GROUP_BYTES (16LL << 10)
#define WALDIO_DEFAULT_GROUP_MS   2
#define WALDIO_MAX_GROUP_BYTES    (16LL << 20)

/* Apply the waldio_* URI parameters of zUri (a filename SQLite passed to
** xOpen) to *o. Returns SQLITE_OK or SQLITE_CANTOPEN with the error recorded. */
int waldio_options_from_uri(waldio_options *o, const char *zUri);

/* Parsers shared by URI and PRAGMA handling. Return 0 on success, -1 on a
** bad value (nothing recorded: callers word the error for their context). */
int waldio_parse_layout(const char *z, int *pOut);
int waldio_parse_sync(const char *z, int *pOut);
int waldio_parse_io(const char *z, int *pOut);
int waldio_parse_bytes(const char *z, long long *pOut);
int waldio_parse_ms(const char *z, int *pOut);
int waldio_parse_group(const char *z, int *pOut);

const char *waldio_layout_name(int layout);
const char *waldio_io_name(int io);
const char *waldio_group_name(int group);

#endif
