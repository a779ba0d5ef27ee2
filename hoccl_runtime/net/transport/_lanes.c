/* The TCP transport's lanes in native threads (HOCCL_TCP_ENGINE=native; hoccl_runtime/net/transport/native.py).
 *
 * The same frames as the Python lanes (frames.py: HEADER, its CRC-32, the payload straight into the registered
 * region), sent and received by one POSIX thread per lane and direction, which never take Python's GIL: the
 * interpreter that drives the network (the proxy process's loop) then has itself alone, and a lane that sends or
 * receives waits for the kernel only, not for that interpreter. Python posts a frame (hl_post: the lane's queue,
 * its thread woken) and drains what happened (hl_poll: sent frames, received frames, a lane's clean end, errors) as
 * rows of 14 int64 (EVENT_WORDS); it aggregates a write's parts and words the errors itself, as the Python lanes
 * do. Every field a peer sends is checked before a byte of payload lands: the CRC, magic, version, lane, sequence,
 * and the region's bounds (overflow-safe), so a hostile peer writes nowhere outside what this side registered.
 *
 * Landing gates (hl_arm; HOCCL_NET_LAND_GATES): the network executor may name, per write it expects, a 32-bit flag and
 * the value to store there once every part of that write is in place (its immediate, region, offset and size must
 * all match what was armed, each part counted once). The receiving thread stores it before it queues the
 * frame's event, so a GPU copy that waits on the flag starts without waiting for the Python loop to see the event.
 *
 * Writes posted ahead (hl_post_after; HOCCL_NET_SEND_GATES): a write's parts may wait, off their lanes' queues, for a
 * 32-bit counter flag (the GPU's staging copy writes it when the chunk is in the send ring) to reach a count; the
 * connection's watcher thread looks at the flags every few microseconds and queues each part on its lane once its
 * count is reached, so the write leaves without waiting for the Python loop to see the copy done. Waiting parts hold
 * no lane: credits and notices posted after them leave at once.
 *
 * Spinning (hl_spin; HOCCL_TCP_SPIN_US): for that long after its last frame, a lane's sender looks at its queue and its
 * receiver at its socket (MSG_DONTWAIT) again and again, a sched_yield between looks, before it blocks: a thread
 * asleep in the kernel wakes only once the scheduler gets to it, which under load took hundreds of microseconds
 * (docs/results/training-history.md, 2026-12-06), and NCCL's proxy thread polls too. 0: they block at once (the
 * engine's state until hl_spin; native.py passes HOCCL_TCP_SPIN_US, 0 by default since 2026-12-07).
 *
 * Lifetime (native.py): hl_open after the handshake, hl_stop_senders (queued frames still leave, up to a deadline),
 * Python shuts the sockets down, hl_join (every thread gone), Python closes the sockets, hl_free. Regions are
 * registered with the engine (hl_region) and never move while it lives (the transport holds their arrays). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HEAD 68             /* HEADER.size: "<4sHHQQHHIQQIQQ" */
#define FRAME (HEAD + 4)    /* + CRC-32 of the header */
#define VERSION 3
#define EVENT_WORDS 14

enum { EV_SENT = 0, EV_RECV = 1, EV_ENDED = 2, EV_ERROR = 3 };
enum { E_SEND = 1, E_RECV = 2, E_SHORT_HEAD = 3, E_SHORT_PAYLOAD = 4, E_CRC = 5, E_MAGIC = 6, E_SEQ = 7,
       E_REGION = 8, E_NOMEM = 9 };

typedef struct { int64_t v[EVENT_WORDS]; } event_t;

typedef struct {
    int64_t write_id;
    uint32_t part, parts, rregion, imm;
    uint64_t addr, n, roff, rbase, total;
} post_t;

typedef struct {  /* a part posted ahead (hl_post_after): queued on ``lane`` once *flag reaches value */
    post_t p;
    uint64_t flag;
    int32_t value;
    int lane;
} ahead_t;

typedef struct engine {
    pthread_rwlock_t rw;
    uint64_t *base, *size;  /* per region id; size 0: none */
    size_t count;
} engine_t;

struct conn;

typedef struct {  /* a landing gate (hl_arm) */
    uint64_t base, total, addr, seen;  /* seen: the parts counted (bit per part index) */
    int64_t write_id;
    uint32_t imm, region, parts;
    int32_t value;
    int state;                         /* 0 empty, 1 armed, 2 opened */
} gate_t;

typedef struct lane {
    struct conn *c;
    int idx, fd, failed;
    pthread_t snd, rcv;
    int snd_on, rcv_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    post_t *q;
    size_t cap, head, len;
    int stop;
    uint64_t seq;
} lane_t;

typedef struct conn {
    engine_t *e;
    int nlanes;
    lane_t *lanes;
    pthread_mutex_t mu;      /* the events */
    pthread_cond_t cv;
    event_t *ev;
    size_t cap, head, len;
    int lost;                /* an event could not be kept (no memory): hl_poll reports it last */
    int senders;             /* sender threads still running (hl_stop_senders waits for 0) */
    pthread_mutex_t gmu;     /* the landing gates */
    gate_t *gates;           /* open addressing by immediate, gcap a power of two (0: none armed) */
    size_t gcap;
    pthread_mutex_t wmu;     /* the parts posted ahead, and their watcher thread */
    pthread_cond_t wcv;
    ahead_t *wq;
    size_t wcap, wlen;
    int wstop, w_on;
    long wnap;               /* the watcher's pause (ns): 2 us after a part was posted or let go, doubling to 16 */
    pthread_t wt;
    int64_t spin_ns;         /* hl_spin: how long a lane's threads look again before they block (0: they block) */
} conn_t;

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {  /* zlib.crc32 */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static int64_t now_ns(void) {  /* CLOCK_MONOTONIC: Python's time.perf_counter on Linux */
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static struct timespec after(double s) {  /* CLOCK_REALTIME deadline ``s`` seconds on (condition variables' clock) */
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    if (!(s < 1e6)) s = 1e6;
    int64_t ns = t.tv_nsec + (int64_t)(s * 1e9);
    t.tv_sec += ns / 1000000000LL;
    t.tv_nsec = ns % 1000000000LL;
    return t;
}

/* little-endian fields of the header (x86-64 and aarch64 are little-endian; native.py refuses a big-endian host) */
#define PUT(p, off, x) memcpy((p) + (off), &(x), sizeof(x))
#define GET(p, off, x) memcpy(&(x), (p) + (off), sizeof(x))

/* A full circular queue of ``*cap`` items of ``size`` bytes from ``*head`` in ``buf``, made twice as large (``first``
 * items where it had none), its items moved to the front in order: the new buffer (``buf`` freed), or NULL (no
 * memory: the queue left as it was). */
static void *grow(void *buf, size_t *cap, size_t *head, size_t size, size_t first) {
    size_t bigger_cap = *cap ? 2 * *cap : first;
    uint8_t *bigger = malloc(bigger_cap * size);
    const uint8_t *old = buf;
    if (!bigger) return NULL;
    for (size_t i = 0; i < *cap; i++) memcpy(bigger + i * size, old + ((*head + i) % *cap) * size, size);
    free(buf);
    *cap = bigger_cap;
    *head = 0;
    return bigger;
}

static void push(conn_t *c, const event_t *ev) {
    pthread_mutex_lock(&c->mu);
    /* grown unbounded, as Python's queue.Queue of completions; without memory the connection is lost: hl_poll says so
     * after the events kept */
    if (c->len == c->cap) {
        event_t *bigger = grow(c->ev, &c->cap, &c->head, sizeof(event_t), 1024);
        if (!bigger) {
            c->lost = 1;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            return;
        }
        c->ev = bigger;
    }
    c->ev[(c->head + c->len) % c->cap] = *ev;
    c->len++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void push_error(lane_t *L, int code, int64_t a, int64_t b, int64_t d, int64_t f) {
    event_t ev = {{0}};
    ev.v[0] = EV_ERROR; ev.v[1] = L->idx; ev.v[5] = a; ev.v[6] = b; ev.v[7] = d; ev.v[8] = f; ev.v[13] = code;
    push(L->c, &ev);
}

/* Fill n bytes: n on success, fewer on EOF (the count got), -errno on an error. */
static int64_t recv_full(int fd, uint8_t *p, uint64_t n) {
    uint64_t got = 0;
    while (got < n) {
        uint64_t want = n - got;
        ssize_t r = recv(fd, p + got, want > (1u << 30) ? (1u << 30) : want, MSG_WAITALL);
        if (r > 0) { got += (uint64_t)r; continue; }
        if (r == 0) return (int64_t)got;
        if (errno == EINTR) continue;
        return -(int64_t)errno;
    }
    return (int64_t)got;
}

/* As recv_full, but for up to ``spin_ns`` after the last byte came the socket is read without blocking (MSG_DONTWAIT),
 * a sched_yield between empty reads; then the rest blocks as recv_full. */
static int64_t recv_spin(int fd, uint8_t *p, uint64_t n, int64_t spin_ns) {
    uint64_t got = 0;
    int64_t until = spin_ns > 0 ? now_ns() + spin_ns : 0;
    while (got < n && until) {
        uint64_t want = n - got;
        ssize_t r = recv(fd, p + got, want > (1u << 30) ? (1u << 30) : want, MSG_DONTWAIT);
        if (r > 0) { got += (uint64_t)r; until = now_ns() + spin_ns; continue; }
        if (r == 0) return (int64_t)got;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -(int64_t)errno;
        if (now_ns() >= until) break;
        sched_yield();
    }
    if (got < n) {
        int64_t more = recv_full(fd, p + got, n - got);
        if (more < 0) return more;
        got += (uint64_t)more;
    }
    return (int64_t)got;
}

static size_t gate_slot(uint32_t imm, size_t cap) { return (size_t)(imm * 2654435761u) & (cap - 1); }

/* A whole frame of a write is in place: count it towards the gate armed for its immediate, and store the gate's value
 * once every part of the write was counted (each part index once). 1 where this frame opened a gate. */
static int open_gate(conn_t *c, uint32_t imm, uint32_t region, uint64_t base, uint64_t total, uint64_t write_id,
                     uint32_t part, uint32_t parts) {
    int opened = 0;
    pthread_mutex_lock(&c->gmu);
    if (c->gcap && parts >= 1 && parts <= 64 && part < parts) {
        size_t s = gate_slot(imm, c->gcap);
        while (c->gates[s].state && c->gates[s].imm != imm) s = (s + 1) & (c->gcap - 1);
        gate_t *g = &c->gates[s];
        if (g->state == 1 && g->region == region && g->base == base && g->total == total) {
            if (!g->seen) { g->write_id = (int64_t)write_id; g->parts = parts; }
            uint64_t bit = 1ULL << part;
            if (g->write_id == (int64_t)write_id && g->parts == parts && !(g->seen & bit)) {
                g->seen |= bit;
                if (g->seen == (parts == 64 ? ~0ULL : (1ULL << parts) - 1)) {
                    __atomic_store_n((int32_t *)(uintptr_t)g->addr, g->value, __ATOMIC_RELEASE);
                    g->state = 2;
                    opened = 1;
                }
            }
        }
    }
    pthread_mutex_unlock(&c->gmu);
    return opened;
}

static void *recv_main(void *arg) {
    lane_t *L = arg;
    conn_t *c = L->c;
    engine_t *e = c->e;
    uint8_t h[FRAME];
    uint64_t expected = 0;
    for (;;) {
        int64_t spin = __atomic_load_n(&c->spin_ns, __ATOMIC_RELAXED);
        int64_t got = recv_spin(L->fd, h, FRAME, spin);
        if (got == 0) {  /* a clean end between frames */
            event_t ev = {{0}};
            ev.v[0] = EV_ENDED; ev.v[1] = L->idx;
            push(c, &ev);
            return NULL;
        }
        if (got < 0) { push_error(L, E_RECV, 0, -got, 0, 0); return NULL; }
        if (got < FRAME) { push_error(L, E_SHORT_HEAD, 0, got, FRAME, 0); return NULL; }
        uint32_t crc;
        GET(h, HEAD, crc);
        if (crc32_of(h, HEAD) != crc) { push_error(L, E_CRC, 0, 0, 0, 0); return NULL; }
        uint16_t version, lane_in, part, parts;
        uint32_t region, imm;
        uint64_t seq, write_id, off, n, base, total;
        GET(h, 4, version); GET(h, 6, lane_in); GET(h, 8, seq); GET(h, 16, write_id); GET(h, 24, part);
        GET(h, 26, parts); GET(h, 28, region); GET(h, 32, off); GET(h, 40, n); GET(h, 48, imm); GET(h, 52, base);
        GET(h, 60, total);
        if (memcmp(h, "HOCL", 4) != 0 || version != VERSION || lane_in != (uint16_t)L->idx) {
            uint32_t magic;
            GET(h, 0, magic);
            push_error(L, E_MAGIC, version, lane_in, magic, 0);
            return NULL;
        }
        if (seq != expected) { push_error(L, E_SEQ, 0, (int64_t)seq, (int64_t)expected, 0); return NULL; }
        expected++;
        uint8_t *into = NULL;
        int64_t size = -1;
        pthread_rwlock_rdlock(&e->rw);
        if (region < e->count && e->size[region]) {
            size = (int64_t)e->size[region];
            if (off <= e->size[region] && n <= e->size[region] - off) into = (uint8_t *)(uintptr_t)e->base[region] + off;
        }
        pthread_rwlock_unlock(&e->rw);
        if (into == NULL) {
            push_error(L, E_REGION, region, (int64_t)off, (int64_t)n, size);
            return NULL;
        }
        int64_t t0 = now_ns();
        if (n) {
            got = recv_spin(L->fd, into, n, spin);
            if (got < 0) { push_error(L, E_RECV, 1, -got, 0, 0); return NULL; }
            if ((uint64_t)got < n) { push_error(L, E_SHORT_PAYLOAD, 0, got, (int64_t)n, 0); return NULL; }
        }
        int opened = open_gate(c, imm, region, base, total, write_id, part, parts);
        event_t ev;
        ev.v[0] = EV_RECV; ev.v[1] = L->idx; ev.v[2] = (int64_t)write_id; ev.v[3] = part; ev.v[4] = parts;
        ev.v[5] = region; ev.v[6] = (int64_t)off; ev.v[7] = (int64_t)n; ev.v[8] = imm; ev.v[9] = (int64_t)base;
        ev.v[10] = (int64_t)total; ev.v[11] = t0; ev.v[12] = now_ns(); ev.v[13] = opened;
        push(c, &ev);
    }
}

/* Send every byte of iov (MSG_NOSIGNAL: a closed peer is an error, not a signal): 0, or errno. For up to ``spin_ns``
 * after the last byte left, a full socket buffer is tried again (MSG_DONTWAIT, a sched_yield between) before the
 * send blocks. */
static int send_all(int fd, struct iovec *iov, int cnt, int64_t spin_ns) {
    int64_t until = spin_ns > 0 ? now_ns() + spin_ns : 0;
    while (cnt) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)cnt;
        int spinning = until && now_ns() < until;
        ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | (spinning ? MSG_DONTWAIT : 0));
        if (r < 0) {
            if (errno == EINTR) continue;
            if (spinning && (errno == EAGAIN || errno == EWOULDBLOCK)) { sched_yield(); continue; }
            return errno;
        }
        if (until) until = now_ns() + spin_ns;
        while (cnt && (size_t)r >= iov->iov_len) { r -= (ssize_t)iov->iov_len; iov++; cnt--; }
        if (cnt) { iov->iov_base = (uint8_t *)iov->iov_base + r; iov->iov_len -= (size_t)r; }
    }
    return 0;
}

static void sender_done(conn_t *c) {
    pthread_mutex_lock(&c->mu);
    c->senders--;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void *send_main(void *arg) {
    lane_t *L = arg;
    conn_t *c = L->c;
    uint8_t h[FRAME];
    for (;;) {
        int64_t spin = __atomic_load_n(&c->spin_ns, __ATOMIC_RELAXED);
        if (spin > 0 && !__atomic_load_n(&L->len, __ATOMIC_ACQUIRE)) {  /* look again for a while before sleeping */
            int64_t until = now_ns() + spin;
            while (!__atomic_load_n(&L->len, __ATOMIC_ACQUIRE) && !__atomic_load_n(&L->stop, __ATOMIC_ACQUIRE) &&
                   now_ns() < until)
                sched_yield();
        }
        pthread_mutex_lock(&L->mu);
        while (!L->len && !L->stop) pthread_cond_wait(&L->cv, &L->mu);
        if (!L->len) { pthread_mutex_unlock(&L->mu); break; }
        post_t p = L->q[L->head];
        L->head = (L->head + 1) % L->cap;
        __atomic_store_n(&L->len, L->len - 1, __ATOMIC_RELEASE);  /* read unlocked by a spinning sender */
        pthread_mutex_unlock(&L->mu);
        uint16_t version = VERSION, lane = (uint16_t)L->idx, part = (uint16_t)p.part, parts = (uint16_t)p.parts;
        uint64_t wid = (uint64_t)p.write_id;
        memcpy(h, "HOCL", 4);
        PUT(h, 4, version); PUT(h, 6, lane); PUT(h, 8, L->seq); PUT(h, 16, wid); PUT(h, 24, part); PUT(h, 26, parts);
        PUT(h, 28, p.rregion); PUT(h, 32, p.roff); PUT(h, 40, p.n); PUT(h, 48, p.imm); PUT(h, 52, p.rbase);
        PUT(h, 60, p.total);
        uint32_t crc = crc32_of(h, HEAD);
        PUT(h, HEAD, crc);
        struct iovec iov[2] = {{h, FRAME}, {(void *)(uintptr_t)p.addr, p.n}};
        int64_t t0 = now_ns();
        int err = send_all(L->fd, iov, p.n ? 2 : 1, spin);
        if (err) {
            L->failed = 1;
            push_error(L, E_SEND, 0, err, 0, 0);
            break;
        }
        L->seq++;
        event_t ev;
        ev.v[0] = EV_SENT; ev.v[1] = L->idx; ev.v[2] = p.write_id; ev.v[3] = p.part; ev.v[4] = p.parts;
        ev.v[5] = p.rregion; ev.v[6] = (int64_t)p.roff; ev.v[7] = (int64_t)p.n; ev.v[8] = p.imm;
        ev.v[9] = (int64_t)p.rbase; ev.v[10] = (int64_t)p.total; ev.v[11] = t0; ev.v[12] = now_ns(); ev.v[13] = 0;
        push(c, &ev);
    }
    sender_done(c);
    return NULL;
}

/* --- the interface (ctypes) ------------------------------------------------------------------------------------ */

int hl_event_words(void) { return EVENT_WORDS; }

void *hl_engine(void) {
    pthread_once(&crc_once, crc_init);
    engine_t *e = calloc(1, sizeof(engine_t));
    if (e) pthread_rwlock_init(&e->rw, NULL);
    return e;
}

int hl_region(void *ep, uint32_t id, uint64_t base, uint64_t size) {
    engine_t *e = ep;
    int rc = 0;
    pthread_rwlock_wrlock(&e->rw);
    if (id >= e->count) {
        size_t count = id + 1 > 2 * e->count ? id + 1 : 2 * e->count;
        uint64_t *b = realloc(e->base, count * sizeof(uint64_t));
        if (b) e->base = b;
        uint64_t *s = b ? realloc(e->size, count * sizeof(uint64_t)) : NULL;
        if (s) e->size = s;
        if (!b || !s) rc = -1;
        else {
            for (size_t i = e->count; i < count; i++) { e->base[i] = 0; e->size[i] = 0; }
            e->count = count;
        }
    }
    if (!rc) { e->base[id] = base; e->size[id] = size; }
    pthread_rwlock_unlock(&e->rw);
    return rc;
}

void hl_engine_free(void *ep) {
    engine_t *e = ep;
    if (!e) return;
    pthread_rwlock_destroy(&e->rw);
    free(e->base);
    free(e->size);
    free(e);
}

void *hl_open(void *ep, const int *fds, int nlanes) {
    conn_t *c = calloc(1, sizeof(conn_t));
    if (!c) return NULL;
    c->e = ep;
    c->nlanes = nlanes;
    c->lanes = calloc((size_t)nlanes, sizeof(lane_t));
    if (!c->lanes) { free(c); return NULL; }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_mutex_init(&c->gmu, NULL);
    pthread_mutex_init(&c->wmu, NULL);
    pthread_cond_init(&c->wcv, NULL);
    int ok = 1;
    for (int i = 0; i < nlanes; i++) {
        lane_t *L = &c->lanes[i];
        L->c = c; L->idx = i; L->fd = fds[i];
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->cv, NULL);
    }
    for (int i = 0; i < nlanes && ok; i++) {
        lane_t *L = &c->lanes[i];
        pthread_mutex_lock(&c->mu);
        c->senders++;
        pthread_mutex_unlock(&c->mu);
        if (pthread_create(&L->snd, NULL, send_main, L) == 0) L->snd_on = 1;
        else { sender_done(c); ok = 0; }
        if (ok && pthread_create(&L->rcv, NULL, recv_main, L) == 0) L->rcv_on = 1;
        else ok = 0;
    }
    if (!ok) {  /* reported by hl_poll; the caller shuts the sockets down, joins and frees (native.py) */
        pthread_mutex_lock(&c->mu);
        c->lost = 1;
        pthread_mutex_unlock(&c->mu);
    }
    return c;
}

/* Append a part to its lane's queue and wake the lane's sender: 0, or -1 (no memory, or the sender stopped). */
static int lane_put(lane_t *L, const post_t *p) {
    pthread_mutex_lock(&L->mu);
    if (L->stop || L->failed || !L->snd_on) { pthread_mutex_unlock(&L->mu); return -1; }
    if (L->len == L->cap) {
        post_t *bigger = grow(L->q, &L->cap, &L->head, sizeof(post_t), 64);
        if (!bigger) { pthread_mutex_unlock(&L->mu); return -1; }
        L->q = bigger;
    }
    L->q[(L->head + L->len) % L->cap] = *p;
    __atomic_store_n(&L->len, L->len + 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&L->cv);
    pthread_mutex_unlock(&L->mu);
    return 0;
}

static int reached32(uint64_t flag, int32_t value) {  /* the GPU's cyclic GEQ: (int32)(*flag - value) >= 0 */
    uint32_t now = (uint32_t)__atomic_load_n((int32_t *)(uintptr_t)flag, __ATOMIC_ACQUIRE);
    return (uint32_t)(now - (uint32_t)value) < 0x80000000u;
}

/* The watcher: queues each part posted ahead on its lane once its flag reached its count (in the order they were
 * posted among those ready), looking every 2 us while any waits (timer slack 1 us), the pause doubling up to 16 us
 * while none is posted or comes ready (a write posted long before its copy runs: a run begun before its stream
 * reached it), asleep while none waits. A part whose lane has stopped is dropped (its lane's failure is reported
 * already). */
static void *watch_main(void *arg) {
    conn_t *c = arg;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    pthread_mutex_lock(&c->wmu);
    for (;;) {
        while (!c->wlen && !c->wstop) pthread_cond_wait(&c->wcv, &c->wmu);
        if (c->wstop) break;
        size_t k = 0;
        for (size_t i = 0; i < c->wlen; i++) {
            ahead_t *a = &c->wq[i];
            if (reached32(a->flag, a->value)) lane_put(&c->lanes[a->lane], &a->p);
            else c->wq[k++] = *a;
        }
        int moved = k < c->wlen;
        long nap_ns = moved || c->wnap < 2000 ? 2000 : c->wnap;  /* hl_post_after sets it back to 2 us */
        c->wnap = moved ? 2000 : (nap_ns < 16000 ? 2 * nap_ns : 16000);
        c->wlen = k;
        pthread_cond_broadcast(&c->wcv);  /* hl_stop_senders waits for the list to empty */
        if (k) {
            struct timespec nap = {0, nap_ns};
            pthread_mutex_unlock(&c->wmu);
            nanosleep(&nap, NULL);
            pthread_mutex_lock(&c->wmu);
        }
    }
    c->wlen = 0;
    pthread_mutex_unlock(&c->wmu);
    return NULL;
}

/* How long each lane's threads look again before they block (ns; 0: they block at once). */
void hl_spin(void *cp, int64_t ns) {
    conn_t *c = cp;
    __atomic_store_n(&c->spin_ns, ns > 0 ? ns : 0, __ATOMIC_RELAXED);
}

/* Queue a frame on ``lane``: 0, or -1 (no memory, or the lane's sender stopped). */
int hl_post(void *cp, int lane, int64_t write_id, uint32_t part, uint32_t parts, uint64_t addr, uint64_t n,
            uint32_t rregion, uint64_t roff, uint32_t imm, uint64_t rbase, uint64_t total) {
    conn_t *c = cp;
    if (lane < 0 || lane >= c->nlanes) return -1;
    post_t p = {write_id, part, parts, rregion, imm, addr, n, roff, rbase, total};
    return lane_put(&c->lanes[lane], &p);
}

/* As hl_post, the frame queued on its lane only once the int32 at ``flag`` reaches ``value`` (hl_post_after's
 * watcher): 0, or -1 (no memory, the lane's sender stopped, or the connection is closing). */
int hl_post_after(void *cp, int lane, int64_t write_id, uint32_t part, uint32_t parts, uint64_t addr, uint64_t n,
                  uint32_t rregion, uint64_t roff, uint32_t imm, uint64_t rbase, uint64_t total, uint64_t flag,
                  int32_t value) {
    conn_t *c = cp;
    if (lane < 0 || lane >= c->nlanes || !flag) return -1;
    lane_t *L = &c->lanes[lane];
    if (L->failed || !L->snd_on) return -1;
    int rc = 0;
    pthread_mutex_lock(&c->wmu);
    if (c->wstop) rc = -1;
    if (!rc && !c->w_on) {
        if (pthread_create(&c->wt, NULL, watch_main, c) == 0) c->w_on = 1;
        else rc = -1;
    }
    if (!rc && c->wlen == c->wcap) {
        size_t cap = c->wcap ? 2 * c->wcap : 64;
        ahead_t *bigger = realloc(c->wq, cap * sizeof(ahead_t));
        if (bigger) { c->wq = bigger; c->wcap = cap; }
        else rc = -1;
    }
    if (!rc) {
        ahead_t *a = &c->wq[c->wlen++];
        post_t p = {write_id, part, parts, rregion, imm, addr, n, roff, rbase, total};
        a->p = p; a->flag = flag; a->value = value; a->lane = lane;
        c->wnap = 2000;
        pthread_cond_broadcast(&c->wcv);
    }
    pthread_mutex_unlock(&c->wmu);
    return rc;
}

/* Drop every part still waiting for its flag (a failed run's, before its gates are opened and the flags reached
 * with what the copies then move): how many. */
int hl_cancel(void *cp) {
    conn_t *c = cp;
    pthread_mutex_lock(&c->wmu);
    int n = (int)c->wlen;
    c->wlen = 0;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    return n;
}

/* Arm ``n`` landing gates, replacing those armed before (n 0: none). ``rows``: per gate 6 int64, the write's
 * immediate, region, offset and size, the flag's address and the int32 value to store there. 0, or -1 (no memory:
 * nothing armed). */
int hl_arm(void *cp, int n, const int64_t *rows) {
    conn_t *c = cp;
    gate_t *g = NULL;
    size_t cap = 0;
    int rc = 0;
    if (n > 0) {
        for (cap = 16; cap < 2 * (size_t)n; cap <<= 1) {}
        g = calloc(cap, sizeof(gate_t));
        if (!g) { n = 0; cap = 0; rc = -1; }
        for (int i = 0; i < n; i++) {
            const int64_t *r = rows + 6 * (size_t)i;
            uint32_t imm = (uint32_t)r[0];
            size_t s = gate_slot(imm, cap);
            while (g[s].state && g[s].imm != imm) s = (s + 1) & (cap - 1);
            g[s].imm = imm; g[s].region = (uint32_t)r[1]; g[s].base = (uint64_t)r[2]; g[s].total = (uint64_t)r[3];
            g[s].addr = (uint64_t)r[4]; g[s].value = (int32_t)r[5]; g[s].seen = 0; g[s].state = 1;
        }
    }
    pthread_mutex_lock(&c->gmu);
    gate_t *old = c->gates;
    c->gates = g;
    c->gcap = cap;
    pthread_mutex_unlock(&c->gmu);
    free(old);
    return rc;
}

/* Move up to ``most`` events into ``out`` (rows of EVENT_WORDS), waiting up to ``timeout_s`` for the first (0:
 * not at all): how many. */
int hl_poll(void *cp, int64_t *out, int most, double timeout_s) {
    conn_t *c = cp;
    pthread_mutex_lock(&c->mu);
    if (!c->len && timeout_s > 0) {
        struct timespec until = after(timeout_s);
        while (!c->len && !c->lost && pthread_cond_timedwait(&c->cv, &c->mu, &until) != ETIMEDOUT) {}
    }
    int k = 0;
    while (c->len && k < most) {
        memcpy(out + (size_t)k * EVENT_WORDS, &c->ev[c->head], sizeof(event_t));
        c->head = (c->head + 1) % c->cap;
        c->len--;
        k++;
    }
    if (!c->len && c->lost && k < most) {
        memset(out + (size_t)k * EVENT_WORDS, 0, sizeof(event_t));
        out[(size_t)k * EVENT_WORDS] = EV_ERROR;
        out[(size_t)k * EVENT_WORDS + 13] = E_NOMEM;
        c->lost = 0;
        k++;
    }
    pthread_mutex_unlock(&c->mu);
    return k;
}

/* Let the senders finish what is queued and stop, waiting up to ``timeout_s``: 0 once every one stopped, 1 if
 * some still send (the sockets' shutdown then ends them). */
int hl_stop_senders(void *cp, double timeout_s) {
    conn_t *c = cp;
    struct timespec until = after(timeout_s);
    pthread_mutex_lock(&c->wmu);  /* the parts posted ahead go to their lanes first (up to the deadline) */
    while (c->wlen && pthread_cond_timedwait(&c->wcv, &c->wmu, &until) != ETIMEDOUT) {}
    c->wstop = 1;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    for (int i = 0; i < c->nlanes; i++) {
        lane_t *L = &c->lanes[i];
        pthread_mutex_lock(&L->mu);
        __atomic_store_n(&L->stop, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&L->cv);
        pthread_mutex_unlock(&L->mu);
    }
    pthread_mutex_lock(&c->mu);
    while (c->senders > 0 && pthread_cond_timedwait(&c->cv, &c->mu, &until) != ETIMEDOUT) {}
    int left = c->senders > 0;
    pthread_mutex_unlock(&c->mu);
    return left;
}

/* Join every thread (after the sockets were shut down: each then returns). */
void hl_join(void *cp) {
    conn_t *c = cp;
    pthread_mutex_lock(&c->wmu);
    c->wstop = 1;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    if (c->w_on) { pthread_join(c->wt, NULL); c->w_on = 0; }
    for (int i = 0; i < c->nlanes; i++) {
        lane_t *L = &c->lanes[i];
        pthread_mutex_lock(&L->mu);
        __atomic_store_n(&L->stop, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&L->len, 0, __ATOMIC_RELEASE);  /* a sender still running drops what is left: the connection is closing */
        pthread_cond_signal(&L->cv);
        pthread_mutex_unlock(&L->mu);
    }
    for (int i = 0; i < c->nlanes; i++) {
        lane_t *L = &c->lanes[i];
        if (L->snd_on) { pthread_join(L->snd, NULL); L->snd_on = 0; }
        if (L->rcv_on) { pthread_join(L->rcv, NULL); L->rcv_on = 0; }
    }
}

void hl_free(void *cp) {
    conn_t *c = cp;
    if (!c) return;
    for (int i = 0; i < c->nlanes; i++) {
        pthread_mutex_destroy(&c->lanes[i].mu);
        pthread_cond_destroy(&c->lanes[i].cv);
        free(c->lanes[i].q);
    }
    free(c->lanes);
    free(c->ev);
    free(c->gates);
    free(c->wq);
    pthread_mutex_destroy(&c->gmu);
    pthread_mutex_destroy(&c->wmu);
    pthread_cond_destroy(&c->wcv);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}
