// The SQLite C API the archive uses. With the development package (libsqlite3-dev, Debian) this is
// <sqlite3.h>. Where only the run-time library is installed (the Ubuntu 24.04 GPU machine has
// libsqlite3.so.0 but no header), CMake links that library by path and the few declarations below
// stand in for the header: SQLite's C interface is a stable ABI, and these are its documented
// signatures and constants (https://sqlite.org/c3ref/funclist.html).
#pragma once

#if KHARNESS_HAVE_SQLITE3_H
#include <sqlite3.h>
#else
#include <cstdint>

extern "C" {
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef std::int64_t sqlite3_int64;
typedef void (*sqlite3_destructor_type)(void*);

int sqlite3_open_v2(const char* filename, sqlite3** db, int flags, const char* vfs);
int sqlite3_close(sqlite3* db);
int sqlite3_busy_timeout(sqlite3* db, int ms);
int sqlite3_exec(sqlite3* db, const char* sql, int (*callback)(void*, int, char**, char**),
                 void* arg, char** errmsg);
void sqlite3_free(void* p);
const char* sqlite3_errmsg(sqlite3* db);
const char* sqlite3_errstr(int code);
int sqlite3_prepare_v2(sqlite3* db, const char* sql, int bytes, sqlite3_stmt** stmt,
                       const char** tail);
int sqlite3_step(sqlite3_stmt* stmt);
int sqlite3_finalize(sqlite3_stmt* stmt);
int sqlite3_bind_text(sqlite3_stmt* stmt, int index, const char* text, int bytes,
                      sqlite3_destructor_type destructor);
int sqlite3_bind_null(sqlite3_stmt* stmt, int index);
int sqlite3_bind_int64(sqlite3_stmt* stmt, int index, sqlite3_int64 value);
int sqlite3_bind_double(sqlite3_stmt* stmt, int index, double value);
const unsigned char* sqlite3_column_text(sqlite3_stmt* stmt, int column);
sqlite3_int64 sqlite3_column_int64(sqlite3_stmt* stmt, int column);
double sqlite3_column_double(sqlite3_stmt* stmt, int column);
int sqlite3_column_type(sqlite3_stmt* stmt, int column);
int sqlite3_errcode(sqlite3* db);
const char* sqlite3_db_filename(sqlite3* db, const char* name);
int sqlite3_db_config(sqlite3* db, int op, ...);
}

#define SQLITE_OK 0
#define SQLITE_INTEGER 1
#define SQLITE_FLOAT 2
#define SQLITE_NULL 5
#define SQLITE_BUSY 5
#define SQLITE_CORRUPT 11
#define SQLITE_NOTADB 26
#define SQLITE_ROW 100
#define SQLITE_DONE 101
#define SQLITE_OPEN_READONLY 0x00000001
#define SQLITE_OPEN_READWRITE 0x00000002
#define SQLITE_OPEN_CREATE 0x00000004
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define SQLITE_TRANSIENT ((sqlite3_destructor_type)-1)
#define SQLITE_DBCONFIG_DEFENSIVE 1010
#define SQLITE_DBCONFIG_TRUSTED_SCHEMA 1017
#endif
