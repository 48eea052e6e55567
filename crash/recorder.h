/*
** recorder.h — the event log written by the crash recorder (recorder.c) and
** read by python/waldio/crash/events.py. docs/crash.md describes the model.
**
** File: the 16-byte magic "WALDIOREC1\n\0\0\0\0\0", then events. Every event
** is a fixed 48-byte little-endian header followed by `len` payload bytes:
**
**   u8  type     REC_* below
**   u8  cls      for WRITE/ZERO: REC_PAGE (buffered: page cache),
**                REC_DEV (O_DIRECT: device write cache), REC_FUA (RWF_DSYNC:
**                durable when it returns); for OPEN: REC_SRC_VFS/REC_SRC_SYS
**   u16 pad
**   i32 fid      file id (assigned at open; -1 if none)
**   i64 a        offset / size / flags / sync id / mark value / errno
**   i64 b        length / created / sync kind / result
**   u64 t_ns     CLOCK_MONOTONIC when the event was recorded (completion)
**   u64 seq      event number in the logging process (0, 1, 2, ...)
**   u32 len      payload bytes
**   u32 pid      the process that logged it
**
** Events are recorded when the call *completes*, in completion order, under
** one mutex; a sync is two events (BEGIN when called, END when it returned)
** so that a flush covers exactly the writes that completed before it began.
** Several processes may append to one log (recorder_join, fork): each event
** is one O_APPEND writev, so the order in the file is the global order.
** File ids and sync ids are per process: the pair (pid, id) names one. A
** forked child's first event is FORK; ids it did not assign itself are its
** parent's (inherited descriptors).
*/
#ifndef WALDIO_CRASH_RECORDER_H
#define WALDIO_CRASH_RECORDER_H

#define REC_MAGIC "WALDIOREC1\n\0\0\0\0\0"
#define REC_MAGIC_BYTES 16
#define REC_HDR_BYTES 48

enum {
  REC_OPEN = 1,       /* fid, a=open flags, b=created; payload: path */
  REC_CLOSE = 2,      /* fid */
  REC_WRITE = 3,      /* fid, a=offset, b=length; payload: the bytes */
  REC_ZERO = 4,       /* fid, a=offset, b=length (all-zero write) */
  REC_TRUNC = 5,      /* fid, a=new size */
  REC_SYNC_BEGIN = 6, /* fid, a=sync id, b=kind (REC_SYNC_*) */
  REC_SYNC_END = 7,   /* fid, a=sync id, b=0 or errno */
  REC_UNLINK = 8,     /* payload: path */
  REC_RENAME = 9,     /* payload: from NUL to */
  REC_DIRSYNC = 10,   /* payload: directory path */
  REC_MARK = 11,      /* a=value; payload: name */
  REC_FAULT = 12,     /* fid, a=errno, b=length; payload: call name */
  REC_FALLOC = 13,    /* fid, a=offset, b=length; cls: 0; payload: u32 mode */
  REC_FORK = 14       /* a=parent pid: the first event of a forked child */
};

enum { REC_PAGE = 0, REC_DEV = 1, REC_FUA = 2 };
enum { REC_SRC_VFS = 0, REC_SRC_SYS = 1 };
enum { REC_SYNC_XSYNC = 0, REC_SYNC_FDATASYNC = 1, REC_SYNC_FSYNC = 2 };

#endif
