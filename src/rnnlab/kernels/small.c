/* rnnlab.kernels.small: the recurrences of tiny cells, forward and BPTT, compiled at first use.
 *
 * Every function runs E members (each with its own weights) over B sequences of T steps; the
 * tensors are contiguous, the member first and then the time: u (E, T, B, G) the input terms,
 * states (E, T, B, H), weights (E, rows, cols) as torch stores them (applied as W h). With
 * lens (E * B int64, or NULL) a sequence's state is frozen from its length on, and the
 * backward passes its gradient straight through those steps, as rnnlab.unroll does.
 *
 * The backward functions write the gradients of the input terms and the initial state; the
 * RNN's, LSTM's and GRU's weight gradients are one batched product of those with the states
 * (done by the caller, small.py), the RHN's and DMU's are ADDED here (the caller zeroes them). Built twice: as is (double) and with -DSINGLE (float; see small.py).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef SINGLE
typedef float R;
#define SUFFIX _f32
#else
typedef double R;
#define SUFFIX _f64
#endif

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(n) CAT(n, SUFFIX)

/* exp, sigmoid and tanh over a contiguous block, written so that the compiler vectorises them
 * (the C library's exp and tanh are scalar calls, and they are most of a tiny cell's arithmetic).
 * double: exp(x) = 2^n p(r), x = n ln2 + r, |r| <= ln2 / 2, p the Taylor polynomial
 * of degree 13 (truncation below 1e-17); NaN stays NaN; the argument is clamped to
 * [-708.39, 709] (sigmoid and tanh saturate long before). tanh(x) = 2 sigmoid(2x) - 1. */
static inline double exp_d(double x) {
    x = x > 709.0 ? 709.0 : x;
    x = x < -708.39 ? -708.39 : x;
    double kd = x * 1.4426950408889634 + 6755399441055744.0; /* 0x1.8p52: n in the low bits */
    int64_t ki;
    memcpy(&ki, &kd, sizeof ki);
    kd -= 6755399441055744.0;
    double r = (x - kd * 0.6931471805599453) - kd * 2.3190468138462996e-17;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t bits = (uint64_t)(ki + 1023) << 52;
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#ifdef SINGLE
/* float: the same in single precision (degree 7, |error| about 1 ulp), so that it vectorises
 * at the float width */
static inline float exp_e(float x) {
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.3f ? -87.3f : x;
    float kf = x * 1.44269504f + 12582912.0f; /* 0x1.8p23 */
    int32_t ki;
    memcpy(&ki, &kf, sizeof ki);
    kf -= 12582912.0f;
    float r = (x - kf * 0.693145752f) - kf * 1.42860677e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)(ki + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
#else
#define exp_e exp_d
#endif

static void sigmoid_block(R *x, long n) {
    for (long k = 0; k < n; k++) x[k] = (R)1 / ((R)1 + exp_e(-x[k]));
}
/* tanh; near 0, where 2 sigmoid(2x) - 1 would lose the relative accuracy (a small state stays
 * accurate relative to itself), its Taylor series to x^11 (|x| < 1/16: below 1e-17 relative) */
static void tanh_block(R *x, long n) {
    for (long k = 0; k < n; k++) {
        R v = x[k], v2 = v * v;
        R series = v * ((R)1 + v2 * ((R)(-1.0 / 3) + v2 * ((R)(2.0 / 15) + v2 * ((R)(-17.0 / 315) +
                        v2 * ((R)(62.0 / 2835) + v2 * (R)(-1382.0 / 155925)))))); /* fmt */
        R far = (R)2 / ((R)1 + exp_e((R)-2 * v)) - (R)1;
        x[k] = (v < (R)0.0625 && v > (R)-0.0625) ? series : far;
    }
}
/* x[k] = sigmoid(x[k]) where scale[k] == 1, tanh(x[k]) where scale[k] == 2 */
static void gates_block(R *x, const R *scale, long n) {
    for (long k = 0; k < n; k++) {
        R c = scale[k];
        x[k] = c / ((R)1 + exp_e(-c * x[k])) - (c - (R)1);
    }
}

static inline long length_of(const int64_t *lens, long e, long b, long B, long T) {
    return lens ? (long)lens[e * B + b] : T;
}

/* ------------------------------------------------------------------ h = phi(W h + u) */
/* act: 0 tanh, 1 relu, 2 identity */
static inline R derivative(R h, int act) { /* phi' read from phi's output (NaN passes, as torch's) */
    if (act == 0) return (R)1 - h * h;
    if (act == 1) return h <= 0 ? (R)0 : (R)1;
    return (R)1;
}
/* the hidden states of frozen sequences (t >= length) keep their previous value */
static void freeze(R *s, const R *prev, long b_stride_prev, const int64_t *lens, long e, long t, long B, long H) {
    if (!lens) return;
    for (long b = 0; b < B; b++)
        if (t >= lens[e * B + b]) memcpy(s + b * H, prev + b * b_stride_prev, H * sizeof(R));
}

void NAME(rnn_forward)(long E, long T, long B, long H, int act, const R *u, const R *W, const R *h0,
                       const int64_t *lens, R *S) {
    for (long e = 0; e < E; e++) {
        const R *We = W + e * H * H;
        for (long t = 0; t < T; t++) {
            long o = (e * T + t) * B * H;
            R *s = S + o;
            const R *prev = t > 0 ? S + o - B * H : h0 + e * B * H;
            for (long b = 0; b < B; b++) {
                const R *hp = prev + b * H, *ut = u + o + b * H;
                for (long i = 0; i < H; i++) {
                    R z = ut[i];
                    const R *w = We + i * H;
                    for (long j = 0; j < H; j++) z += w[j] * hp[j];
                    s[b * H + i] = z;
                }
            }
            if (act == 0)
                tanh_block(s, B * H);
            else if (act == 1)
                for (long k = 0; k < B * H; k++) s[k] = s[k] < 0 ? (R)0 : s[k];
            freeze(s, prev, H, lens, e, t, B, H);
        }
    }
}

void NAME(rnn_backward)(long E, long T, long B, long H, int act, const R *dS, const R *S, const R *W,
                        const int64_t *lens, R *dU, R *dh0) {
    R *carry_all = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * H * H;
        memset(carry_all, 0, B * H * sizeof(R));
        for (long t = T - 1; t >= 0; t--) {
            for (long b = 0; b < B; b++) {
                long L = length_of(lens, e, b, B, T);
                R *carry = carry_all + b * H;
                long o = ((e * T + t) * B + b) * H;
                const R *s = S + o, *ds = dS + o;
                R *du = dU + o;
                if (t >= L) {
                    for (long i = 0; i < H; i++) carry[i] += ds[i], du[i] = 0;
                    continue;
                }
                for (long i = 0; i < H; i++) du[i] = (ds[i] + carry[i]) * derivative(s[i], act);
                for (long j = 0; j < H; j++) carry[j] = 0;
                for (long i = 0; i < H; i++) {
                    const R *w = We + i * H;
                    R gi = du[i];
                    for (long j = 0; j < H; j++) carry[j] += w[j] * gi;
                }
            }
        }
        for (long b = 0; b < B; b++) memcpy(dh0 + (e * B + b) * H, carry_all + b * H, H * sizeof(R));
    }
    free(carry_all);
}

/* ------------------------------------------------------------------ lanes: sequences side by side */
/* The same recurrences with the E * B sequences (member e, sequence b: lane e * B + b) run in
 * blocks of LANES side by side: every quantity of a block is stored as [row][lane], so each
 * inner loop is over the lanes of a block with no dependence between them, and the compiler
 * turns it into vector instructions (8 or 16 floats, 4 or 8 doubles per instruction). The
 * weights are copied per lane (a lane's member's), so a block may hold several members and E = 1
 * fills the lanes with its B sequences. Tensors in and out keep the layout of the loops above
 * (members, time, batch, rows); a block gathers all its steps into [time][row][lane] first and
 * scatters its results at the end (copying step by step stalls on store forwarding). A lane's
 * arithmetic does not depend on the other lanes, so a member's results are those of its run
 * alone. Past the last sequence a block repeats it and writes nothing.
 * Unlike the loops above, a lane forward writes the outputs (zero from each sequence's length on,
 * as the layer returns them) and the final state hn (cn) apart; its backward takes their
 * gradients dS and dhn (dcn), reads dS only before each length (time-major, or batch-first with
 * batch_first = 1: the memory a batch-first readout's gradient comes in), and starts its carry
 * from dhn. So no pass over the outputs is left to the caller, forward or backward. */
#define LANES 32
/* the helpers of the lane kernels are compiled once, not into every caller (build time) */
#define NOINLINE __attribute__((noinline))

/* the lanes' members, their offsets in a (E, T, B, rows) tensor at t = 0 (in rows), lengths */
static long lanes_of(long n0, long N, long T, long B, const int64_t *lens, long *mem, long *off, R *len) {
    long nb = N - n0 < LANES ? N - n0 : LANES;
    for (long k = 0; k < LANES; k++) {
        long n = n0 + (k < nb ? k : nb - 1), e = n / B, b = n % B;
        mem[k] = e;
        off[k] = e * T * B + b;
        len[k] = (R)(lens ? lens[n] : T);
    }
    return nb;
}
/* w[(r * C + c) * LANES + k] = W[mem[k]][r][c]: a (rows, cols) weight per lane */
static NOINLINE void spread(R *w, const R *W, long rows, long cols, const long *mem) {
    for (long rc = 0; rc < rows * cols; rc++)
        for (long k = 0; k < LANES; k++) w[rc * LANES + k] = W[mem[k] * rows * cols + rc];
}
/* x[(t * rows + i) * LANES + k] = X[(off[k] + t * B) * rows + i] for t < T, and back */
static NOINLINE void gather(R *x, const R *X, long rows, long T, long B, const long *off) {
    for (long t = 0; t < T; t++)
        for (long k = 0; k < LANES; k++) {
            const R *src = X + (off[k] + t * B) * rows;
            R *dst = x + t * rows * LANES + k;
            for (long i = 0; i < rows; i++) dst[i * LANES] = src[i];
        }
}
static NOINLINE void scatter(R *X, const R *x, long rows, long T, long B, const long *off, long nb) {
    for (long t = 0; t < T; t++)
        for (long k = 0; k < nb; k++) {
            R *dst = X + (off[k] + t * B) * rows;
            const R *src = x + t * rows * LANES + k;
            for (long i = 0; i < rows; i++) dst[i] = src[i * LANES];
        }
}
/* the initial state of each lane: h0 (E, B, rows) */
static NOINLINE void gather0(R *x, const R *X0, long rows, long T, long B, const long *off) {
    for (long k = 0; k < LANES; k++) {
        long e = off[k] / (T * B), b = off[k] % (T * B);
        for (long i = 0; i < rows; i++) x[i * LANES + k] = X0[(e * B + b) * rows + i];
    }
}
/* scatter for the outputs: zero from each lane's length on (the outputs of a sequence past its
 * end), so no pass over them is left to the caller */
static NOINLINE void scatter_live(R *X, const R *x, long rows, long T, long B, const long *off, long nb,
                                  const R *len) {
    for (long t = 0; t < T; t++)
        for (long k = 0; k < nb; k++) {
            R *dst = X + (off[k] + t * B) * rows;
            const R *src = x + t * rows * LANES + k;
            if ((R)t < len[k])
                for (long i = 0; i < rows; i++) dst[i] = src[i * LANES];
            else
                memset(dst, 0, rows * sizeof(R));
        }
}
/* gather for the outputs' gradients: zero from each lane's length on (the outputs there are the
 * constant zero, so their gradients reach nothing); X is (E, T, B, rows), or with batch_first
 * (E, B, T, rows): the memory a batch-first readout's gradient comes in, read without a copy */
static NOINLINE void gather_live(R *x, const R *X, long rows, long T, long B, const long *off, const R *len,
                                 int batch_first) {
    long base[LANES], step = batch_first ? 1 : B; /* lane k's row at step t: base[k] + t * step */
    for (long k = 0; k < LANES; k++) {
        long e = off[k] / (T * B), b = off[k] % (T * B);
        base[k] = batch_first ? (e * B + b) * T : off[k];
    }
    for (long t = 0; t < T; t++)
        for (long k = 0; k < LANES; k++) {
            const R *src = X + (base[k] + t * step) * rows;
            R *dst = x + t * rows * LANES + k;
            if ((R)t < len[k])
                for (long i = 0; i < rows; i++) dst[i * LANES] = src[i];
            else
                for (long i = 0; i < rows; i++) dst[i * LANES] = (R)0;
        }
}
/* the final state of each lane into X0 (E, B, rows): gather0's inverse */
static NOINLINE void scatter0(R *X0, const R *x, long rows, long T, long B, const long *off, long nb) {
    for (long k = 0; k < nb; k++) {
        long e = off[k] / (T * B), b = off[k] % (T * B);
        for (long i = 0; i < rows; i++) X0[(e * B + b) * rows + i] = x[i * LANES + k];
    }
}
static inline R tanh_e(R v) {
    R v2 = v * v;
    R series = v * ((R)1 + v2 * ((R)(-1.0 / 3) + v2 * ((R)(2.0 / 15) + v2 * ((R)(-17.0 / 315) +
                    v2 * ((R)(62.0 / 2835) + v2 * (R)(-1382.0 / 155925)))))); /* fmt */
    R far = (R)2 / ((R)1 + exp_e((R)-2 * v)) - (R)1;
    return (v < (R)0.0625 && v > (R)-0.0625) ? series : far;
}
static NOINLINE void sigmoid_lanes(R *x, long n) {
    for (long q = 0; q < n; q++) x[q] = (R)1 / ((R)1 + exp_e(-x[q]));
}
static NOINLINE void tanh_lanes(R *x, long n) {
    for (long q = 0; q < n; q++) x[q] = tanh_e(x[q]);
}

void NAME(rnn_lanes_forward)(long E, long T, long B, long H, int act, const R *u, const R *W, const R *h0,
                             const int64_t *lens, R *S, R *hn) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES];
    R *w = malloc(H * HL * sizeof(R)), *h0l = malloc(HL * sizeof(R));
    R *z = malloc(T * HL * sizeof(R)); /* the input terms, then the states, of all steps */
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, H, H, mem);
        gather0(h0l, h0, H, T, B, off);
        gather(z, u, H, T, B, off);
        for (long t = 0; t < T; t++) {
            R *zt = z + t * HL;
            const R *h = t > 0 ? zt - HL : h0l;
            for (long j = 0; j < H; j++) /* j outside: consecutive updates go to different rows */
                for (long i = 0; i < H; i++) {
                    R *zi = zt + i * LANES;
                    const R *wij = w + (i * H + j) * LANES, *hj = h + j * LANES;
                    for (long k = 0; k < LANES; k++) zi[k] += wij[k] * hj[k];
                }
            if (act == 0)
                tanh_lanes(zt, HL);
            else if (act == 1)
                for (long q = 0; q < HL; q++) zt[q] = zt[q] < 0 ? (R)0 : zt[q];
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) zt[i * LANES + k] = (R)t < len[k] ? zt[i * LANES + k] : h[i * LANES + k];
        }
        scatter_live(S, z, H, T, B, off, nb, len);
        scatter0(hn, z + (T - 1) * HL, H, T, B, off, nb);
    }
    free(w), free(h0l), free(z);
}

/* BPTT of rnn_lanes_forward: dU the gradients of the input terms, dh0 of the initial state, and
 * the weight's gradient ADDED to dW (the caller zeroes it) */
void NAME(rnn_lanes_backward)(long E, long T, long B, long H, int act, int batch_first, const R *dS, const R *dhn, const R *S, const R *W,
                              const R *h0, const int64_t *lens, R *dU, R *dW, R *dh0) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES];
    R *w = malloc(H * HL * sizeof(R)), *dw = malloc(H * HL * sizeof(R)), *carry = malloc(HL * sizeof(R));
    R *s = malloc((T + 1) * HL * sizeof(R)); /* h0, then the states of all steps */
    R *g = malloc(T * HL * sizeof(R));      /* dS, then dU, of all steps */
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, H, H, mem);
        memset(dw, 0, H * HL * sizeof(R));
        gather0(carry, dhn, H, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather(s + HL, S, H, T, B, off);
        gather_live(g, dS, H, T, B, off, len, batch_first);
        for (long t = T - 1; t >= 0; t--) {
            const R *st = s + (t + 1) * HL, *sp = s + t * HL;
            R *gt = g + t * HL;
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R in = gt[q] + carry[q], v = st[q];
                    R d = act == 0 ? (R)1 - v * v : act == 1 ? (v <= 0 ? (R)0 : (R)1) : (R)1;
                    int live = (R)t < len[k];
                    gt[q] = live ? in * d : (R)0;
                    carry[q] = live ? (R)0 : in; /* a frozen step passes its gradient on */
                }
            for (long i = 0; i < H; i++) {
                const R *gi = gt + i * LANES;
                for (long j = 0; j < H; j++) {
                    const R *wij = w + (i * H + j) * LANES, *spj = sp + j * LANES;
                    R *cj = carry + j * LANES, *dwij = dw + (i * H + j) * LANES;
                    for (long k = 0; k < LANES; k++) {
                        cj[k] += wij[k] * gi[k];
                        dwij[k] += gi[k] * spj[k];
                    }
                }
            }
        }
        scatter(dU, g, H, T, B, off, nb);
        for (long k = 0; k < nb; k++) {
            long e = mem[k], b = (n0 + k) % B;
            for (long i = 0; i < H; i++) dh0[(e * B + b) * H + i] = carry[i * LANES + k];
            for (long rc = 0; rc < H * H; rc++) dW[e * H * H + rc] += dw[rc * LANES + k];
        }
    }
    free(w), free(dw), free(carry), free(s), free(g);
}

/* ------------------------------------------------------------------ LSTM (gates i, f, g, o) */
/* u = W_ih x + b_ih + b_hh (E, T, B, 4H); A keeps the activated gates (E, T, B, 4H), TC tanh(c) */

void NAME(lstm_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *h0, const R *c0,
                        const int64_t *lens, R *S, R *C, R *A, R *TC) {
    long G = 4 * H;
    R *scale = malloc(B * G * sizeof(R));
    for (long b = 0; b < B; b++)
        for (long r = 0; r < G; r++) scale[b * G + r] = (r >= 2 * H && r < 3 * H) ? (R)2 : (R)1;
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        for (long t = 0; t < T; t++) {
            long o = (e * T + t) * B * H;
            R *s = S + o, *c = C + o, *tc = TC + o, *a = A + (e * T + t) * B * G;
            const R *hprev = t > 0 ? S + o - B * H : h0 + e * B * H;
            const R *cprev = t > 0 ? C + o - B * H : c0 + e * B * H;
            for (long b = 0; b < B; b++) {
                const R *hp = hprev + b * H, *ut = u + (e * T + t) * B * G + b * G;
                for (long r = 0; r < G; r++) {
                    R v = ut[r];
                    const R *w = We + r * H;
                    for (long j = 0; j < H; j++) v += w[j] * hp[j];
                    a[b * G + r] = v;
                }
            }
            gates_block(a, scale, B * G);
            for (long b = 0; b < B; b++) {
                const R *ab = a + b * G, *cp = cprev + b * H;
                for (long i = 0; i < H; i++) c[b * H + i] = ab[H + i] * cp[i] + ab[i] * ab[2 * H + i];
            }
            memcpy(tc, c, B * H * sizeof(R));
            tanh_block(tc, B * H);
            for (long b = 0; b < B; b++)
                for (long i = 0; i < H; i++) s[b * H + i] = a[b * G + 3 * H + i] * tc[b * H + i];
            freeze(s, hprev, H, lens, e, t, B, H);
            freeze(c, cprev, H, lens, e, t, B, H);
        }
    }
    free(scale);
}

void NAME(lstm_backward)(long E, long T, long B, long H, const R *dS, const R *dC, const R *S, const R *C,
                         const R *A, const R *TC, const R *W, const R *c0, const int64_t *lens, R *dU, R *dh0,
                         R *dc0) {
    long G = 4 * H;
    R dz[G];
    R *ch_all = malloc(B * H * sizeof(R));
    R *cc_all = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        memset(ch_all, 0, B * H * sizeof(R));
        memset(cc_all, 0, B * H * sizeof(R));
        for (long t = T - 1; t >= 0; t--) {
            for (long b = 0; b < B; b++) {
                long L = length_of(lens, e, b, B, T);
                R *ch = ch_all + b * H;
                R *cc = cc_all + b * H;
                long o = ((e * T + t) * B + b) * H, og_ = ((e * T + t) * B + b) * G;
                R *du = dU + og_;
                if (t >= L) {
                    for (long i = 0; i < H; i++) ch[i] += dS[o + i], cc[i] += dC[o + i];
                    for (long r = 0; r < G; r++) du[r] = 0;
                    continue;
                }
                const R *a = A + og_, *tcs = TC + o;
                const R *cp = t > 0 ? C + o - B * H : c0 + (e * B + b) * H;
                for (long i = 0; i < H; i++) {
                    R ig = a[i], fg = a[H + i], gg = a[2 * H + i], og = a[3 * H + i];
                    R tc = tcs[i];
                    R dh = dS[o + i] + ch[i];
                    R dc = dC[o + i] + cc[i] + dh * og * ((R)1 - tc * tc);
                    dz[i] = dc * gg * ig * ((R)1 - ig);
                    dz[H + i] = dc * cp[i] * fg * ((R)1 - fg);
                    dz[2 * H + i] = dc * ig * ((R)1 - gg * gg);
                    dz[3 * H + i] = dh * tc * og * ((R)1 - og);
                    cc[i] = dc * fg;
                }
                for (long j = 0; j < H; j++) ch[j] = 0;
                for (long r = 0; r < G; r++) {
                    const R *w = We + r * H;
                    R d = dz[r];
                    du[r] = d;
                    for (long j = 0; j < H; j++) ch[j] += w[j] * d;
                }
            }
        }
        for (long b = 0; b < B; b++) memcpy(dh0 + (e * B + b) * H, ch_all + b * H, H * sizeof(R));
        for (long b = 0; b < B; b++) memcpy(dc0 + (e * B + b) * H, cc_all + b * H, H * sizeof(R));
    }
    free(ch_all);
    free(cc_all);
}

/* ------------------------------------------------------------------ GRU (gates r, z, n) */
/* u = W_ih x + b_ih (E, T, B, 3H); A keeps r, z, n and W_hn h + b_hn (E, T, B, 4H) */

void NAME(gru_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *bhh, const R *h0,
                       const int64_t *lens, R *S, R *A) {
    long G = 3 * H;
    R *rz = malloc(B * 2 * H * sizeof(R)), *nn = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H, *be = bhh + e * G;
        for (long t = 0; t < T; t++) {
            long o = (e * T + t) * B * H;
            R *s = S + o, *a = A + (e * T + t) * B * 4 * H;
            const R *prev = t > 0 ? S + o - B * H : h0 + e * B * H;
            for (long b = 0; b < B; b++) {
                const R *hp = prev + b * H, *ut = u + (e * T + t) * B * G + b * G;
                R *ab = a + b * 4 * H;
                for (long r = 0; r < G; r++) {
                    R v = be[r];
                    const R *w = We + r * H;
                    for (long j = 0; j < H; j++) v += w[j] * hp[j];
                    if (r < 2 * H)
                        rz[b * 2 * H + r] = ut[r] + v;
                    else
                        ab[3 * H + r - 2 * H] = v; /* W_hn h + b_hn */
                }
            }
            sigmoid_block(rz, B * 2 * H);
            for (long b = 0; b < B; b++) {
                const R *ut = u + (e * T + t) * B * G + b * G;
                for (long i = 0; i < H; i++) nn[b * H + i] = ut[2 * H + i] + rz[b * 2 * H + i] * a[b * 4 * H + 3 * H + i];
            }
            tanh_block(nn, B * H);
            for (long b = 0; b < B; b++) {
                R *ab = a + b * 4 * H;
                const R *hp = prev + b * H;
                for (long i = 0; i < H; i++) {
                    R rg = rz[b * 2 * H + i], zg = rz[b * 2 * H + H + i], ng = nn[b * H + i];
                    ab[i] = rg, ab[H + i] = zg, ab[2 * H + i] = ng;
                    s[b * H + i] = ((R)1 - zg) * ng + zg * hp[i];
                }
            }
            freeze(s, prev, H, lens, e, t, B, H);
        }
    }
    free(rz), free(nn);
}

void NAME(gru_backward)(long E, long T, long B, long H, const R *dS, const R *S, const R *A, const R *W,
                        const R *h0, const int64_t *lens, R *dU, R *dGH, R *dh0) {
    long G = 3 * H;
    R *carry_all = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        memset(carry_all, 0, B * H * sizeof(R));
        for (long t = T - 1; t >= 0; t--) {
            for (long b = 0; b < B; b++) {
                long L = length_of(lens, e, b, B, T);
                R *carry = carry_all + b * H;
                long o = ((e * T + t) * B + b) * H;
                R *du = dU + ((e * T + t) * B + b) * G, *dgh = dGH + ((e * T + t) * B + b) * G;
                if (t >= L) {
                    for (long i = 0; i < H; i++) carry[i] += dS[o + i];
                    for (long r = 0; r < G; r++) du[r] = 0, dgh[r] = 0;
                    continue;
                }
                const R *a = A + ((e * T + t) * B + b) * 4 * H;
                const R *hp = t > 0 ? S + o - B * H : h0 + (e * B + b) * H;
                for (long i = 0; i < H; i++) {
                    R rg = a[i], zg = a[H + i], ng = a[2 * H + i], hn = a[3 * H + i];
                    R dh = dS[o + i] + carry[i];
                    R dan = dh * ((R)1 - zg) * ((R)1 - ng * ng);
                    R daz = dh * (hp[i] - ng) * zg * ((R)1 - zg);
                    R dar = dan * hn * rg * ((R)1 - rg);
                    du[i] = dar, du[H + i] = daz, du[2 * H + i] = dan;
                    dgh[i] = dar, dgh[H + i] = daz, dgh[2 * H + i] = dan * rg;
                    carry[i] = dh * zg;
                }
                for (long r = 0; r < G; r++) {
                    const R *w = We + r * H;
                    R d = dgh[r];
                    for (long j = 0; j < H; j++) carry[j] += w[j] * d;
                }
            }
        }
        for (long b = 0; b < B; b++) memcpy(dh0 + (e * B + b) * H, carry_all + b * H, H * sizeof(R));
    }
    free(carry_all);
}

/* ------------------------------------------------------------------ RHN (coupled carry gate) */
/* u = W_ih x (E, T, B, 2H); W (E, D, 2H, H); bias (E, D, 2H); A keeps, per step and layer,
 * the layer's input s, tanh(a) and sigmoid(b): (E, T, B, D, 3H) */

void NAME(rhn_forward)(long E, long T, long B, long H, long D, const R *u, const R *W, const R *bias,
                       const R *h0, const int64_t *lens, R *S, R *A) {
    long G = 2 * H;
    R *st = malloc(B * H * sizeof(R)), *ta = malloc(B * H * sizeof(R)), *tg = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * D * G * H, *be = bias + e * D * G;
        for (long t = 0; t < T; t++) {
            long o = (e * T + t) * B * H;
            const R *prev = t > 0 ? S + o - B * H : h0 + e * B * H;
            R *a = A + (e * T + t) * B * D * 3 * H;
            memcpy(st, prev, B * H * sizeof(R));
            for (long l = 0; l < D; l++) {
                const R *Wl = We + l * G * H, *bl = be + l * G;
                for (long b = 0; b < B; b++) {
                    const R *sb = st + b * H, *ut = u + (e * T + t) * B * G + b * G;
                    for (long r = 0; r < G; r++) {
                        R v = bl[r] + (l == 0 ? ut[r] : (R)0);
                        const R *w = Wl + r * H;
                        for (long j = 0; j < H; j++) v += w[j] * sb[j];
                        if (r < H)
                            ta[b * H + r] = v;
                        else
                            tg[b * H + r - H] = v;
                    }
                }
                tanh_block(ta, B * H);
                sigmoid_block(tg, B * H);
                for (long b = 0; b < B; b++) {
                    R *al = a + (b * D + l) * 3 * H, *sb = st + b * H;
                    for (long i = 0; i < H; i++) {
                        R x = ta[b * H + i], g = tg[b * H + i];
                        al[i] = sb[i], al[H + i] = x, al[2 * H + i] = g;
                        sb[i] = x * g + sb[i] * ((R)1 - g);
                    }
                }
            }
            memcpy(S + o, st, B * H * sizeof(R));
            freeze(S + o, prev, H, lens, e, t, B, H);
        }
    }
    free(st), free(ta), free(tg);
}

void NAME(rhn_backward)(long E, long T, long B, long H, long D, const R *dS, const R *A, const R *W,
                        const int64_t *lens, R *dU, R *dW, R *dbias, R *dh0) {
    long G = 2 * H;
    R nds[H], dp[G];
    R *ds_all = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *We = W + e * D * G * H;
        R *dWe = dW + e * D * G * H, *dbe = dbias + e * D * G;
        memset(ds_all, 0, B * H * sizeof(R));
        for (long t = T - 1; t >= 0; t--) {
            for (long b = 0; b < B; b++) {
                long L = length_of(lens, e, b, B, T);
                R *ds = ds_all + b * H;
                long o = ((e * T + t) * B + b) * H;
                R *du = dU + ((e * T + t) * B + b) * G;
                for (long i = 0; i < H; i++) ds[i] += dS[o + i];
                if (t >= L) {
                    for (long r = 0; r < G; r++) du[r] = 0;
                    continue;
                }
                const R *a = A + ((e * T + t) * B + b) * D * 3 * H;
                for (long l = D - 1; l >= 0; l--) {
                    const R *al = a + l * 3 * H, *Wl = We + l * G * H;
                    R *dWl = dWe + l * G * H, *dbl = dbe + l * G;
                    for (long i = 0; i < H; i++) {
                        R si = al[i], ta = al[H + i], tg = al[2 * H + i];
                        dp[i] = ds[i] * tg * ((R)1 - ta * ta);
                        dp[H + i] = ds[i] * (ta - si) * tg * ((R)1 - tg);
                        nds[i] = ds[i] * ((R)1 - tg);
                    }
                    for (long r = 0; r < G; r++) {
                        const R *w = Wl + r * H;
                        R *dw = dWl + r * H;
                        R d = dp[r];
                        dbl[r] += d;
                        for (long j = 0; j < H; j++) nds[j] += w[j] * d, dw[j] += d * al[j];
                    }
                    if (l == 0)
                        for (long r = 0; r < G; r++) du[r] = dp[r];
                    memcpy(ds, nds, H * sizeof(R));
                }
            }
        }
        for (long b = 0; b < B; b++) memcpy(dh0 + (e * B + b) * H, ds_all + b * H, H * sizeof(R));
    }
    free(ds_all);
}

/* ------------------------------------------------------------------ DMU */
/* The update network: a_1 = lrelu(u1 + W1h h) (u1 = W1x x + b1, width n[0]), then K - 1 hidden
 * layers a_{k+1} = lrelu(Wk a_k + bk) (widths n[k]), then [z; hh] = Wout a_K + bout; with K = 0
 * (no hidden layer) [z; hh] = u1 + W1h h. g = sigmoid(z), c = tanh(hh) (act 0) or hh (act 1),
 * h = c + g (h_prev - c). A keeps a_1 .. a_K, g and c per step: (E, T, B, sum(n) + 2H). */

void NAME(dmu_forward)(long E, long T, long B, long H, long K, const long *n, int act, R slope, const R *u1,
                       const R *w1h, R *const *Wk, R *const *bk, const R *wout, const R *bout, const R *h0,
                       const int64_t *lens, R *S, R *A) {
    long N = 2 * H, width = N;
    for (long k = 0; k < K; k++) width += n[k];
    long n0 = K ? n[0] : N;
    R *zg = malloc(B * H * sizeof(R)), *zc = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *W1 = w1h + e * n0 * H;
        for (long t = 0; t < T; t++) {
            long o = (e * T + t) * B * H;
            R *s = S + o;
            const R *prev = t > 0 ? S + o - B * H : h0 + e * B * H;
            for (long b = 0; b < B; b++) {
                const R *hp = prev + b * H, *ut = u1 + ((e * T + t) * B + b) * n0;
                R *a = A + ((e * T + t) * B + b) * width;
                R zz[N];
                R *first = K ? a : zz;
                for (long r = 0; r < n0; r++) {
                    R v = ut[r];
                    const R *w = W1 + r * H;
                    for (long j = 0; j < H; j++) v += w[j] * hp[j];
                    first[r] = K ? (v > 0 ? v : v * slope) : v;
                }
                R *pa = a;
                for (long k = 1; k < K; k++) {
                    R *cur = pa + n[k - 1];
                    const R *Wm = Wk[k - 1] + e * n[k] * n[k - 1], *bm = bk[k - 1] + e * n[k];
                    for (long r = 0; r < n[k]; r++) {
                        R v = bm[r];
                        const R *w = Wm + r * n[k - 1];
                        for (long j = 0; j < n[k - 1]; j++) v += w[j] * pa[j];
                        cur[r] = v > 0 ? v : v * slope;
                    }
                    pa = cur;
                }
                if (K) {
                    long nl = n[K - 1];
                    const R *Wo = wout + e * N * nl, *bo = bout + e * N;
                    for (long r = 0; r < N; r++) {
                        R v = bo[r];
                        const R *w = Wo + r * nl;
                        for (long j = 0; j < nl; j++) v += w[j] * pa[j];
                        zz[r] = v;
                    }
                }
                memcpy(zg + b * H, zz, H * sizeof(R));
                memcpy(zc + b * H, zz + H, H * sizeof(R));
            }
            sigmoid_block(zg, B * H);
            if (act == 0) tanh_block(zc, B * H);
            for (long b = 0; b < B; b++) {
                R *gc = A + ((e * T + t) * B + b) * width + width - N;
                const R *hp = prev + b * H;
                for (long i = 0; i < H; i++) {
                    R g = zg[b * H + i], c = zc[b * H + i];
                    gc[i] = g, gc[H + i] = c;
                    s[b * H + i] = c + g * (hp[i] - c);
                }
            }
            freeze(s, prev, H, lens, e, t, B, H);
        }
    }
    free(zg), free(zc);
}

void NAME(dmu_backward)(long E, long T, long B, long H, long K, const long *n, int act, R slope, const R *dS,
                        const R *S, const R *A, const R *w1h, R *const *Wk, const R *wout, const R *h0,
                        const int64_t *lens, R *dU1, R *dw1h, R *const *dWk, R *const *dbk, R *dwout, R *dbout,
                        R *dh0) {
    long N = 2 * H, width = N, widest = N;
    for (long k = 0; k < K; k++) width += n[k], widest = n[k] > widest ? n[k] : widest;
    long n0 = K ? n[0] : N;
    R dO[N], da[widest], dp[widest];
    R *carry_all = malloc(B * H * sizeof(R));
    for (long e = 0; e < E; e++) {
        const R *W1 = w1h + e * n0 * H;
        R *dW1 = dw1h + e * n0 * H;
        memset(carry_all, 0, B * H * sizeof(R));
        for (long t = T - 1; t >= 0; t--) {
            for (long b = 0; b < B; b++) {
                long L = length_of(lens, e, b, B, T);
                R *carry = carry_all + b * H;
                long o = ((e * T + t) * B + b) * H;
                R *du = dU1 + ((e * T + t) * B + b) * n0;
                if (t >= L) {
                    for (long i = 0; i < H; i++) carry[i] += dS[o + i];
                    for (long r = 0; r < n0; r++) du[r] = 0;
                    continue;
                }
                const R *a = A + ((e * T + t) * B + b) * width, *gc = a + width - N;
                const R *hp = t > 0 ? S + o - B * H : h0 + (e * B + b) * H;
                for (long i = 0; i < H; i++) {
                    R g = gc[i], c = gc[H + i], dh = dS[o + i] + carry[i];
                    R dc = dh * ((R)1 - g);
                    dO[i] = dh * (hp[i] - c) * g * ((R)1 - g);
                    dO[H + i] = act == 0 ? dc * ((R)1 - c * c) : dc;
                    carry[i] = dh * g;
                }
                const R *d1 = dO; /* the gradient of the first layer's pre-activation */
                if (K) {
                    long nl = n[K - 1];
                    const R *Wo = wout + e * N * nl, *al = a + width - N - nl;
                    R *dWo = dwout + e * N * nl, *dbo = dbout + e * N;
                    for (long j = 0; j < nl; j++) da[j] = 0;
                    for (long r = 0; r < N; r++) {
                        const R *w = Wo + r * nl;
                        R *dw = dWo + r * nl;
                        R d = dO[r];
                        dbo[r] += d;
                        for (long j = 0; j < nl; j++) da[j] += w[j] * d, dw[j] += d * al[j];
                    }
                    long off = width - N - nl;
                    for (long k = K - 1; k >= 0; k--) {
                        const R *ak = a + off;
                        for (long r = 0; r < n[k]; r++) dp[r] = ak[r] > 0 ? da[r] : da[r] * slope;
                        if (k == 0) break;
                        const R *aprev = ak - n[k - 1], *Wm = Wk[k - 1] + e * n[k] * n[k - 1];
                        R *dWm = dWk[k - 1] + e * n[k] * n[k - 1], *dbm = dbk[k - 1] + e * n[k];
                        for (long j = 0; j < n[k - 1]; j++) da[j] = 0;
                        for (long r = 0; r < n[k]; r++) {
                            const R *w = Wm + r * n[k - 1];
                            R *dw = dWm + r * n[k - 1];
                            R d = dp[r];
                            dbm[r] += d;
                            for (long j = 0; j < n[k - 1]; j++) da[j] += w[j] * d, dw[j] += d * aprev[j];
                        }
                        off -= n[k - 1];
                    }
                    d1 = dp;
                }
                for (long r = 0; r < n0; r++) {
                    const R *w = W1 + r * H;
                    R *dw = dW1 + r * H;
                    R d = d1[r];
                    du[r] = d;
                    for (long j = 0; j < H; j++) carry[j] += w[j] * d, dw[j] += d * hp[j];
                }
            }
        }
        for (long b = 0; b < B; b++) memcpy(dh0 + (e * B + b) * H, carry_all + b * H, H * sizeof(R));
    }
    free(carry_all);
}

/* The DMU with its sequences in lanes. The forward keeps only the states; the backward recomputes
 * each step's update network from the state before it (the same arithmetic as the forward) in
 * place of reading it back. */

/* y[r] += sum_j M[r][j] x[j] per lane, r < rows, j < cols (M a per-lane weight) */
static NOINLINE void lane_matvec(R *restrict y, const R *restrict M, const R *restrict x, long rows, long cols) {
    for (long j = 0; j < cols; j++) /* j outside: consecutive updates go to different rows */
        for (long r = 0; r < rows; r++) {
            const R *m = M + (r * cols + j) * LANES, *xj = x + j * LANES;
            R *yr = y + r * LANES;
            for (long k = 0; k < LANES; k++) yr[k] += m[k] * xj[k];
        }
}
/* y[j] += sum_r M[r][j] d[r] and dM[r][j] += d[r] x[j] per lane (the backward of lane_matvec) */
static NOINLINE void lane_matvec_back(R *restrict y, R *restrict dM, const R *restrict M, const R *restrict d,
                             const R *restrict x, long rows, long cols) {
    for (long r = 0; r < rows; r++)
        for (long j = 0; j < cols; j++) {
            const R *m = M + (r * cols + j) * LANES, *xj = x + j * LANES, *dr = d + r * LANES;
            R *yj = y + j * LANES, *dm = dM + (r * cols + j) * LANES;
            for (long k = 0; k < LANES; k++) yj[k] += m[k] * dr[k], dm[k] += dr[k] * xj[k];
        }
}
/* dM[mem[k]][r] += m[r][k] for the nb real lanes: per-lane sums into each member's gradient */
static NOINLINE void lane_reduce(R *dM, const R *m, long size, const long *mem, long nb) {
    for (long k = 0; k < nb; k++)
        for (long q = 0; q < size; q++) dM[mem[k] * size + q] += m[q * LANES + k];
}
static NOINLINE void lrelu_lanes(R *x, long rows, R slope) {
    for (long q = 0; q < rows * LANES; q++) x[q] = x[q] > 0 ? x[q] : x[q] * slope;
}

/* the per-lane weights of a DMU block (or their gradients): W1h, the hidden layers' W_k and b_k
 * (K - 1 of each), Wout and bout */
typedef struct {
    R *w1, **wk, **bk, *wo, *bo;
} dmu_lane_weights;

static long dmu_widest(long H, long K, const long *n) {
    long widest = 2 * H;
    for (long k = 0; k < K; k++) widest = n[k] > widest ? n[k] : widest;
    return widest;
}
static void dmu_lane_alloc(dmu_lane_weights *w, long H, long K, const long *n) {
    long n0 = K ? n[0] : 2 * H;
    w->w1 = calloc(n0 * H * LANES, sizeof(R));
    w->wk = calloc(K + 1, sizeof(R *)), w->bk = calloc(K + 1, sizeof(R *));
    for (long k = 1; k < K; k++) {
        w->wk[k - 1] = calloc(n[k] * n[k - 1] * LANES, sizeof(R));
        w->bk[k - 1] = calloc(n[k] * LANES, sizeof(R));
    }
    w->wo = K ? calloc(2 * H * n[K - 1] * LANES, sizeof(R)) : NULL;
    w->bo = K ? calloc(2 * H * LANES, sizeof(R)) : NULL;
}
static void dmu_lane_free(dmu_lane_weights *w, long K) {
    free(w->w1), free(w->wo), free(w->bo);
    for (long k = 1; k < K; k++) free(w->wk[k - 1]), free(w->bk[k - 1]);
    free(w->wk), free(w->bk);
}
static void dmu_lane_spread(dmu_lane_weights *w, long H, long K, const long *n, const R *w1h, R *const *Wk,
                            R *const *bk, const R *wout, const R *bout, const long *mem) {
    long n0 = K ? n[0] : 2 * H;
    spread(w->w1, w1h, n0, H, mem);
    for (long k = 1; k < K; k++) {
        spread(w->wk[k - 1], Wk[k - 1], n[k], n[k - 1], mem);
        spread(w->bk[k - 1], bk[k - 1], n[k], 1, mem);
    }
    if (K) spread(w->wo, wout, 2 * H, n[K - 1], mem), spread(w->bo, bout, 2 * H, 1, mem);
}
/* one step of a block: from the input terms ut (n0 rows) and the state hp, the layers' outputs
 * a (a_1 .. a_K, n[k] rows each), the gate g and candidate c (H rows each); returns nothing, the
 * new state is c + g (hp - c) */
static NOINLINE void dmu_lane_step(const dmu_lane_weights *w, long H, long K, const long *n, int act, R slope,
                          const R *ut, const R *hp, R *a, R *g, R *c) {
    long n0 = K ? n[0] : 2 * H, HL = H * LANES;
    R *first = K ? a : g; /* with K = 0 the first layer is [z; hh] itself (g and c are adjacent) */
    memcpy(first, ut, n0 * LANES * sizeof(R));
    lane_matvec(first, w->w1, hp, n0, H);
    if (K) {
        lrelu_lanes(a, n[0], slope);
        R *pa = a;
        for (long k = 1; k < K; k++) {
            R *cur = pa + n[k - 1] * LANES;
            memcpy(cur, w->bk[k - 1], n[k] * LANES * sizeof(R));
            lane_matvec(cur, w->wk[k - 1], pa, n[k], n[k - 1]);
            lrelu_lanes(cur, n[k], slope);
            pa = cur;
        }
        memcpy(g, w->bo, 2 * HL * sizeof(R));
        lane_matvec(g, w->wo, pa, 2 * H, n[K - 1]);
    }
    sigmoid_lanes(g, HL);
    if (act == 0) tanh_lanes(c, HL);
}

void NAME(dmu_lanes_forward)(long E, long T, long B, long H, long K, const long *n, int act, R slope,
                             const R *u1, const R *w1h, R *const *Wk, R *const *bk, const R *wout, const R *bout,
                             const R *h0, const int64_t *lens, R *S, R *hn) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES, n0 = K ? n[0] : 2 * H, nsum = 0;
    for (long k = 0; k < K; k++) nsum += n[k];
    R len[LANES];
    dmu_lane_weights w;
    dmu_lane_alloc(&w, H, K, n);
    R *u = malloc(T * n0 * LANES * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R));
    R *a = malloc((nsum + 1) * LANES * sizeof(R)), *gc = malloc(2 * HL * sizeof(R));
    for (long b0 = 0; b0 < N; b0 += LANES) {
        long nb = lanes_of(b0, N, T, B, lens, mem, off, len);
        dmu_lane_spread(&w, H, K, n, w1h, Wk, bk, wout, bout, mem);
        gather(u, u1, n0, T, B, off);
        gather0(s, h0, H, T, B, off);
        for (long t = 0; t < T; t++) {
            const R *hp = s + t * HL;
            R *ht = s + (t + 1) * HL, *g = gc, *c = gc + HL;
            dmu_lane_step(&w, H, K, n, act, slope, u + t * n0 * LANES, hp, a, g, c);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R v = c[q] + g[q] * (hp[q] - c[q]);
                    ht[q] = (R)t < len[k] ? v : hp[q];
                }
        }
        scatter_live(S, s + HL, H, T, B, off, nb, len);
        scatter0(hn, s + T * HL, H, T, B, off, nb);
    }
    dmu_lane_free(&w, K);
    free(u), free(s), free(a), free(gc);
}

/* BPTT of dmu_lanes_forward: dU1 the gradients of the input terms, dh0 of the initial state; the
 * weights' gradients are ADDED to dw1h, dWk, dbk, dwout, dbout (the caller zeroes them) */
void NAME(dmu_lanes_backward)(long E, long T, long B, long H, long K, const long *n, int act, R slope,
                              int batch_first, const R *dS, const R *dhn, const R *S, const R *u1, const R *w1h, R *const *Wk, R *const *bk,
                              const R *wout, const R *bout, const R *h0, const int64_t *lens, R *dU1, R *dw1h,
                              R *const *dWk, R *const *dbk, R *dwout, R *dbout, R *dh0) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES, n0 = K ? n[0] : 2 * H, nsum = 0;
    for (long k = 0; k < K; k++) nsum += n[k];
    long widest = dmu_widest(H, K, n);
    R len[LANES];
    dmu_lane_weights w, dw;
    dmu_lane_alloc(&w, H, K, n);
    dmu_lane_alloc(&dw, H, K, n);
    R *u = malloc(T * n0 * LANES * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R));
    R *gs = malloc(T * HL * sizeof(R)), *du = malloc(T * n0 * LANES * sizeof(R));
    R *a = malloc((nsum + 1) * LANES * sizeof(R)), *gc = malloc(2 * HL * sizeof(R));
    R *dO = malloc(2 * HL * sizeof(R)), *da = malloc(widest * LANES * sizeof(R)), *dp = malloc(widest * LANES * sizeof(R));
    R *carry = malloc(HL * sizeof(R));
    for (long b0 = 0; b0 < N; b0 += LANES) {
        long nb = lanes_of(b0, N, T, B, lens, mem, off, len);
        dmu_lane_spread(&w, H, K, n, w1h, Wk, bk, wout, bout, mem);
        memset(dw.w1, 0, n0 * HL * sizeof(R));
        for (long k = 1; k < K; k++) {
            memset(dw.wk[k - 1], 0, n[k] * n[k - 1] * LANES * sizeof(R));
            memset(dw.bk[k - 1], 0, n[k] * LANES * sizeof(R));
        }
        if (K) memset(dw.wo, 0, 2 * H * n[K - 1] * LANES * sizeof(R)), memset(dw.bo, 0, 2 * HL * sizeof(R));
        gather0(carry, dhn, H, T, B, off);
        gather(u, u1, n0, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather(s + HL, S, H, T, B, off);
        gather_live(gs, dS, H, T, B, off, len, batch_first);
        for (long t = T - 1; t >= 0; t--) {
            const R *hp = s + t * HL, *ds = gs + t * HL;
            R *g = gc, *c = gc + HL, *d1 = du + t * n0 * LANES;
            dmu_lane_step(&w, H, K, n, act, slope, u + t * n0 * LANES, hp, a, g, c);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R in = ds[q] + carry[q], live = (R)t < len[k] ? (R)1 : (R)0;
                    R dh = in * live, gq = g[q], cq = c[q];
                    R dc = dh * ((R)1 - gq);
                    dO[q] = dh * (hp[q] - cq) * gq * ((R)1 - gq);
                    dO[HL + q] = act == 0 ? dc * ((R)1 - cq * cq) : dc;
                    carry[q] = live != (R)0 ? dh * gq : in; /* a frozen step passes its gradient on */
                }
            if (K) {
                long nl = n[K - 1], offk = nsum - nl;
                for (long q = 0; q < 2 * HL; q++) dw.bo[q] += dO[q];
                memset(da, 0, nl * LANES * sizeof(R));
                lane_matvec_back(da, dw.wo, w.wo, dO, a + offk * LANES, 2 * H, nl);
                for (long k = K - 1; k >= 0; k--) {
                    const R *ak = a + offk * LANES;
                    R *dpk = k == 0 ? d1 : dp;
                    for (long q = 0; q < n[k] * LANES; q++) dpk[q] = ak[q] > 0 ? da[q] : da[q] * slope;
                    if (k == 0) break;
                    offk -= n[k - 1];
                    for (long q = 0; q < n[k] * LANES; q++) dw.bk[k - 1][q] += dp[q];
                    memset(da, 0, n[k - 1] * LANES * sizeof(R));
                    lane_matvec_back(da, dw.wk[k - 1], w.wk[k - 1], dp, a + offk * LANES, n[k], n[k - 1]);
                }
            } else {
                memcpy(d1, dO, 2 * HL * sizeof(R));
            }
            lane_matvec_back(carry, dw.w1, w.w1, d1, hp, n0, H);
        }
        scatter(dU1, du, n0, T, B, off, nb);
        for (long k = 0; k < nb; k++)
            for (long i = 0; i < H; i++) dh0[(mem[k] * B + (b0 + k) % B) * H + i] = carry[i * LANES + k];
        lane_reduce(dw1h, dw.w1, n0 * H, mem, nb);
        for (long k = 1; k < K; k++) {
            lane_reduce(dWk[k - 1], dw.wk[k - 1], n[k] * n[k - 1], mem, nb);
            lane_reduce(dbk[k - 1], dw.bk[k - 1], n[k], mem, nb);
        }
        if (K) lane_reduce(dwout, dw.wo, 2 * H * n[K - 1], mem, nb), lane_reduce(dbout, dw.bo, 2 * H, mem, nb);
    }
    dmu_lane_free(&w, K);
    dmu_lane_free(&dw, K);
    free(u), free(s), free(gs), free(du), free(a), free(gc), free(dO), free(da), free(dp), free(carry);
}

/* The GRU and the LSTM with their sequences in lanes; as the DMU's, each backward recomputes a
 * step's gates from the state before it (and the LSTM's cell from its saved cells). */
/* the 1 / 0 mask of the lanes whose sequence is still running at step t */
static NOINLINE void live_lanes(R *live, const R *len, long t) {
    for (long k = 0; k < LANES; k++) live[k] = (R)t < len[k] ? (R)1 : (R)0;
}

/* GRU: gh = W h + b_hh (3H rows: r, z, n), r = sigmoid(u_r + gh_r), z = sigmoid(u_z + gh_z),
 * n = tanh(u_n + r gh_n), h = (1 - z) n + z h_prev; gh keeps gh, then r, z in its first 2H rows */
static NOINLINE void gru_lane_step(const R *w, const R *bw, long H, const R *ut, const R *hp, R *gh, R *n) {
    long HL = H * LANES;
    memcpy(gh, bw, 3 * HL * sizeof(R));
    lane_matvec(gh, w, hp, 3 * H, H);
    for (long q = 0; q < 2 * HL; q++) gh[q] += ut[q];
    sigmoid_lanes(gh, 2 * HL);
    for (long q = 0; q < HL; q++) n[q] = ut[2 * HL + q] + gh[q] * gh[2 * HL + q];
    tanh_lanes(n, HL);
}

void NAME(gru_lanes_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *bhh, const R *h0,
                             const int64_t *lens, R *S, R *hn) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES];
    R *w = malloc(3 * H * HL * sizeof(R)), *bw = malloc(3 * HL * sizeof(R));
    R *ul = malloc(T * 3 * HL * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R));
    R *gh = malloc(3 * HL * sizeof(R)), *n = malloc(HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, 3 * H, H, mem);
        spread(bw, bhh, 3 * H, 1, mem);
        gather(ul, u, 3 * H, T, B, off);
        gather0(s, h0, H, T, B, off);
        for (long t = 0; t < T; t++) {
            const R *hp = s + t * HL;
            R *ht = s + (t + 1) * HL;
            gru_lane_step(w, bw, H, ul + t * 3 * HL, hp, gh, n);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R z = gh[HL + q], v = ((R)1 - z) * n[q] + z * hp[q];
                    ht[q] = (R)t < len[k] ? v : hp[q];
                }
        }
        scatter_live(S, s + HL, H, T, B, off, nb, len);
        scatter0(hn, s + T * HL, H, T, B, off, nb);
    }
    free(w), free(bw), free(ul), free(s), free(gh), free(n);
}

/* BPTT of gru_lanes_forward: dU the gradients of the input terms, dh0 of the initial state; the
 * gradients of W and b_hh are ADDED to dW and dbhh (the caller zeroes them) */
void NAME(gru_lanes_backward)(long E, long T, long B, long H, int batch_first, const R *dS, const R *dhn, const R *S, const R *u, const R *W,
                              const R *bhh, const R *h0, const int64_t *lens, R *dU, R *dW, R *dbhh, R *dh0) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES], live[LANES];
    R *w = malloc(3 * H * HL * sizeof(R)), *bw = malloc(3 * HL * sizeof(R));
    R *dw = malloc(3 * H * HL * sizeof(R)), *db = malloc(3 * HL * sizeof(R));
    R *ul = malloc(T * 3 * HL * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R)), *gs = malloc(T * HL * sizeof(R));
    R *gh = malloc(3 * HL * sizeof(R)), *n = malloc(HL * sizeof(R)), *dgh = malloc(3 * HL * sizeof(R));
    R *carry = malloc(HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, 3 * H, H, mem);
        spread(bw, bhh, 3 * H, 1, mem);
        memset(dw, 0, 3 * H * HL * sizeof(R));
        memset(db, 0, 3 * HL * sizeof(R));
        gather0(carry, dhn, H, T, B, off);
        gather(ul, u, 3 * H, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather(s + HL, S, H, T, B, off);
        gather_live(gs, dS, H, T, B, off, len, batch_first);
        for (long t = T - 1; t >= 0; t--) {
            const R *hp = s + t * HL, *ds = gs + t * HL;
            R *ut = ul + t * 3 * HL; /* becomes the gradient of the input terms */
            gru_lane_step(w, bw, H, ut, hp, gh, n);
            live_lanes(live, len, t);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R in = ds[q] + carry[q], dh = in * live[k];
                    R r = gh[q], z = gh[HL + q], nq = n[q], hn = gh[2 * HL + q];
                    R dan = dh * ((R)1 - z) * ((R)1 - nq * nq);
                    R daz = dh * (hp[q] - nq) * z * ((R)1 - z);
                    R dar = dan * hn * r * ((R)1 - r);
                    ut[q] = dar, ut[HL + q] = daz, ut[2 * HL + q] = dan;
                    dgh[q] = dar, dgh[HL + q] = daz, dgh[2 * HL + q] = dan * r;
                    carry[q] = live[k] != (R)0 ? dh * z : in; /* a frozen step passes its gradient on */
                }
            for (long q = 0; q < 3 * HL; q++) db[q] += dgh[q];
            lane_matvec_back(carry, dw, w, dgh, hp, 3 * H, H);
        }
        scatter(dU, ul, 3 * H, T, B, off, nb);
        for (long k = 0; k < nb; k++)
            for (long i = 0; i < H; i++) dh0[(mem[k] * B + (n0 + k) % B) * H + i] = carry[i * LANES + k];
        lane_reduce(dW, dw, 3 * H * H, mem, nb);
        lane_reduce(dbhh, db, 3 * H, mem, nb);
    }
    free(w), free(bw), free(dw), free(db), free(ul), free(s), free(gs), free(gh), free(n), free(dgh), free(carry);
}

/* LSTM: a = u + W h (4H rows: i, f, g, o), i, f, o sigmoid, g tanh, c = f c_prev + i g,
 * h = o tanh(c); a keeps the activated gates */
static NOINLINE void lstm_lane_step(const R *w, long H, const R *ut, const R *hp, R *a) {
    long HL = H * LANES;
    memcpy(a, ut, 4 * HL * sizeof(R));
    lane_matvec(a, w, hp, 4 * H, H);
    sigmoid_lanes(a, 2 * HL);
    tanh_lanes(a + 2 * HL, HL);
    sigmoid_lanes(a + 3 * HL, HL);
}

void NAME(lstm_lanes_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *h0, const R *c0,
                              const int64_t *lens, R *S, R *C, R *hn, R *cn) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES];
    R *w = malloc(4 * H * HL * sizeof(R)), *ul = malloc(T * 4 * HL * sizeof(R));
    R *s = malloc((T + 1) * HL * sizeof(R)), *c = malloc((T + 1) * HL * sizeof(R));
    R *a = malloc(4 * HL * sizeof(R)), *tc = malloc(HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, 4 * H, H, mem);
        gather(ul, u, 4 * H, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather0(c, c0, H, T, B, off);
        for (long t = 0; t < T; t++) {
            const R *hp = s + t * HL, *cp = c + t * HL;
            R *ht = s + (t + 1) * HL, *ct = c + (t + 1) * HL;
            lstm_lane_step(w, H, ul + t * 4 * HL, hp, a);
            for (long q = 0; q < HL; q++) tc[q] = a[HL + q] * cp[q] + a[q] * a[2 * HL + q];
            memcpy(ct, tc, HL * sizeof(R));
            tanh_lanes(tc, HL);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    int on = (R)t < len[k];
                    ht[q] = on ? a[3 * HL + q] * tc[q] : hp[q];
                    ct[q] = on ? ct[q] : cp[q];
                }
        }
        scatter_live(S, s + HL, H, T, B, off, nb, len);
        scatter0(hn, s + T * HL, H, T, B, off, nb);
        scatter0(cn, c + T * HL, H, T, B, off, nb);
        scatter(C, c + HL, H, T, B, off, nb);
    }
    free(w), free(ul), free(s), free(c), free(a), free(tc);
}

/* BPTT of lstm_lanes_forward: dU the gradients of the input terms, dh0 and dc0 of the initial
 * state; the gradient of W is ADDED to dW (the caller zeroes it) */
void NAME(lstm_lanes_backward)(long E, long T, long B, long H, int batch_first, const R *dS, const R *dhn, const R *dcn, const R *S, const R *C,
                               const R *u, const R *W, const R *h0, const R *c0, const int64_t *lens, R *dU, R *dW,
                               R *dh0, R *dc0) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES;
    R len[LANES], live[LANES];
    R *w = malloc(4 * H * HL * sizeof(R)), *dw = malloc(4 * H * HL * sizeof(R)), *ul = malloc(T * 4 * HL * sizeof(R));
    R *s = malloc((T + 1) * HL * sizeof(R)), *c = malloc((T + 1) * HL * sizeof(R));
    R *gs = malloc(T * HL * sizeof(R));
    R *a = malloc(4 * HL * sizeof(R)), *ch = malloc(HL * sizeof(R)), *cc = malloc(HL * sizeof(R));
    R *tc = malloc(HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, 4 * H, H, mem);
        memset(dw, 0, 4 * H * HL * sizeof(R));
        gather0(ch, dhn, H, T, B, off);
        gather0(cc, dcn, H, T, B, off);
        gather(ul, u, 4 * H, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather0(c, c0, H, T, B, off);
        gather(s + HL, S, H, T, B, off);
        gather(c + HL, C, H, T, B, off);
        gather_live(gs, dS, H, T, B, off, len, batch_first);
        for (long t = T - 1; t >= 0; t--) {
            const R *hp = s + t * HL, *cp = c + t * HL, *ct = c + (t + 1) * HL;
            const R *ds = gs + t * HL;
            R *dz = ul + t * 4 * HL; /* becomes the gradient of the input terms */
            lstm_lane_step(w, H, dz, hp, a);
            live_lanes(live, len, t);
            memcpy(tc, ct, HL * sizeof(R));
            tanh_lanes(tc, HL);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R inh = ds[q] + ch[q], inc = cc[q], on = live[k];
                    R ig = a[q], fg = a[HL + q], gg = a[2 * HL + q], og = a[3 * HL + q];
                    R tcq = tc[q];
                    R dh = inh * on, dc = (inc + dh * og * ((R)1 - tcq * tcq)) * on;
                    dz[q] = dc * gg * ig * ((R)1 - ig);
                    dz[HL + q] = dc * cp[q] * fg * ((R)1 - fg);
                    dz[2 * HL + q] = dc * ig * ((R)1 - gg * gg);
                    dz[3 * HL + q] = dh * tcq * og * ((R)1 - og);
                    ch[q] = on != (R)0 ? (R)0 : inh; /* a frozen step passes its gradients on */
                    cc[q] = on != (R)0 ? dc * fg : inc;
                }
            lane_matvec_back(ch, dw, w, dz, hp, 4 * H, H);
        }
        scatter(dU, ul, 4 * H, T, B, off, nb);
        for (long k = 0; k < nb; k++)
            for (long i = 0; i < H; i++) {
                long o = (mem[k] * B + (n0 + k) % B) * H + i;
                dh0[o] = ch[i * LANES + k], dc0[o] = cc[i * LANES + k];
            }
        lane_reduce(dW, dw, 4 * H * H, mem, nb);
    }
    free(w), free(dw), free(ul), free(s), free(c), free(gs), free(a), free(ch), free(cc), free(tc);
}

/* The RHN with its sequences in lanes: per step D micro-layers s <- tanh(a) g + s (1 - g),
 * [a; b] = W_l s + bias_l (+ u at l = 0), g = sigmoid(b); m keeps per layer its input s, tanh(a)
 * and g (D * 3H rows), out the new state; the backward recomputes them from the state before the
 * step */
static NOINLINE void rhn_lane_step(const R *w, const R *bw, long H, long D, const R *ut, const R *hp, R *m, R *out) {
    long HL = H * LANES, G = 2 * H;
    const R *s = hp;
    for (long l = 0; l < D; l++) {
        R *ml = m + l * 3 * HL, *pre = ml + HL; /* pre: [a; b], then [tanh(a); sigmoid(b)] in place */
        if (s != ml) memcpy(ml, s, HL * sizeof(R));
        memcpy(pre, bw + l * G * LANES, 2 * HL * sizeof(R));
        if (l == 0)
            for (long q = 0; q < 2 * HL; q++) pre[q] += ut[q];
        lane_matvec(pre, w + l * G * H * LANES, ml, G, H);
        tanh_lanes(pre, HL);
        sigmoid_lanes(pre + HL, HL);
        R *next = l + 1 < D ? m + (l + 1) * 3 * HL : out;
        for (long q = 0; q < HL; q++) next[q] = pre[q] * pre[HL + q] + ml[q] * ((R)1 - pre[HL + q]);
        s = next;
    }
    if (D == 0) memcpy(out, hp, HL * sizeof(R));
}

void NAME(rhn_lanes_forward)(long E, long T, long B, long H, long D, const R *u, const R *W, const R *bias,
                             const R *h0, const int64_t *lens, R *S, R *hn) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES, G = 2 * H;
    R len[LANES];
    R *w = malloc(D * G * H * LANES * sizeof(R)), *bw = malloc(D * G * LANES * sizeof(R));
    R *ul = malloc(T * G * LANES * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R));
    R *m = malloc((D + 1) * 3 * HL * sizeof(R)), *out = malloc(HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, D * G, H, mem);
        spread(bw, bias, D * G, 1, mem);
        gather(ul, u, G, T, B, off);
        gather0(s, h0, H, T, B, off);
        for (long t = 0; t < T; t++) {
            const R *hp = s + t * HL;
            R *ht = s + (t + 1) * HL;
            rhn_lane_step(w, bw, H, D, ul + t * G * LANES, hp, m, out);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) ht[i * LANES + k] = (R)t < len[k] ? out[i * LANES + k] : hp[i * LANES + k];
        }
        scatter_live(S, s + HL, H, T, B, off, nb, len);
        scatter0(hn, s + T * HL, H, T, B, off, nb);
    }
    free(w), free(bw), free(ul), free(s), free(m), free(out);
}

/* BPTT of rhn_lanes_forward: dU the gradients of the input terms, dh0 of the initial state; the
 * gradients of W and bias are ADDED to dW and dbias (the caller zeroes them) */
void NAME(rhn_lanes_backward)(long E, long T, long B, long H, long D, int batch_first, const R *dS, const R *dhn, const R *S, const R *u,
                              const R *W, const R *bias, const R *h0, const int64_t *lens, R *dU, R *dW, R *dbias,
                              R *dh0) {
    long N = E * B, mem[LANES], off[LANES], HL = H * LANES, G = 2 * H;
    R len[LANES], live[LANES];
    R *w = malloc(D * G * H * LANES * sizeof(R)), *bw = malloc(D * G * LANES * sizeof(R));
    R *dw = malloc(D * G * H * LANES * sizeof(R)), *db = malloc(D * G * LANES * sizeof(R));
    R *ul = malloc(T * G * LANES * sizeof(R)), *s = malloc((T + 1) * HL * sizeof(R)), *gs = malloc(T * HL * sizeof(R));
    R *m = malloc((D + 1) * 3 * HL * sizeof(R)), *out = malloc(HL * sizeof(R));
    R *carry = malloc(HL * sizeof(R)), *ds = malloc(HL * sizeof(R)), *dp = malloc(2 * HL * sizeof(R));
    for (long n0 = 0; n0 < N; n0 += LANES) {
        long nb = lanes_of(n0, N, T, B, lens, mem, off, len);
        spread(w, W, D * G, H, mem);
        spread(bw, bias, D * G, 1, mem);
        memset(dw, 0, D * G * H * LANES * sizeof(R));
        memset(db, 0, D * G * LANES * sizeof(R));
        gather0(carry, dhn, H, T, B, off);
        gather(ul, u, G, T, B, off);
        gather0(s, h0, H, T, B, off);
        gather(s + HL, S, H, T, B, off);
        gather_live(gs, dS, H, T, B, off, len, batch_first);
        for (long t = T - 1; t >= 0; t--) {
            const R *hp = s + t * HL, *dst = gs + t * HL;
            R *ut = ul + t * G * LANES; /* becomes the gradient of the input terms */
            rhn_lane_step(w, bw, H, D, ut, hp, m, out);
            live_lanes(live, len, t);
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    R in = dst[q] + carry[q];
                    ds[q] = in * live[k];
                    carry[q] = in;
                }
            if (D == 0) memset(ut, 0, 2 * HL * sizeof(R));
            for (long l = D - 1; l >= 0; l--) {
                const R *ml = m + l * 3 * HL;
                for (long q = 0; q < HL; q++) {
                    R si = ml[q], ta = ml[HL + q], tg = ml[2 * HL + q], d = ds[q];
                    dp[q] = d * tg * ((R)1 - ta * ta);
                    dp[HL + q] = d * (ta - si) * tg * ((R)1 - tg);
                    ds[q] = d * ((R)1 - tg);
                }
                for (long q = 0; q < 2 * HL; q++) db[l * G * LANES + q] += dp[q];
                lane_matvec_back(ds, dw + l * G * H * LANES, w + l * G * H * LANES, dp, ml, G, H);
                if (l == 0) memcpy(ut, dp, 2 * HL * sizeof(R));
            }
            for (long i = 0; i < H; i++)
                for (long k = 0; k < LANES; k++) {
                    long q = i * LANES + k;
                    carry[q] = live[k] != (R)0 ? ds[q] : carry[q]; /* a frozen step passes its gradient on */
                }
        }
        scatter(dU, ul, G, T, B, off, nb);
        for (long k = 0; k < nb; k++)
            for (long i = 0; i < H; i++) dh0[(mem[k] * B + (n0 + k) % B) * H + i] = carry[i * LANES + k];
        lane_reduce(dW, dw, D * G * H, mem, nb);
        lane_reduce(dbias, db, D * G, mem, nb);
    }
    free(w), free(bw), free(dw), free(db), free(ul), free(s), free(gs), free(m), free(out), free(carry), free(ds),
        free(dp);
}
