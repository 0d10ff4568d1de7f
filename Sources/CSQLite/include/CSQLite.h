#ifndef OFFLINEPKG_CSQLITE_H
#define OFFLINEPKG_CSQLITE_H
// The reports collector (`offlinepkg reports serve/import/show`) keeps its events in SQLite. Only the
// publisher-side module OfflinePkgReports imports this: a host app never links SQLite, and the CLI
// loads it at the first database it opens (CSQLite.c), so no other command maps it.
#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro that casts -1 to a function pointer, which Swift does not import: binding
// text or a blob with it makes SQLite copy the bytes before the call returns.
static inline sqlite3_destructor_type csqlite_transient(void) { return SQLITE_TRANSIENT; }

#endif
