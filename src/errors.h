/*
** errors.h — how libwaldio reports a failure in words.
**
** Every error path that returns an SQLite code calls waldio_error() with a
** message that names the file, the cause and, where there is one, the fix.
** The message goes to sqlite3_log() (and to stderr with WALDIO_VERBOSE=1)
** and becomes the process's "last error" (waldio_last_error() in C,
** waldio_last_error() in SQL).
*/
#ifndef WALDIO_ERRORS_H
#define WALDIO_ERRORS_H

/* Record and log a message; returns rc so callers can `return waldio_error(..)`. */
int waldio_error(int rc, const char *zFormat, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;

/* Something the user should know that is not a failure: to sqlite3_log as
** SQLITE_WARNING (and stderr when verbose), not the last error. */
void waldio_warning(const char *zFormat, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 1, 2)))
#endif
  ;

/* Non-zero if WALDIO_VERBOSE asks for messages on stderr too. */
int waldio_verbose(void);

/* Record the message of a system-call failure: "<what> <path>: <strerror>". */
int waldio_errno(int rc, int err, const char *zWhat, const char *zPath);

#endif
