/*
 * replay_main.c -- runs a libFuzzer target over every file of its corpus directory, without
 * libFuzzer, so `make test` replays each corpus under gcc + ASan/UBSan.
 *
 * USAGE: fuzz_<target> CORPUS_DIR   (prints "# N passed, 0 failed"; a crash aborts)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int main(int argc, char **argv);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL || fread(buf, 1, size, f) != size) {
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *dir = opendir(argv[1]);
    if (dir == NULL) {
        perror(argv[1]);
        printf("# 0 passed, 1 failed\n");
        return 1;
    }
    int count = 0, errors = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        if (replay_file(path) != 0) {
            errors++;
        } else {
            count++;
        }
    }
    closedir(dir);
    printf("replayed %d inputs from %s\n", count, argv[1]);
    printf("# %d passed, %d failed\n", count > 0 ? 1 : 0, (errors > 0 || count == 0) ? 1 : 0);
    return (errors > 0 || count == 0) ? 1 : 0;
}
