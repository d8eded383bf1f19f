/*
 * store_tune.c -- mv_server_tune(): process-wide SQLite settings for a program that serves
 * many stores from several threads (mailvaultd, the benchmarks).
 *
 * Debian's SQLite is built with SQLITE_OMIT_LOOKASIDE, so every row, cursor and statement
 * step allocates through the system malloc, and with memory statistics on (the default)
 * each of those allocations and frees takes SQLite's global memory mutex: all the server's
 * workers queue on one lock for what is thread-local work. Turning the statistics off
 * removes that lock; the only loss is sqlite3_memory_used()/sqlite3_memory_highwater(),
 * which then report 0 (mailvault reads neither). sqlite3_config() is only allowed before
 * SQLite initialises, which is why this is a call of its own for the program's start.
 *
 * It also gets the MIME parser ready on the calling thread (store_parse_init), before the
 * program starts the threads that parse mail: see parse_init_once() for why.
 */
#include "store/store.h"
#include "store/store_parse.h"

int mv_server_tune(void)
{
    store_parse_init(); /* the MIME parser's types, made on this thread (store_parse.c) */
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK ? MV_OK : MV_EBUSY;
}
