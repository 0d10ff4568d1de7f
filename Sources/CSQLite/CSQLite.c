// libsqlite3's functions that the reports collector calls, as lazy stubs (CSystemShims.h says how).
// Each definition must match sqlite3.h's declaration, which the compiler checks; a function the Swift
// code starts to call needs its line here, or the link fails naming it.
#include "CSQLite.h"
// The soname Debian's libsqlite3-0 installs.
#define CSYSTEMSHIMS_SONAME "libsqlite3.so.0"
#include "CSystemShims.h"

LAZY(int, sqlite3_bind_int64, (sqlite3_stmt *a, int b, sqlite3_int64 c), (a, b, c))
LAZY(int, sqlite3_bind_null, (sqlite3_stmt *a, int b), (a, b))
LAZY(int, sqlite3_bind_text, (sqlite3_stmt *a, int b, const char *c, int d, void (*e)(void *)), (a, b, c, d, e))
LAZY(int, sqlite3_busy_timeout, (sqlite3 *a, int b), (a, b))
LAZY(int, sqlite3_changes, (sqlite3 *a), (a))
LAZY(int, sqlite3_clear_bindings, (sqlite3_stmt *a), (a))
LAZY(int, sqlite3_close_v2, (sqlite3 *a), (a))
LAZY(sqlite3_int64, sqlite3_column_int64, (sqlite3_stmt *a, int b), (a, b))
LAZY(const unsigned char *, sqlite3_column_text, (sqlite3_stmt *a, int b), (a, b))
LAZY(int, sqlite3_column_type, (sqlite3_stmt *a, int b), (a, b))
LAZY(const char *, sqlite3_errmsg, (sqlite3 *a), (a))
LAZY(const char *, sqlite3_errstr, (int a), (a))
LAZY(int, sqlite3_exec, (sqlite3 *a, const char *b, int (*c)(void *, int, char **, char **), void *d, char **e), (a, b, c, d, e))
LAZY(int, sqlite3_finalize, (sqlite3_stmt *a), (a))
LAZY(sqlite3_int64, sqlite3_last_insert_rowid, (sqlite3 *a), (a))
LAZY(int, sqlite3_open_v2, (const char *a, sqlite3 **b, int c, const char *d), (a, b, c, d))
LAZY(int, sqlite3_prepare_v2, (sqlite3 *a, const char *b, int c, sqlite3_stmt **d, const char **e), (a, b, c, d, e))
LAZY(int, sqlite3_reset, (sqlite3_stmt *a), (a))
LAZY(int, sqlite3_step, (sqlite3_stmt *a), (a))
