#ifndef OFFLINEPKG_CARCHIVE_H
#define OFFLINEPKG_CARCHIVE_H
// libarchive, loaded at the first archive read or written (CArchive.c): a command that unpacks nothing
// never maps it, nor libxml2, ICU, nettle and the compressors it needs.
#include <archive.h>
#include <archive_entry.h>
#endif
