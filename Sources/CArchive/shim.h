#ifndef OFFLINEPKG_CARCHIVE_SHIM_H
#define OFFLINEPKG_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#endif
