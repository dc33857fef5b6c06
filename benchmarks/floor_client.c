/* The floor under any streaming client on this host: the least a client can do per chunk.
 *
 * benchmarks/stream_scale.py compiles this with the machine's C compiler and runs it on
 * the stream lab beside tailwise, at the same Poisson rate. Per chunk it does what every
 * client that times each token must: one epoll wake-up (shared by the sockets ready
 * together), one recv(2) and its TCP ACK, one clock read. Nothing else: no HTTP or SSE
 * parsing (a response ends at the chunked encoding's "0\r\n\r\n"), no records, no JSON.
 * Its CPU per chunk is what the kernel and the loopback charge a client on this host, so
 * what tailwise spends above it is tailwise's own.
 *
 * FLOOR_REST_NS (environment, 0 to 100 ms; 0 when unset): sleep that long before each
 * batch of reads instead of waking for every arrival (a diagnostic: fewer wake-ups, each
 * read timed up to the rest late; docs/benchmarks.md, issue 27).
 *
 * Usage: floor_client PORT RATE_PER_S WARMUP_S DURATION_S TOKENS SEED OUT
 * Prints one JSON line (counts, CPU seconds); writes OUT: the window's TTFT (ms, from the
 * intended send to the first read after the response head) then every gap between content
 * reads (ms), as "t <ms>" and "g <ms>" lines. Linux only (epoll, edge-triggered).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 16384
#define MAX_GAPS (1 << 24) /* 16 M gaps: minutes at 60k chunks/s */
#define MAX_TTFT (1 << 20)

typedef struct {
    int fd;
    int busy;        /* a response is being read */
    int in_window;   /* its request was due after the warm-up */
    int reads;       /* reads with data in this response */
    int64_t due_ns;  /* the intended send */
    int64_t last_ns; /* the last content read */
    char tail[5];    /* the response's last 5 bytes so far */
} conn_t;

static conn_t conns[MAX_CONNS];
static int idle[MAX_CONNS], n_idle, n_conns;
static float *gaps;
static float *ttfts;
static long n_gaps, n_ttft;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static uint64_t rng;
static double uniform01(void) { /* xorshift64*: arrivals need no more */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return ((rng * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

static int open_conn(int ep, int port) {
    if (n_conns >= MAX_CONNS) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) { /* loopback: at once */
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int i = n_conns++;
    conns[i].fd = fd;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    return i;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: floor_client PORT RATE WARMUP_S DURATION_S TOKENS SEED OUT\n");
        return 2;
    }
    int port = atoi(argv[1]);
    double rate = atof(argv[2]), warmup_s = atof(argv[3]), duration_s = atof(argv[4]);
    int tokens = atoi(argv[5]);
    rng = (uint64_t)strtoull(argv[6], NULL, 10) * 0x9E3779B97F4A7C15ULL + 1;
    if (port <= 0 || port > 65535 || !(rate > 0 && rate < 1e6) || !(warmup_s >= 0) ||
        !(duration_s > 0 && duration_s < 3600) || tokens < 1 || tokens > 100000) {
        fprintf(stderr, "floor_client: bad argument\n");
        return 2;
    }
    const char *rest = getenv("FLOOR_REST_NS");
    char *rest_end = NULL;
    int64_t rest_ns = rest && *rest ? strtoll(rest, &rest_end, 10) : 0;
    if (rest_ns < 0 || rest_ns > 100000000 || (rest_end && *rest_end)) {
        fprintf(stderr, "floor_client: FLOOR_REST_NS: expected 0 to 100000000\n");
        return 2;
    }
    gaps = malloc(sizeof(float) * MAX_GAPS);
    ttfts = malloc(sizeof(float) * MAX_TTFT);
    if (!gaps || !ttfts) return 1;
    char req[512];
    const char *body = "{\"model\":\"lab\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"max_tokens\":%d,\"stream\":true,"
                       "\"stream_options\":{\"include_usage\":true}}";
    char bodybuf[256];
    int body_len = snprintf(bodybuf, sizeof bodybuf, body, tokens);
    int req_len = snprintf(req, sizeof req,
                           "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                           "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                           port, body_len, bodybuf);
    int ep = epoll_create1(0);
    struct epoll_event evs[512];
    static char buf[65536];
    long sent = 0, done = 0, bad = 0, reads = 0, failed = 0, in_window = 0;
    int64_t max_lag_ns = 0;
    double cpu0 = cpu_s();
    int64_t t0 = now_ns();
    int64_t window_ns = t0 + (int64_t)(warmup_s * 1e9);
    int64_t end_ns = window_ns + (int64_t)(duration_s * 1e9);
    int64_t due = t0;
    int64_t give_up_ns = end_ns + 30000000000LL;
    for (;;) {
        int64_t t = now_ns();
        while (due <= t && due < end_ns) { /* every request due now, open loop */
            int i = n_idle ? idle[--n_idle] : open_conn(ep, port);
            if (i < 0) {
                failed++;
            } else {
                conn_t *c = &conns[i];
                c->busy = 1;
                c->reads = 0;
                c->due_ns = due;
                c->in_window = due >= window_ns;
                memset(c->tail, 0, sizeof c->tail);
                if (write(c->fd, req, req_len) != req_len) failed++;
                sent++;
                in_window += c->in_window;
                if (t - due > max_lag_ns) max_lag_ns = t - due;
            }
            due += (int64_t)(-log(1.0 - uniform01()) / rate * 1e9);
        }
        int busy = (int)(sent - done - failed);
        if (due >= end_ns && busy <= 0) break;
        if (t > give_up_ns) break;
        int64_t wait_ns = due < end_ns ? due - t : 100000000;
        if (rest_ns > 0) { /* sleep first, then read whatever came meanwhile */
            int64_t s = wait_ns < rest_ns ? wait_ns : rest_ns;
            struct timespec sl = {.tv_sec = s / 1000000000, .tv_nsec = s % 1000000000};
            if (s > 0) clock_nanosleep(CLOCK_MONOTONIC, 0, &sl, NULL);
            wait_ns = 0;
        }
        struct timespec to = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
        int n = epoll_pwait2(ep, evs, 512, &to, NULL);
        if (n < 0 && errno != EINTR) return 1;
        for (int k = 0; k < n; k++) {
            conn_t *c = &conns[evs[k].data.u32];
            for (;;) { /* edge-triggered: read until a short read */
#ifdef FLOOR_READ /* read(2): ~4% more CPU per chunk than recv(2) here */
                ssize_t got = read(c->fd, buf, sizeof buf);
#else
                ssize_t got = recv(c->fd, buf, sizeof buf, 0);
#endif
                if (got <= 0) break;
                int64_t at = now_ns();
                reads++;
                if (!c->busy) break;
                if (c->reads == 0 && memcmp(buf, "HTTP/1.1 200", 12) != 0) bad++;
                if (c->reads == 1 && c->in_window && n_ttft < MAX_TTFT)
                    ttfts[n_ttft++] = (float)((at - c->due_ns) / 1e6);
                /* content reads are 1..tokens; the end (finish, usage, [DONE]) may come
                 * in a read of its own right after the last token: not a gap */
                if (c->reads >= 2 && c->reads <= tokens && c->in_window && n_gaps < MAX_GAPS)
                    gaps[n_gaps++] = (float)((at - c->last_ns) / 1e6);
                c->reads++;
                c->last_ns = at;
                /* the response's last five bytes, across reads */
                if (got >= 5) {
                    memcpy(c->tail, buf + got - 5, 5);
                } else {
                    memmove(c->tail, c->tail + got, 5 - got);
                    memcpy(c->tail + 5 - got, buf, got);
                }
                if (memcmp(c->tail, "0\r\n\r\n", 5) == 0) {
                    c->busy = 0;
                    done++;
                    idle[n_idle++] = (int)(c - conns);
                }
                if ((size_t)got < sizeof buf) break;
            }
        }
    }
    double cpu = cpu_s() - cpu0;
    double wall = (now_ns() - t0) / 1e9;
    FILE *out = fopen(argv[7], "w");
    if (!out) return 1;
    for (long i = 0; i < n_ttft; i++) fprintf(out, "t %.4f\n", ttfts[i]);
    for (long i = 0; i < n_gaps; i++) fprintf(out, "g %.4f\n", gaps[i]);
    fclose(out);
    printf("{\"sent\": %ld, \"in_window\": %ld, \"done\": %ld, \"failed\": %ld, \"bad\": %ld, "
           "\"reads\": %ld, \"conns\": %d, \"cpu_s\": %.4f, \"wall_s\": %.3f, "
           "\"max_send_lag_ms\": %.3f}\n",
           sent, in_window, done, failed, bad, reads, n_conns, cpu, wall, max_lag_ns / 1e6);
    return 0;
}
