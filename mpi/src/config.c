/* Settings read from the environment at each call: the virtual torus (REDUCELAB_TORUS), the
 * message segment size (REDUCELAB_SEGMENT) and the count check (REDUCELAB_CHECK). */
#define _GNU_SOURCE
#include "rl_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shape from REDUCELAB_TORUS ("4x2", "8"): 1 and the shape if its product is p, 1 and [p] if
 * unset or another size, 0 (with a message) if malformed. */
int rl_torus_for(int p, uint32_t *dims, size_t *ndims, char *err, size_t errlen) {
    const char *t = getenv("REDUCELAB_TORUS");
    dims[0] = (uint32_t)p;
    *ndims = 1;
    if (!t || !*t) return 1;
    uint32_t d[8];
    size_t n = 0;
    const char *s = t;
    unsigned long long prod = 1;
    while (*s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 1u << 20 || n == 8) {
            snprintf(err, errlen, "REDUCELAB_TORUS='%s' is not a shape like 4x2 (1 to 8 positive sizes)", t);
            return 0;
        }
        d[n++] = (uint32_t)v;
        prod *= v;
        s = end;
        if (*s == 'x' || *s == 'X') {
            s++;
            if (!*s) {
                snprintf(err, errlen, "REDUCELAB_TORUS='%s' ends with 'x'", t);
                return 0;
            }
        } else if (*s) {
            snprintf(err, errlen, "REDUCELAB_TORUS='%s' is not a shape like 4x2", t);
            return 0;
        }
    }
    if (prod == (unsigned long long)p) {
        memcpy(dims, d, n * sizeof *d);
        *ndims = n;
    }
    return 1;
}

/* Message segment size: REDUCELAB_SEGMENT bytes (0 = whole messages, the default: splitting
 * into 128 KiB or 512 KiB pieces applied as they arrive measured no faster on one node). */
#define RL_DEFAULT_SEGMENT 0
size_t rl_segment_bytes(void) {
    const char *e = getenv("REDUCELAB_SEGMENT");
    if (!e || !*e) return RL_DEFAULT_SEGMENT;
    char *end = NULL;
    long long x = strtoll(e, &end, 10);
    return (*end || x < 0) ? RL_DEFAULT_SEGMENT : (size_t)x;
}

int rl_check_mode(void) {
    const char *e = getenv("REDUCELAB_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}
