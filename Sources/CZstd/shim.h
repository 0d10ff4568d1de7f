#ifndef OFFLINEPKG_CZSTD_SHIM_H
#define OFFLINEPKG_CZSTD_SHIM_H
// The publisher writes chunked tar.zst (one zstd frame per tar member, SPEC §13) with libzstd itself:
// libarchive's zstd filter makes one stream of the whole archive. Devices never link this.
#include <zstd.h>
#endif
