/*
** options.c — defaults and parsing of waldio options (see options.h).
*/
#include "options.h"
#include "errors.h"
#include "sqlite_api.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void waldio_options_default(waldio_options *o){
  o->layout = WALDIO_LAYOUT_AUTO;
  o->sync = WALDIO_SYNC_AUTO;
  o->io = WALDIO_IO_DIRECT;
  o->prealloc_bytes = WALDIO_DEFAULT_PREALLOC;
  o->cache_bytes = WALDIO_DEFAULT_CACHE;
  o->flush_ms = WALDIO_DEFAULT_FLUSH_MS;
  o->group = WALDIO_GROUP_AUTO;
  o->group_bytes = WALDIO_DEFAULT_GROUP_BYTES;
  o->group_ms = WALDIO_DEFAULT_GROUP_MS;
}

static const char *azLayout[] = { "auto", "embed", "pad4k", "pad8k", "standard" };
static const char *azIo[] = { "direct", "auto", "buffered" };
static const char *azGroup[] = { "off", "async", "durable", "strict", "auto" };

const char *waldio_layout_name(int layout){
  return layout>=0 && layout<=WALDIO_LAYOUT_STANDARD ? azLayout[layout] : "unknown";
}

const char *waldio_io_name(int io){
  return io>=0 && io<=2 ? azIo[io] : "unknown";
}

const char *waldio_group_name(int group){
  return group>=0 && group<=WALDIO_GROUP_AUTO ? azGroup[group] : "unknown";
}

int waldio_parse_group(const char *z, int *pOut){
  int i;
  for(i=0; i<=WALDIO_GROUP_AUTO; i++){
    if( strcasecmp(z, azGroup[i])==0 ){ *pOut = i; return 0; }
  }
  return -1;
}

int waldio_parse_layout(const char *z, int *pOut){
  int i;
  for(i=0; i<=WALDIO_LAYOUT_STANDARD; i++){
    if( strcasecmp(z, azLayout[i])==0 ){ *pOut = i; return 0; }
  }
  return -1;
}

int waldio_parse_io(const char *z, int *pOut){
  int i;
  for(i=0; i<=2; i++){
    if( strcasecmp(z, azIo[i])==0 ){ *pOut = i; return 0; }
  }
  return -1;
}

int waldio_parse_sync(const char *z, int *pOut){
  if( strcasecmp(z, "auto")==0 ){ *pOut = WALDIO_SYNC_AUTO; return 0; }
  if( strcasecmp(z, "persistent")==0 ){ *pOut = WALDIO_SYNC_PERSISTENT; return 0; }
  if( strcasecmp(z, "ns")==0 ){ *pOut = WALDIO_SYNC_NS; return 0; }
  return -1;
}

int waldio_parse_bytes(const char *z, long long *pOut){
  char *zEnd;
  long long v;
  errno = 0;
  v = strtoll(z, &zEnd, 10);
  if( errno || zEnd==z || v<0 ) return -1;
  switch( toupper((unsigned char)*zEnd) ){
    case 0:   break;
    case 'K': v <<= 10; zEnd++; break;
    case 'M': v <<= 20; zEnd++; break;
    case 'G': v <<= 30; zEnd++; break;
    default:  return -1;
  }
  if( *zEnd=='i' || *zEnd=='I' ) zEnd++;
  if( *zEnd=='b' || *zEnd=='B' ) zEnd++;
  if( *zEnd ) return -1;
  *pOut = v;
  return 0;
}

int waldio_parse_ms(const char *z, int *pOut){
  char *zEnd;
  long v;
  errno = 0;
  v = strtol(z, &zEnd, 10);
  if( errno || zEnd==z || *zEnd || v<1 || v>WALDIO_MAX_FLUSH_MS ) return -1;
  *pOut = (int)v;
  return 0;
}

static int bad_uri(const char *zKey, const char *zVal, const char *zExpect){
  return waldio_error(SQLITE_CANTOPEN, "bad URI parameter %s=%s (expected %s)",
                      zKey, zVal, zExpect);
}

int waldio_options_from_uri(waldio_options *o, const char *zUri){
  const char *z;
  if( (z = sqlite3_uri_parameter(zUri, "waldio_layout"))!=0
   && waldio_parse_layout(z, &o->layout) ){
    return bad_uri("waldio_layout", z, "auto, embed, pad4k, pad8k or standard");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_sync"))!=0
   && waldio_parse_sync(z, &o->sync) ){
    return bad_uri("waldio_sync", z, "auto, persistent or ns");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_io"))!=0
   && waldio_parse_io(z, &o->io) ){
    return bad_uri("waldio_io", z, "direct, auto or buffered");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_prealloc"))!=0
   && (waldio_parse_bytes(z, &o->prealloc_bytes)
       || o->prealloc_bytes<WALDIO_MIN_PREALLOC) ){
    return bad_uri("waldio_prealloc", z, "a size >= 64K, e.g. 4M");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_cache"))!=0
   && waldio_parse_bytes(z, &o->cache_bytes) ){
    return bad_uri("waldio_cache", z, "a size, e.g. 4M, or 0 to disable");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_flush_ms"))!=0
   && waldio_parse_ms(z, &o->flush_ms) ){
    return bad_uri("waldio_flush_ms", z, "milliseconds between 1 and 60000");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_group"))!=0
   && waldio_parse_group(z, &o->group) ){
    return bad_uri("waldio_group", z, "off, async, durable, strict or auto");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_group_bytes"))!=0
   && (waldio_parse_bytes(z, &o->group_bytes) || o->group_bytes<4096
       || o->group_bytes>WALDIO_MAX_GROUP_BYTES) ){
    return bad_uri("waldio_group_bytes", z, "a size between 4K and 16M");
  }
  if( (z = sqlite3_uri_parameter(zUri, "waldio_group_ms"))!=0
   && waldio_parse_ms(z, &o->group_ms) ){
    return bad_uri("waldio_group_ms", z, "milliseconds between 1 and 60000");
  }
  return SQLITE_OK;
}
