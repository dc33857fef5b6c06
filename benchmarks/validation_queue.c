/* Independent queue recursions for benchmarks/validation_grid.py (DESIGN.md invariant 11).
 *
 * Nothing here comes from tailwise: the grid's truth and its sample paths are made by
 * this file alone, so an error in tailwise's simulator cannot hide one in its intervals.
 *
 * - queue_path / queue_truth: FCFS G/G/c from an empty system by the Kiefer-Wolfowitz
 *   workload vector (Lindley's recursion when c = 1). Customer i arrives, sees the
 *   sorted workloads w[0] <= ... <= w[c-1], waits w[0], takes the server that frees
 *   first (its workload becomes w[0] + S_i), then every workload drains by the next
 *   inter-arrival time T_i and is floored at 0.
 * - llm_run: a continuous-batching engine stepped one engine step at a time (see the
 *   comment above it).
 *
 * Truth mode adds each kept value to a log-binned histogram (bin k >= 1 holds
 * [lo * r^(k-1), lo * r^k), bin 0 everything below lo, bin nbins + 1 everything above)
 * and sums the values for the mean (Kahan summation).
 *
 * Random numbers: xoshiro256** seeded by splitmix64; arrivals and services draw from
 * two separate streams.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t s[4];
    double spare;
    int has_spare;
} rng_t;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
    r->has_spare = 0;
    r->spare = 0.0;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t next_u64(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform on the open interval (0, 1). */
static inline double u01(rng_t *r) { return ((double)(next_u64(r) >> 11) + 0.5) * 0x1.0p-53; }

/* Standard normal: Marsaglia's polar method, the second value kept for the next call. */
static inline double std_normal(rng_t *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * u01(r) - 1.0;
        v = 2.0 * u01(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->spare = v * f;
    r->has_spare = 1;
    return u * f;
}

/* Gamma(shape a, scale 1): Marsaglia & Tsang (2000); a < 1 by Gamma(a + 1) * U^(1/a). */
static double std_gamma(rng_t *r, double a) {
    if (a < 1.0) {
        double u = u01(r);
        return std_gamma(r, a + 1.0) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = std_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = u01(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
    }
}

enum { DIST_EXP = 0, DIST_LOGNORMAL = 1, DIST_PARETO = 2, DIST_GAMMA = 3 };

/* EXP: a = mean. LOGNORMAL: a = mu, b = sigma (of the log). PARETO (type I): a = x_min,
 * b = tail index. GAMMA: a = shape, b = scale. */
static inline double draw(rng_t *r, int kind, double a, double b) {
    switch (kind) {
        case DIST_EXP:
            return -a * log(u01(r));
        case DIST_LOGNORMAL:
            return exp(a + b * std_normal(r));
        case DIST_PARETO:
            return a * pow(u01(r), -1.0 / b);
        default:
            return b * std_gamma(r, a);
    }
}

#define MAX_SERVERS 64
#define SERVICE_STREAM 0x5E4B1CE5ULL

/* One customer: sojourn time, then the workloads drain by the inter-arrival time t. */
static inline double kw_step(double *w, int c, double s, double t) {
    double soj = w[0] + s;
    int i = 1;
    while (i < c && w[i] < soj) {
        w[i - 1] = w[i];
        i++;
    }
    w[i - 1] = soj;
    for (int j = 0; j < c; j++) {
        double y = w[j] - t;
        w[j] = y > 0.0 ? y : 0.0;
    }
    return soj;
}

typedef struct {
    double lo, inv_log_ratio;
    int64_t nbins;
    uint64_t *hist;
    double sum, comp; /* Kahan */
    int64_t count;
} hist_t;

static inline void hist_add(hist_t *h, double x) {
    int64_t k;
    if (x < h->lo) {
        k = 0;
    } else {
        k = (int64_t)(log(x / h->lo) * h->inv_log_ratio) + 1;
        if (k > h->nbins) k = h->nbins + 1;
    }
    h->hist[k]++;
    double y = x - h->comp;
    double t = h->sum + y;
    h->comp = (t - h->sum) - y;
    h->sum = t;
    h->count++;
}

/* n customers from empty; arrival instants (the first at 0) and sojourn times, seconds. */
int queue_path(int c, int akind, double aa, double ab, int skind, double sa, double sb,
               uint64_t seed, int64_t n, double *arr, double *soj) {
    if (c < 1 || c > MAX_SERVERS) return -1;
    rng_t ra, rs;
    rng_seed(&ra, seed);
    rng_seed(&rs, seed ^ SERVICE_STREAM);
    double w[MAX_SERVERS] = {0};
    double t = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double s = draw(&rs, skind, sa, sb);
        double gap = draw(&ra, akind, aa, ab);
        arr[i] = t;
        soj[i] = kw_step(w, c, s, gap);
        t += gap;
    }
    return 0;
}

/* n customers from empty; the sojourn times of customers skip..n-1 go to the histogram
 * (nbins + 2 counters) and the mean; sums[0] = sum of kept values, sums[1] = count. */
int queue_truth(int c, int akind, double aa, double ab, int skind, double sa, double sb,
                uint64_t seed, int64_t n, int64_t skip, double lo, double log_ratio,
                int64_t nbins, uint64_t *hist, double *sums) {
    if (c < 1 || c > MAX_SERVERS) return -1;
    rng_t ra, rs;
    rng_seed(&ra, seed);
    rng_seed(&rs, seed ^ SERVICE_STREAM);
    hist_t h = {lo, 1.0 / log_ratio, nbins, hist, 0.0, 0.0, 0};
    double w[MAX_SERVERS] = {0};
    for (int64_t i = 0; i < n; i++) {
        double s = draw(&rs, skind, sa, sb);
        double gap = draw(&ra, akind, aa, ab);
        double x = kw_step(w, c, s, gap);
        if (i >= skip) hist_add(&h, x);
    }
    sums[0] = h.sum;
    sums[1] = (double)h.count;
    return 0;
}

/* A continuous-batching LLM engine, one step at a time (times in seconds).
 *
 * Poisson arrivals (mean gap `gap`) wait FCFS for one of `max_batch` slots. At the start
 * of each step every free slot takes the next waiting request (arrived by then); the
 * step prefills the new requests whole (`prompt` tokens each) and decodes one token for
 * every request admitted in an earlier step. It lasts
 *     base + per_token * prompt * (new requests) + per_decode * (decoding requests).
 * A request's first token comes at the end of its prefill step (TTFT = that instant
 * minus its arrival); it then decodes in the next `decode_steps` steps and leaves at the
 * end of the last one, freeing its slot. With no request in the engine and none waiting,
 * the engine idles until the next arrival and starts a step at that instant.
 *
 * Path mode (arr != NULL): n requests; arr, first (first-token instant), done.
 * Truth mode (arr == NULL): TTFT of requests skip..n-1 to the histogram and the mean. */
int llm_run(double gap, double base, double per_token, double per_decode, int max_batch,
            int prompt, int decode_steps, uint64_t seed, int64_t n, double *arr, double *first,
            double *done, int64_t skip, double lo, double log_ratio, int64_t nbins,
            uint64_t *hist, double *sums) {
    if (max_batch < 1 || max_batch > 4096 || decode_steps < 1) return -1;
    rng_t ra;
    rng_seed(&ra, seed);
    hist_t h = {lo, 1.0 / log_ratio, nbins, hist, 0.0, 0.0, 0};
    /* waiting requests: arrival instants, a growable ring */
    int64_t wcap = 1 << 16, whead = 0, wcount = 0;
    double *wq = (double *)malloc(sizeof(double) * (size_t)wcap);
    if (!wq) return -2;
    /* running requests, in admission order: index and prefill step */
    int64_t *ridx = (int64_t *)malloc(sizeof(int64_t) * (size_t)max_batch);
    int64_t *rstep = (int64_t *)malloc(sizeof(int64_t) * (size_t)max_batch);
    if (!ridx || !rstep) return -2;
    int rhead = 0, running = 0;
    double t = 0.0, next_arr = 0.0;
    int64_t gen = 0, admitted = 0, completed = 0, step = 0;
    for (;;) { /* path mode: until every request is done; truth mode: until all admitted */
        if (arr ? completed >= n : admitted >= n) break;
        while (gen < n && next_arr <= t) {
            if (wcount == wcap) { /* grow, unwrapping the ring */
                double *bigger = (double *)malloc(sizeof(double) * (size_t)(2 * wcap));
                if (!bigger) return -2;
                for (int64_t k = 0; k < wcount; k++) bigger[k] = wq[(whead + k) % wcap];
                free(wq);
                wq = bigger;
                whead = 0;
                wcap *= 2;
            }
            wq[(whead + wcount) % wcap] = next_arr;
            wcount++;
            if (arr) arr[gen] = next_arr;
            gen++;
            next_arr += -gap * log(u01(&ra));
        }
        if (running == 0 && wcount == 0) {
            if (gen >= n) break;
            t = next_arr; /* idle until the next arrival */
            continue;
        }
        int free_slots = max_batch - running;
        int p = wcount < free_slots ? (int)wcount : free_slots;
        int decoding = running;
        double t_end = t + base + per_token * prompt * p + per_decode * decoding;
        for (int k = 0; k < p; k++) {
            double a = wq[whead];
            whead = (whead + 1) % wcap;
            wcount--;
            int slot = (rhead + running) % max_batch;
            ridx[slot] = admitted;
            rstep[slot] = step;
            running++;
            if (arr) {
                first[admitted] = t_end;
            } else if (admitted >= skip) {
                hist_add(&h, t_end - a);
            }
            admitted++;
        }
        while (running > 0 && rstep[rhead] + decode_steps == step) {
            if (arr) done[ridx[rhead]] = t_end;
            rhead = (rhead + 1) % max_batch;
            running--;
            completed++;
        }
        t = t_end;
        step++;
    }
    free(wq);
    free(ridx);
    free(rstep);
    if (sums) {
        sums[0] = h.sum;
        sums[1] = (double)h.count;
    }
    return 0;
}
