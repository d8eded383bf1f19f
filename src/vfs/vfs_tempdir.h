/*
 * vfs_tempdir.h -- where the VFS creates temporary files, per thread.
 *
 * SQLite names temporary files itself (in SQLITE_TMPDIR, TMPDIR or /var/tmp). A mail store
 * wants them in its own tmp/ directory, on the same filesystem as the store, so that a
 * large VACUUM or sort cannot fill the system's temp disk. A VFS never learns which
 * connection opens a temp file, but the temp file is opened on the thread that runs the
 * connection's statement: the store sets its directory for the thread before each
 * statement, and the VFS names unnamed temp files there.
 */
#ifndef MV_VFS_TEMPDIR_H
#define MV_VFS_TEMPDIR_H

/* Sets this thread's directory to a copy of dir (NULL or "": SQLite's default; so is a dir of
 * MV_PATH_MAX bytes or more). The get returns this thread's copy, or NULL. */
void mv_vfs_temp_dir_set(const char *dir);
const char *mv_vfs_temp_dir_get(void);

#endif
