/*
 * store_scan.c -- a directory's entries in name order, in bounded memory. See store_scan.h.
 *
 * IMPLEMENTATION NOTES
 *   names[] holds up to STORE_SCAN_BATCH names; heap[] orders their indices as a max-heap
 *   while a pass reads the directory (the largest kept name is at heap[0], so a smaller name
 *   replaces it in O(log n)), then is sorted in place (heap sort) into ascending order.
 */
#include "store/store_scan.h"

#include "mailvault.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STORE_SCAN_NAME_SIZE 256 /* NAME_MAX + 1 on Linux */

struct store_scan {
    char *dir;
    store_scan_accept_fn accept;
    void *arg;
    char (*names)[STORE_SCAN_NAME_SIZE];
    size_t heap[STORE_SCAN_BATCH];
    size_t count;                    /* names held in this pass */
    size_t next;                     /* next index of heap[] to hand out (after sorting) */
    int more;                        /* the pass had to drop names: another pass follows */
    char last[STORE_SCAN_NAME_SIZE]; /* the last name handed out ("" before the first) */
};

static int store_scan_less(const struct store_scan *sc, size_t a, size_t b)
{
    return strcmp(sc->names[sc->heap[a]], sc->names[sc->heap[b]]) < 0;
}

static void store_scan_swap(struct store_scan *sc, size_t a, size_t b)
{
    size_t t = sc->heap[a];
    sc->heap[a] = sc->heap[b];
    sc->heap[b] = t;
}

/* Restores the max-heap below index i within the first n entries. */
static void store_scan_sift_down(struct store_scan *sc, size_t i, size_t n)
{
    for (;;) {
        size_t left = 2 * i + 1, right = left + 1, top = i;
        if (left < n && store_scan_less(sc, top, left)) {
            top = left;
        }
        if (right < n && store_scan_less(sc, top, right)) {
            top = right;
        }
        if (top == i) {
            return;
        }
        store_scan_swap(sc, i, top);
        i = top;
    }
}

static void store_scan_sift_up(struct store_scan *sc, size_t i)
{
    while (i > 0 && store_scan_less(sc, (i - 1) / 2, i)) {
        store_scan_swap(sc, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

/* Offers one name to the pass: kept if there is room or if it is smaller than the largest. */
static void store_scan_offer(struct store_scan *sc, const char *name, size_t len)
{
    if (sc->count < STORE_SCAN_BATCH) {
        memcpy(sc->names[sc->count], name, len + 1);
        sc->heap[sc->count] = sc->count;
        sc->count++;
        store_scan_sift_up(sc, sc->count - 1);
        return;
    }
    sc->more = 1;
    if (strcmp(name, sc->names[sc->heap[0]]) < 0) {
        memcpy(sc->names[sc->heap[0]], name, len + 1);
        store_scan_sift_down(sc, 0, sc->count);
    }
}

/* One pass: the smallest accepted names after sc->last, sorted ascending. */
static int store_scan_pass(struct store_scan *sc)
{
    DIR *d = opendir(sc->dir);
    if (d == NULL) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    sc->count = 0;
    sc->next = 0;
    sc->more = 0;
    struct dirent *e;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        const char *name = e->d_name;
        size_t len = strlen(name);
        /* (1) not . or ..  (2) fits  (3) after the last one handed out  (4) wanted */
        if ((strcmp(name, ".") == 0 || strcmp(name, "..") == 0) || len >= STORE_SCAN_NAME_SIZE ||
            (sc->last[0] != '\0' && strcmp(name, sc->last) <= 0) ||
            (sc->accept != NULL && !sc->accept(sc->arg, name))) {
            continue;
        }
        store_scan_offer(sc, name, len);
    }
    int read_errno = errno;
    closedir(d);
    if (read_errno != 0) {
        errno = read_errno;
        return MV_EIO;
    }
    for (size_t n = sc->count; n > 1; n--) {
        store_scan_swap(sc, 0, n - 1);
        store_scan_sift_down(sc, 0, n - 1);
    }
    return MV_OK;
}

int store_scan_open(const char *dir,
                    store_scan_accept_fn accept,
                    void *arg,
                    struct store_scan **out)
{
    *out = NULL;
    struct store_scan *sc = calloc(1, sizeof *sc);
    if (sc == NULL) {
        return MV_ENOMEM;
    }
    sc->dir = strdup(dir);
    sc->names = malloc(STORE_SCAN_BATCH * sizeof *sc->names);
    if (sc->dir == NULL || sc->names == NULL) {
        store_scan_close(&sc);
        return MV_ENOMEM;
    }
    sc->accept = accept;
    sc->arg = arg;
    int rc = store_scan_pass(sc);
    if (rc != MV_OK) {
        store_scan_close(&sc);
        return rc;
    }
    *out = sc;
    return MV_OK;
}

int store_scan_next(struct store_scan *sc, const char **name)
{
    if (sc->next == sc->count) {
        if (!sc->more) {
            return 0;
        }
        int rc = store_scan_pass(sc);
        if (rc != MV_OK) {
            return rc == MV_ENOTFOUND ? 0 : rc;
        }
        if (sc->count == 0) {
            return 0;
        }
    }
    const char *n = sc->names[sc->heap[sc->next++]];
    memcpy(sc->last, n, strlen(n) + 1);
    *name = n;
    return 1;
}

void store_scan_close(struct store_scan **scan)
{
    if (scan == NULL || *scan == NULL) {
        return;
    }
    free((*scan)->dir);
    free((*scan)->names);
    free(*scan);
    *scan = NULL;
}
