#ifndef OFFLINEPKG_CZSTD_SHIM_H
#define OFFLINEPKG_CZSTD_SHIM_H
// The publisher writes chunked tar.zst (one zstd frame per tar member, docs/protocol.md#chunked-archives-and-file-indexes) with libzstd itself:
// libarchive's zstd filter makes one stream of the whole archive. Devices never link this.
#include <zstd.h>
#endif
