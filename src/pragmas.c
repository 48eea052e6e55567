/*
** pragmas.c — waldio's SQL interface, answered through SQLITE_FCNTL_PRAGMA.
**
**   PRAGMA waldio;                  status of this database's log (JSON)
**   PRAGMA waldio_sync;             effective durability: full | normal |
**                                   off (from PRAGMA synchronous) | persistent
**   PRAGMA waldio_sync=persistent;  O_DSYNC log writes (FUA where available)
**   PRAGMA waldio_sync=ns;          synchronous=NORMAL commits as direct
**                                   writes (the paper's NS)
**   PRAGMA waldio_sync=auto;        follow PRAGMA synchronous again
**   PRAGMA waldio_stats;            counters of this log in this process (JSON)
**   PRAGMA waldio_stats=reset;      zero them
**   PRAGMA waldio_flush_ms[=N];     normal-mode flush bound in milliseconds
**   PRAGMA waldio_group[=M];        group commit: off | async | durable |
**                                   strict | auto (the default), for every
**                                   connection of this process (other
**                                   processes may join)
**   PRAGMA waldio_group_bytes[=N];  group buffer size (4K..16M)
**   PRAGMA waldio_group_ms[=N];     async group interval in milliseconds
**   PRAGMA waldio_layout[=L];       the log's layout; setting it names the
**                                   layout a new log of this connection
**                                   gets (an open log keeps its own)
**
** SQLite shows a handled pragma's answer as one row with one column, so
** structured answers are JSON objects. Unknown waldio_* names are an error,
** not silently ignored as SQLite ignores unknown pragmas.
*/
#include "vfs_internal.h"
#include "errors.h"
#include "options.h"

#include <string.h>
#include <strings.h>

static int answer(char **az, int rc, char *z){
  az[0] = z;
  return z ? rc : SQLITE_NOMEM;
}

/* A bad pragma: the message is SQLite's error message, and like every
** waldio refusal it also reaches sqlite3_log (and stderr when verbose). */
static int refuse(char **az, char *z){
  if( z ) waldio_error(SQLITE_ERROR, "%s", z);
  return answer(az, SQLITE_ERROR, z);
}

/* A JSON string literal for z (quotes included), or NULL on OOM. */
static char *json_str(const char *z){
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendchar(s, 1, '"');
  for(; *z; z++){
    unsigned char c = (unsigned char)*z;
    if( c=='"' || c=='\\' ){
      sqlite3_str_appendf(s, "\\%c", c);
    }else if( c<0x20 ){
      sqlite3_str_appendf(s, "\\u%04x", c);
    }else{
      sqlite3_str_appendchar(s, 1, (char)c);
    }
  }
  sqlite3_str_appendchar(s, 1, '"');
  return sqlite3_str_finish(s);
}

static const char *effective_sync(const waldio_db_file *p){
  static const char *az[] = { "off", "normal", "full", "full" };
  int level;
  if( p->opts.sync==WALDIO_SYNC_PERSISTENT ) return "persistent";
  level = waldio_db_sync_level(p);
  if( level==1 && p->opts.sync==WALDIO_SYNC_NS ) return "ns";
  return level>=0 && level<=3 ? az[level] : "unknown";
}

/* How group commit runs in this process: "process" (solo: commits are
** buffered in memory while no other process has the log open) or
** "shared" (commits written, flushes shared between processes). */
static const char *group_scope(waldio_log *pLog){
  if( !pLog || log_group_mode(pLog)==WALDIO_GROUP_OFF ) return "off";
  return log_group_solo(pLog) ? "process" : "shared";
}

/* Why the group mode in force is: the log's (every connection of this
** process), or before the log is open this connection's. */
static const char *group_why(const waldio_db_file *p, waldio_log *pLog){
  if( pLog ) return log_group_why(pLog);
  return p->zGroupFrom ? p->zGroupFrom : GROUP_WHY_DEFAULT;
}

static char *status_json(waldio_db_file *p){
  waldio_log *pLog = p->pWal ? p->pWal->pLog : 0;
  char *zVfs = json_str(p->pVfs->zName);
  char *zGroupWhy = json_str(group_why(p, pLog));
  char *z = sqlite3_mprintf("{\"version\":\"%s\",\"vfs\":%s,"
      "\"sync\":\"%s\",\"sync_setting\":\"%s\",\"io_setting\":\"%s\","
      "\"layout_setting\":\"%s\",\"prealloc_setting\":%lld,"
      "\"cache_setting\":%lld,\"flush_ms\":%d,\"group\":\"%s\","
      "\"group_scope\":\"%s\",\"group_reason\":%s,\"flush_alone\":%s,"
      "\"group_bytes\":%lld,\"group_ms\":%d,\"idle_log_bytes\":%lld,"
      "\"wal_open\":%s,\"passthrough\":%s",
      WALDIO_VERSION, zVfs, effective_sync(p),
      p->opts.sync==WALDIO_SYNC_PERSISTENT ? "persistent"
        : p->opts.sync==WALDIO_SYNC_NS ? "ns" : "auto",
      waldio_io_name(p->opts.io), waldio_layout_name(p->opts.layout),
      p->opts.prealloc_bytes, p->opts.cache_bytes, p->opts.flush_ms,
      waldio_group_name(pLog ? log_group_setting(pLog) : p->opts.group),
      group_scope(pLog), zGroupWhy, p->flushAlone ? "true" : "false",
      p->opts.group_bytes, p->opts.group_ms, (long long)waldio_db_idle_bound(p),
      pLog ? "true" : "false",
      p->passthrough>0 ? "true" : "false");
  sqlite3_free(zVfs);
  sqlite3_free(zGroupWhy);
  if( z && !pLog && p->zStockIo ){
    char *zWhy = json_str(p->zStockIo);
    z = sqlite3_mprintf("%z,\"layout\":\"standard\",\"io\":\"stock\","
        "\"io_reason\":%s,\"wal_index\":\"sqlite\"", z, zWhy);
    sqlite3_free(zWhy);
  }
  if( z && pLog ){
    const dio_file *f = &pLog->file;
    wal_geometry g;
    i64 phys;
    int hasGen;
    pthread_mutex_lock(&pLog->mutex);
    g = pLog->sb.geo;
    phys = pLog->physSize;
    hasGen = (pLog->sb.flags & SB_FLAG_HAS_HEADER)!=0;
    pthread_mutex_unlock(&pLog->mutex);
    char *zWal = json_str(pLog->zPath), *zSrc = json_str(f->zDioSource);
    char *zWhy = json_str(pLog->zLayoutWhy ? pLog->zLayoutWhy : "");
    char *zSide = json_str(pLog->side.zWhy);
    z = sqlite3_mprintf("%z,\"wal_index\":\"%s\",\"flush_region\":\"%s\","
        "\"flush_region_reason\":%s", z,
        p->nativeShm ? "sqlite" : "waldio",
        !p->nativeShm ? "wal-index" : pLog->side.pRegion ? "side file"
          : pLog->side.tried ? "none" : "not needed yet", zSide);
    sqlite3_free(zSide);
    if( z ) z = sqlite3_mprintf("%z,\"wal\":%s,\"layout\":\"%s\",\"layout_reason\":%s,\"io\":\"%s\","
        "\"fs\":\"%s\",\"page_size\":%u,\"block_size\":%u,\"header_area\":%u,"
        "\"frame_bytes\":%u,\"preallocated_bytes\":%lld,"
        "\"preallocated_frames\":%lld,\"holds_frames\":%s,"
        "\"dio_offset_align\":%u,\"dio_mem_align\":%u,\"dio_align_source\":%s,"
        "\"write_zeroes\":\"%s\",\"cache_frames\":%u,\"readonly\":%s", z,
        zWal, pLog->pLayout->zName, zWhy,
        f->direct ? "direct" : "buffered", f->zFs, g.page, g.block, g.area,
        g.slot, (long long)phys,
        (long long)(g.slot ? (phys - g.area) / g.slot : 0),
        hasGen ? "true" : "false", f->offAlign, f->memAlign, zSrc,
        f->writeZeroes>0 ? "used" : f->writeZeroes<0 ? "unsupported" : "untried",
        pLog->cache.nSlot, f->readonly ? "true" : "false");
    sqlite3_free(zWal);
    sqlite3_free(zSrc);
    sqlite3_free(zWhy);
  }
  return z ? sqlite3_mprintf("%z}", z) : 0;
}

static char *stats_json(waldio_log *pLog){
  waldio_stats s;
  log_get_stats(pLog, &s);
  return sqlite3_mprintf("{\"frames_written\":%llu,\"page_overwrites\":%llu,"
      "\"header_rewrites\":%llu,\"other_writes\":%llu,\"block0_writes\":%llu,"
      "\"log_writes\":%llu,\"dsync_writes\":%llu,\"bytes_written\":%llu,"
      "\"flushes\":%llu,\"flushes_skipped\":%llu,\"timer_flushes\":%llu,"
      "\"prealloc_extends\":%llu,\"prealloc_bytes\":%llu,\"prealloc_syncs\":%llu,"
      "\"cache_hits\":%llu,"
      "\"cache_misses\":%llu,\"cache_invalidations\":%llu,\"disk_reads\":%llu,"
      "\"device_reads\":%llu,\"readaheads\":%llu,\"bytes_read\":%llu,\"buffered_writes\":%llu,\"logical_truncates\":%llu,\"group_commits\":%llu,"
      "\"group_writes\":%llu,\"group_waits\":%llu,\"edge_reads\":%llu,"
      "\"early_releases\":%llu,\"sharer_counts\":%llu,\"alone_flushes\":%llu}",
      s.frames_written, s.page_overwrites, s.header_rewrites, s.other_writes,
      s.block0_writes, s.log_writes, s.dsync_writes, s.bytes_written,
      s.flushes, s.flushes_skipped, s.timer_flushes, s.prealloc_extends,
      s.prealloc_bytes, s.prealloc_syncs, s.cache_hits, s.cache_misses, s.cache_invalidations,
      s.disk_reads, s.device_reads, s.readaheads, s.bytes_read, s.buffered_writes, s.logical_truncates, s.group_commits,
      s.group_writes, s.group_waits, s.edge_reads, s.early_releases,
      s.sharer_counts, s.alone_flushes);
}

static int pragma_sync(waldio_db_file *p, char **az){
  const char *zArg = az[2];
  int v;
  if( zArg ){
    if( waldio_parse_sync(zArg, &v) ){
      return refuse(az, sqlite3_mprintf("waldio_sync=%s: expected"
          " auto, persistent or ns (full and normal follow PRAGMA synchronous)",
          zArg));
    }
    p->opts.sync = v;
  }
  return answer(az, SQLITE_OK, sqlite3_mprintf("%s", effective_sync(p)));
}

static int pragma_stats(waldio_db_file *p, char **az){
  waldio_log *pLog = p->pWal ? p->pWal->pLog : 0;
  if( az[2] && strcasecmp(az[2], "reset")!=0 ){
    return refuse(az,
                  sqlite3_mprintf("waldio_stats=%s: only 'reset' is accepted", az[2]));
  }
  if( !pLog ) return answer(az, SQLITE_OK, sqlite3_mprintf("{}"));
  if( az[2] ) log_reset_stats(pLog);
  return answer(az, SQLITE_OK, stats_json(pLog));
}

static int pragma_flush_ms(waldio_db_file *p, char **az){
  int v;
  if( az[2] ){
    if( waldio_parse_ms(az[2], &v) ){
      return refuse(az, sqlite3_mprintf("waldio_flush_ms=%s:"
          " expected milliseconds between 1 and 60000", az[2]));
    }
    p->opts.flush_ms = v;
    if( p->pWal ) log_set_flush_ms(p->pWal->pLog, v);
  }
  return answer(az, SQLITE_OK, sqlite3_mprintf("%d", p->opts.flush_ms));
}

/* waldio_group, waldio_group_bytes, waldio_group_ms: stored for this
** connection and applied to the log (all connections of the process). */
static int pragma_group(waldio_db_file *p, char **az, const char *zWhich){
  waldio_options o = p->opts;
  const char *zArg = az[2];
  int rc;
  if( zArg ){
    int bad;
    if( strcmp(zWhich, "")==0 ){
      bad = waldio_parse_group(zArg, &o.group);
    }else if( strcmp(zWhich, "_bytes")==0 ){
      bad = waldio_parse_bytes(zArg, &o.group_bytes) || o.group_bytes<4096
         || o.group_bytes>WALDIO_MAX_GROUP_BYTES;
    }else{
      bad = waldio_parse_ms(zArg, &o.group_ms);
    }
    if( bad ){
      return refuse(az, sqlite3_mprintf("waldio_group%s=%s: expected"
          " %s", zWhich, zArg, zWhich[0]==0 ? "off, async, durable, strict or auto"
          : zWhich[1]=='b' ? "a size between 4K and 16M" : "milliseconds, 1..60000"));
    }
    if( p->pWal ){
      rc = log_set_group(p->pWal->pLog, o.group, o.group_bytes, o.group_ms,
                         GROUP_WHY_PRAGMA);
      if( rc ){
        char zMsg[512];
        waldio_last_error(zMsg, sizeof(zMsg));
        return answer(az, rc, sqlite3_mprintf("%s", zMsg));
      }
    }
    p->opts = o;
    if( zWhich[0]==0 ) p->zGroupFrom = GROUP_WHY_PRAGMA;
  }
  if( zWhich[0]==0 ){
    int mode = p->pWal ? log_group_setting(p->pWal->pLog) : o.group;
    return answer(az, SQLITE_OK, sqlite3_mprintf("%s", waldio_group_name(mode)));
  }
  if( zWhich[1]=='b' ) return answer(az, SQLITE_OK, sqlite3_mprintf("%lld", o.group_bytes));
  return answer(az, SQLITE_OK, sqlite3_mprintf("%d", o.group_ms));
}

static int pragma_layout(waldio_db_file *p, char **az){
  const char *zArg = az[2];
  waldio_log *pLog = p->pWal ? p->pWal->pLog : 0;
  int v;
  if( zArg ){
    if( waldio_parse_layout(zArg, &v) ){
      return refuse(az, sqlite3_mprintf("waldio_layout=%s: expected auto,"
          " standard, embed, pad4k or pad8k", zArg));
    }
    if( pLog && v!=WALDIO_LAYOUT_AUTO && v!=pLog->pLayout->id ){
      return refuse(az, sqlite3_mprintf("waldio_layout=%s: the log of this"
          " database is open in the %s layout, which it keeps; `waldio"
          " convert --to %s` changes it while no connection is open", zArg,
          pLog->pLayout->zName, waldio_layout_name(v)));
    }
    p->opts.layout = v;
  }
  if( pLog ) return answer(az, SQLITE_OK, sqlite3_mprintf("%s", pLog->pLayout->zName));
  if( p->zStockIo ) return answer(az, SQLITE_OK, sqlite3_mprintf("standard"));
  return answer(az, SQLITE_OK, sqlite3_mprintf("%s", waldio_layout_name(p->opts.layout)));
}

int waldio_pragma(waldio_db_file *p, char **az){
  const char *zName = az[1];
  if( strncasecmp(zName, "waldio", 6)!=0 ) return SQLITE_NOTFOUND;
  if( zName[6]==0 ){
    if( az[2] ){
      return refuse(az,
                    sqlite3_mprintf("PRAGMA waldio takes no value"));
    }
    return answer(az, SQLITE_OK, status_json(p));
  }
  if( strcasecmp(zName, "waldio_sync")==0 ) return pragma_sync(p, az);
  if( strcasecmp(zName, "waldio_stats")==0 ) return pragma_stats(p, az);
  if( strcasecmp(zName, "waldio_flush_ms")==0 ) return pragma_flush_ms(p, az);
  if( strcasecmp(zName, "waldio_group")==0 ) return pragma_group(p, az, "");
  if( strcasecmp(zName, "waldio_group_bytes")==0 ) return pragma_group(p, az, "_bytes");
  if( strcasecmp(zName, "waldio_group_ms")==0 ) return pragma_group(p, az, "_ms");
  if( strcasecmp(zName, "waldio_layout")==0 ) return pragma_layout(p, az);
  return refuse(az, sqlite3_mprintf("unknown pragma %s; waldio's"
      " pragmas are waldio, waldio_sync, waldio_stats, waldio_flush_ms,"
      " waldio_group, waldio_group_bytes, waldio_group_ms and waldio_layout", zName));
}
