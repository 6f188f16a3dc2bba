/* SPDX-License-Identifier: MIT */
/*
 * main() for the fuzz targets when libFuzzer is not linked in: feeds each file named on
 * the command line (directories: each regular file in them) to LLVMFuzzerTestOneInput().
 * Without arguments it replays $top_srcdir/tests/fuzz/corpus/<target>/, the target
 * being the program's name without "lt-" or ".exe". Exit 0 unless a file cannot be
 * read; a failing input aborts (and make check reports the crash).
 */

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#define REPLAY_FILE_MAX (16u << 20) /* bytes: corpus files are small; refuse anything absurd */

static int replay_file(const char *path, size_t *n_inputs) {
        struct stat st;
        uint8_t *data;
        size_t len;
        FILE *f;

        f = fopen(path, "rb");
        if (!f) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }
        if (fstat(fileno(f), &st) < 0 || st.st_size < 0 || (uint64_t) st.st_size > REPLAY_FILE_MAX) {
                fprintf(stderr, "%s: cannot stat or too large\n", path);
                fclose(f);
                return -EFBIG;
        }
        /* Exactly the file's size (ASan then sees a read past the input's end); one byte
         * for an empty file so that the pointer is valid. */
        len = (size_t) st.st_size;
        data = malloc(len ? len : 1);
        if (!data) {
                fclose(f);
                return -ENOMEM;
        }
        if (fread(data, 1, len, f) != len) {
                fprintf(stderr, "%s: short read\n", path);
                free(data);
                fclose(f);
                return -EIO;
        }
        fclose(f);
        (void) LLVMFuzzerTestOneInput(data, len);
        free(data);
        (*n_inputs)++;
        return 0;
}

static int replay_path(const char *path, size_t *n_inputs) {
        struct dirent **entries;
        struct stat st;
        int n, r = 0;

        if (stat(path, &st) < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }
        if (!S_ISDIR(st.st_mode))
                return replay_file(path, n_inputs);

        /* Sorted, so that runs are reproducible. */
        n = scandir(path, &entries, NULL, alphasort);
        if (n < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -errno;
        }
        for (int i = 0; i < n; i++) {
                char child[4096];

                if (entries[i]->d_name[0] != '.' &&
                    (size_t) snprintf(child, sizeof child, "%s/%s", path, entries[i]->d_name) <
                            sizeof child &&
                    stat(child, &st) == 0 && S_ISREG(st.st_mode) && r == 0)
                        r = replay_file(child, n_inputs);
                free(entries[i]);
        }
        free(entries);
        return r;
}

int main(int argc, char *argv[]) {
        size_t n_inputs = 0;
        int r = 0;

        if (argc > 1) {
                for (int i = 1; i < argc && r == 0; i++)
                        if (argv[i][0] != '-') /* libFuzzer-style options are ignored */
                                r = replay_path(argv[i], &n_inputs);
        } else {
                char self[4096], dir[4096 + 256];
                const char *srcdir = getenv("top_srcdir"), *name;

                snprintf(self, sizeof self, "%s", argv[0]);
                name = basename(self);
                if (strncmp(name, "lt-", 3) == 0)
                        name += 3;
                snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%.*s", srcdir ? srcdir : ".",
                         (int) strcspn(name, "."), name);
                r = replay_path(dir, &n_inputs);
        }
        printf("%s: %zu inputs replayed\n", argv[0], n_inputs);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
