/*
** wal_layout.c — the table of layouts (wal_layout.h): the only place that
** knows them all.
*/
#include "wal_layout.h"
#include "waldio.h"

#include <stddef.h>

const wal_layout *wal_layout_find(int id){
  static const wal_layout *const aLayout[] = {
    &wal_layout_standard, &wal_layout_embed, &wal_layout_pad4k,
    &wal_layout_pad8k
  };
  size_t i;
  for(i=0; i<sizeof(aLayout)/sizeof(aLayout[0]); i++){
    if( aLayout[i]->id==id ) return aLayout[i];
  }
  return NULL;
}
