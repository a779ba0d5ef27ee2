/* A kept launch list's next run in one C call (hoccl_runtime/net/kept.py): the counts moved on and written into its
 * packed memory-operation batches, the proxy process told (one framed message on its socket), then the list's driver
 * calls made. The same steps as net/template.py's RunTemplate.issue, ProcessProxy.submit and
 * GpuNodeExecutor.launch_deferred, in that order, without the interpreter in between: inside a training step every
 * Python layer of that path cost 2.5-4 times what it costs alone (docs/results/training-history.md).
 *
 * Counters take values 1 .. CYCLE cyclically (never 0: the flags start at 0), as template.moved does. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define CYCLE 0xFFFFFFFFLL
#define KEPT_VERSION 1

typedef int (*memcpy_fn)(uint64_t dst, uint64_t src, size_t nbytes, uint64_t stream); /* cuMemcpyAsync */
typedef int (*memops_fn)(uint64_t stream, unsigned count, uint64_t params, unsigned flags); /* cuStreamBatchMemOp_v2 */

int hk_version(void) { return KEPT_VERSION; }

static int64_t moved(int64_t value, int64_t by) {
    int64_t r = (value - 1 + by) % CYCLE;
    if (r < 0) r += CYCLE;
    return r + 1;
}

/* counts: the executor's counters (int64, by index). keys / before / after (nkeys each): the list's counters, their
 * values before and after the run it was made from. slots (nslots x 3): the address of a packed operation's 64-bit
 * value, the position of its counter in keys (-1: the caller's START, written as start), the value at build time.
 * msg (msg_len bytes): the framed message, start written at msg + by_at - 8 and the counters' moves at msg + by_at
 * (int64 each, little-endian) before it is sent on fd. steps (nsteps x 5): kind (0 copy, 1 memory operations), stream, then dst / src / bytes or
 * count / block address / 0.
 * Returns 0; -errno where the message could not be sent (no step was made then); else (step + 1) << 32 | CUresult
 * of the first driver call that failed (the steps before it were made). */
int64_t hk_issue(int64_t *counts, int nkeys, const int64_t *keys, const int64_t *before, const int64_t *after,
                 const int64_t *slots, int nslots, int64_t start, int fd, char *msg, int64_t msg_len, int64_t by_at,
                 const int64_t *steps, int nsteps, void *copy_p, void *memops_p) {
    int64_t *by = (int64_t *)(msg + by_at);
    memcpy(msg + by_at - 8, &start, sizeof start); /* the START count, before the moves */
    for (int k = 0; k < nkeys; k++) {
        int64_t b = counts[keys[k]] - before[k];
        memcpy(&by[k], &b, sizeof b);
    }
    for (int i = 0; i < nslots; i++) {
        const int64_t *s = slots + 3 * i;
        uint64_t v = (uint64_t)start;
        if (s[1] >= 0) {
            int64_t b;
            memcpy(&b, &by[s[1]], sizeof b);
            v = (uint64_t)moved(s[2], b);
        }
        memcpy((void *)(uintptr_t)s[0], &v, sizeof v);
    }
    for (int k = 0; k < nkeys; k++) {
        int64_t b;
        memcpy(&b, &by[k], sizeof b);
        counts[keys[k]] = moved(after[k], b);
    }
    for (int64_t sent = 0; sent < msg_len;) {
        ssize_t n = write(fd, msg + sent, (size_t)(msg_len - sent));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -(int64_t)errno;
        }
        sent += n;
    }
    memcpy_fn copy = (memcpy_fn)copy_p;
    memops_fn batch = (memops_fn)memops_p;
    for (int i = 0; i < nsteps; i++) {
        const int64_t *s = steps + 5 * i;
        int err = s[0] == 0 ? copy((uint64_t)s[2], (uint64_t)s[3], (size_t)s[4], (uint64_t)s[1])
                            : batch((uint64_t)s[1], (unsigned)s[2], (uint64_t)s[3], 0);
        if (err) return ((int64_t)(i + 1) << 32) | (uint32_t)err;
    }
    return 0;
}
