/*
 * vfs_registry.c -- the open main database files, so that a journal or WAL file finds the
 * codec (key) of the database it belongs to.
 *
 * IMPLEMENTATION NOTES
 *   SQLite allocates a database's name, its URI parameters, its journal name and its WAL name
 *   in one block and passes those very pointers to xOpen and xAccess. A journal or WAL is
 *   therefore matched by pointer identity against sqlite3_filename_journal() and
 *   sqlite3_filename_wal() of each open main file: exact even when several connections open
 *   the same database, and safe for names SQLite did not allocate (a super-journal's list),
 *   which must never be handed to sqlite3_filename_database().
 */
#include "vfs/vfs.h"

#include <pthread.h>

static pthread_mutex_t mv_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct mv_file *mv_registry_head;

void mv_registry_add(struct mv_file *f)
{
    pthread_mutex_lock(&mv_registry_mutex);
    f->next = mv_registry_head;
    mv_registry_head = f;
    pthread_mutex_unlock(&mv_registry_mutex);
}

void mv_registry_remove(struct mv_file *f)
{
    pthread_mutex_lock(&mv_registry_mutex);
    for (struct mv_file **pp = &mv_registry_head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    }
    f->next = NULL;
    pthread_mutex_unlock(&mv_registry_mutex);
}

struct mv_codec *mv_registry_codec_for(const char *zName)
{
    struct mv_codec *found = NULL;
    if (zName == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&mv_registry_mutex);
    for (struct mv_file *f = mv_registry_head; f != NULL; f = f->next) {
        if (f->name == NULL) {
            continue;
        }
        if (zName == sqlite3_filename_journal(f->name) || zName == sqlite3_filename_wal(f->name)) {
            found = f->codec;
            found->refs++;
            break;
        }
    }
    pthread_mutex_unlock(&mv_registry_mutex);
    return found;
}
