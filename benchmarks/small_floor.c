/* The floor of benchmarks/small_models.py: the arithmetic of the tiny recurrences (forward over
 * time and BPTT with every weight gradient) as a plain scalar loop, one sequence after another,
 * the C library's exp and tanh, compiled -O3 for the generic CPU (no vectorisation across
 * sequences). The functions take the arguments of rnnlab.kernels.small's (src/rnnlab/kernels/
 * small.c): the benchmark runs a training step with these in their place and times the calls.
 *
 * Tensors are contiguous, members first, then time: u (E, T, B, G), states (E, T, B, H),
 * weights (E, rows, cols); lens (E * B int64) or NULL freezes a sequence from its length on.
 * Built as is (double) and with -DSINGLE (float).
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

#ifdef SINGLE
static inline R sig(R x) { return 1.0f / (1.0f + expf(-x)); }
static inline R th(R x) { return tanhf(x); }
#else
static inline R sig(R x) { return (R)1 / ((R)1 + exp(-x)); }
static inline R th(R x) { return tanh(x); }
#endif
static inline long length_of(const int64_t *lens, long e, long b, long B, long T) {
    return lens ? (long)lens[e * B + b] : T;
}

/* ------------------------------------------------------------------ h = phi(W h + u) */
/* act: 0 tanh, 1 relu, 2 identity */
static inline R activate(R z, int act) {
    if (act == 0) return th(z);
    if (act == 1) return z > 0 ? z : (R)0;
    return z;
}
static inline R derivative(R h, int act) { /* phi' read from phi's output */
    if (act == 0) return (R)1 - h * h;
    if (act == 1) return h > 0 ? (R)1 : (R)0;
    return (R)1;
}

void NAME(rnn_forward)(long E, long T, long B, long H, int act, const R *u, const R *W, const R *h0,
                       const int64_t *lens, R *S) {
    for (long e = 0; e < E; e++) {
        const R *We = W + e * H * H;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            const R *hp = h0 + (e * B + b) * H;
            for (long t = 0; t < T; t++) {
                long o = ((e * T + t) * B + b) * H;
                R *s = S + o;
                if (t < L) {
                    const R *ut = u + o;
                    for (long i = 0; i < H; i++) {
                        R z = ut[i];
                        const R *w = We + i * H;
                        for (long j = 0; j < H; j++) z += w[j] * hp[j];
                        s[i] = activate(z, act);
                    }
                } else {
                    memcpy(s, hp, H * sizeof(R));
                }
                hp = s;
            }
        }
    }
}

void NAME(rnn_backward)(long E, long T, long B, long H, int act, const R *dS, const R *S, const R *W,
                        const int64_t *lens, R *dU, R *dh0) {
    /* rnnlab's kernel leaves the weight gradient to one batched product; the floor computes it
     * here, into scratch memory, so that its time holds the whole arithmetic */
    R *dW = calloc(E * H * H, sizeof(R));
    const R *h0 = dh0; /* the initial state is not passed: zeros of the same shape stand in */
    R *zeros = calloc(E * B * H, sizeof(R));
    h0 = zeros;
    R carry[H], g[H];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * H * H;
        R *dWe = dW + e * H * H;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            for (long i = 0; i < H; i++) carry[i] = 0;
            for (long t = T - 1; t >= 0; t--) {
                long o = ((e * T + t) * B + b) * H;
                const R *s = S + o, *ds = dS + o;
                R *du = dU + o;
                if (t >= L) {
                    for (long i = 0; i < H; i++) carry[i] += ds[i], du[i] = 0;
                    continue;
                }
                const R *hp = t > 0 ? S + o - B * H : h0 + (e * B + b) * H;
                for (long i = 0; i < H; i++) g[i] = (ds[i] + carry[i]) * derivative(s[i], act), du[i] = g[i];
                for (long j = 0; j < H; j++) carry[j] = 0;
                for (long i = 0; i < H; i++) {
                    const R *w = We + i * H;
                    R *dw = dWe + i * H;
                    R gi = g[i];
                    for (long j = 0; j < H; j++) carry[j] += w[j] * gi, dw[j] += gi * hp[j];
                }
            }
            memcpy(dh0 + (e * B + b) * H, carry, H * sizeof(R));
        }
    }
    free(dW), free(zeros);
}

/* ------------------------------------------------------------------ LSTM (gates i, f, g, o) */
/* u = W_ih x + b_ih + b_hh (E, T, B, 4H); A keeps the activated gates (E, T, B, 4H) */

void NAME(lstm_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *h0, const R *c0,
                        const int64_t *lens, R *S, R *C, R *A, R *TC) {
    long G = 4 * H;
    R z[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            const R *hp = h0 + (e * B + b) * H, *cp = c0 + (e * B + b) * H;
            for (long t = 0; t < T; t++) {
                long o = ((e * T + t) * B + b) * H;
                R *s = S + o, *c = C + o;
                if (t < L) {
                    const R *ut = u + ((e * T + t) * B + b) * G;
                    R *a = A + ((e * T + t) * B + b) * G;
                    for (long r = 0; r < G; r++) {
                        R v = ut[r];
                        const R *w = We + r * H;
                        for (long j = 0; j < H; j++) v += w[j] * hp[j];
                        z[r] = v;
                    }
                    for (long i = 0; i < H; i++) {
                        R ig = sig(z[i]), fg = sig(z[H + i]), gg = th(z[2 * H + i]), og = sig(z[3 * H + i]);
                        a[i] = ig, a[H + i] = fg, a[2 * H + i] = gg, a[3 * H + i] = og;
                        c[i] = fg * cp[i] + ig * gg;
                        TC[o + i] = th(c[i]);
                        s[i] = og * TC[o + i];
                    }
                } else {
                    memcpy(s, hp, H * sizeof(R));
                    memcpy(c, cp, H * sizeof(R));
                }
                hp = s, cp = c;
            }
        }
    }
}

void NAME(lstm_backward)(long E, long T, long B, long H, const R *dS, const R *dC, const R *S, const R *C,
                         const R *A, const R *TC, const R *W, const R *c0, const int64_t *lens, R *dU, R *dh0,
                         R *dc0) {
    long G = 4 * H;
    R *dW = calloc(E * G * H, sizeof(R)), *h0 = calloc(E * B * H, sizeof(R)); /* (see rnn_backward) */
    R ch[H], cc[H], dz[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        R *dWe = dW + e * G * H;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            for (long i = 0; i < H; i++) ch[i] = 0, cc[i] = 0;
            for (long t = T - 1; t >= 0; t--) {
                long o = ((e * T + t) * B + b) * H, og_ = ((e * T + t) * B + b) * G;
                R *du = dU + og_;
                if (t >= L) {
                    for (long i = 0; i < H; i++) ch[i] += dS[o + i], cc[i] += dC[o + i];
                    for (long r = 0; r < G; r++) du[r] = 0;
                    continue;
                }
                const R *a = A + og_;
                const R *hp = t > 0 ? S + o - B * H : h0 + (e * B + b) * H;
                const R *cp = t > 0 ? C + o - B * H : c0 + (e * B + b) * H;
                for (long i = 0; i < H; i++) {
                    R ig = a[i], fg = a[H + i], gg = a[2 * H + i], og = a[3 * H + i];
                    R tc = TC[o + i];
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
                    R *dw = dWe + r * H;
                    R d = dz[r];
                    du[r] = d;
                    for (long j = 0; j < H; j++) ch[j] += w[j] * d, dw[j] += d * hp[j];
                }
            }
            memcpy(dh0 + (e * B + b) * H, ch, H * sizeof(R));
            memcpy(dc0 + (e * B + b) * H, cc, H * sizeof(R));
        }
    }
    free(dW), free(h0);
}

/* ------------------------------------------------------------------ GRU (gates r, z, n) */
/* u = W_ih x + b_ih (E, T, B, 3H); A keeps r, z, n and W_hn h + b_hn (E, T, B, 4H) */

void NAME(gru_forward)(long E, long T, long B, long H, const R *u, const R *W, const R *bhh, const R *h0,
                       const int64_t *lens, R *S, R *A) {
    long G = 3 * H;
    R gh[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H, *be = bhh + e * G;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            const R *hp = h0 + (e * B + b) * H;
            for (long t = 0; t < T; t++) {
                long o = ((e * T + t) * B + b) * H;
                R *s = S + o;
                if (t < L) {
                    const R *ut = u + ((e * T + t) * B + b) * G;
                    R *a = A + ((e * T + t) * B + b) * 4 * H;
                    for (long r = 0; r < G; r++) {
                        R v = be[r];
                        const R *w = We + r * H;
                        for (long j = 0; j < H; j++) v += w[j] * hp[j];
                        gh[r] = v;
                    }
                    for (long i = 0; i < H; i++) {
                        R rg = sig(ut[i] + gh[i]), zg = sig(ut[H + i] + gh[H + i]);
                        R ng = th(ut[2 * H + i] + rg * gh[2 * H + i]);
                        a[i] = rg, a[H + i] = zg, a[2 * H + i] = ng, a[3 * H + i] = gh[2 * H + i];
                        s[i] = ((R)1 - zg) * ng + zg * hp[i];
                    }
                } else {
                    memcpy(s, hp, H * sizeof(R));
                }
                hp = s;
            }
        }
    }
}

void NAME(gru_backward)(long E, long T, long B, long H, const R *dS, const R *S, const R *A, const R *W,
                        const R *h0, const int64_t *lens, R *dU, R *dGH, R *dh0) {
    long G = 3 * H;
    R *dW = calloc(E * G * H, sizeof(R)), *dbhh = calloc(E * G, sizeof(R)); /* (see rnn_backward) */
    R carry[H], dgh[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * G * H;
        R *dWe = dW + e * G * H, *dbe = dbhh + e * G;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            for (long i = 0; i < H; i++) carry[i] = 0;
            for (long t = T - 1; t >= 0; t--) {
                long o = ((e * T + t) * B + b) * H;
                R *du = dU + ((e * T + t) * B + b) * G;
                if (t >= L) {
                    for (long i = 0; i < H; i++) carry[i] += dS[o + i];
                    for (long r = 0; r < G; r++) du[r] = 0, dGH[((e * T + t) * B + b) * G + r] = 0;
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
                    R *out = dGH + ((e * T + t) * B + b) * G;
                    out[i] = dar, out[H + i] = daz, out[2 * H + i] = dan * rg;
                    carry[i] = dh * zg;
                }
                for (long r = 0; r < G; r++) {
                    const R *w = We + r * H;
                    R *dw = dWe + r * H;
                    R d = dgh[r];
                    dbe[r] += d;
                    for (long j = 0; j < H; j++) carry[j] += w[j] * d, dw[j] += d * hp[j];
                }
            }
            memcpy(dh0 + (e * B + b) * H, carry, H * sizeof(R));
        }
    }
    free(dW), free(dbhh);
}

/* ------------------------------------------------------------------ RHN (coupled carry gate) */
/* u = W_ih x (E, T, B, 2H); W (E, D, 2H, H); bias (E, D, 2H); A keeps, per step and layer,
 * the layer's input s, tanh(a) and sigmoid(b): (E, T, B, D, 3H) */

void NAME(rhn_forward)(long E, long T, long B, long H, long D, const R *u, const R *W, const R *bias,
                       const R *h0, const int64_t *lens, R *S, R *A) {
    long G = 2 * H;
    R s[H], p[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * D * G * H, *be = bias + e * D * G;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            const R *hp = h0 + (e * B + b) * H;
            for (long t = 0; t < T; t++) {
                long o = ((e * T + t) * B + b) * H;
                R *out = S + o;
                if (t >= L) {
                    memcpy(out, hp, H * sizeof(R));
                    hp = out;
                    continue;
                }
                const R *ut = u + ((e * T + t) * B + b) * G;
                R *a = A + ((e * T + t) * B + b) * D * 3 * H;
                memcpy(s, hp, H * sizeof(R));
                for (long l = 0; l < D; l++) {
                    const R *Wl = We + l * G * H, *bl = be + l * G;
                    R *al = a + l * 3 * H;
                    for (long r = 0; r < G; r++) {
                        R v = bl[r] + (l == 0 ? ut[r] : (R)0);
                        const R *w = Wl + r * H;
                        for (long j = 0; j < H; j++) v += w[j] * s[j];
                        p[r] = v;
                    }
                    for (long i = 0; i < H; i++) {
                        R ta = th(p[i]), tg = sig(p[H + i]);
                        al[i] = s[i], al[H + i] = ta, al[2 * H + i] = tg;
                        s[i] = ta * tg + s[i] * ((R)1 - tg);
                    }
                }
                memcpy(out, s, H * sizeof(R));
                hp = out;
            }
        }
    }
}

void NAME(rhn_backward)(long E, long T, long B, long H, long D, const R *dS, const R *A, const R *W,
                        const int64_t *lens, R *dU, R *dW, R *dbias, R *dh0) {
    long G = 2 * H;
    R ds[H], nds[H], dp[G];
    for (long e = 0; e < E; e++) {
        const R *We = W + e * D * G * H;
        R *dWe = dW + e * D * G * H, *dbe = dbias + e * D * G;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            for (long i = 0; i < H; i++) ds[i] = 0;
            for (long t = T - 1; t >= 0; t--) {
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
            memcpy(dh0 + (e * B + b) * H, ds, H * sizeof(R));
        }
    }
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
    R zz[N];
    for (long e = 0; e < E; e++) {
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            const R *hp = h0 + (e * B + b) * H;
            for (long t = 0; t < T; t++) {
                long o = ((e * T + t) * B + b) * H;
                R *s = S + o;
                if (t >= L) {
                    memcpy(s, hp, H * sizeof(R));
                    hp = s;
                    continue;
                }
                const R *ut = u1 + ((e * T + t) * B + b) * n0;
                R *a = A + ((e * T + t) * B + b) * width;
                const R *W1 = w1h + e * n0 * H;
                R *first = K ? a : zz;
                for (long r = 0; r < n0; r++) {
                    R v = ut[r];
                    const R *w = W1 + r * H;
                    for (long j = 0; j < H; j++) v += w[j] * hp[j];
                    first[r] = K ? (v > 0 ? v : v * slope) : v;
                }
                R *prev = a;
                for (long k = 1; k < K; k++) {
                    R *cur = prev + n[k - 1];
                    const R *Wm = Wk[k - 1] + e * n[k] * n[k - 1], *bm = bk[k - 1] + e * n[k];
                    for (long r = 0; r < n[k]; r++) {
                        R v = bm[r];
                        const R *w = Wm + r * n[k - 1];
                        for (long j = 0; j < n[k - 1]; j++) v += w[j] * prev[j];
                        cur[r] = v > 0 ? v : v * slope;
                    }
                    prev = cur;
                }
                if (K) {
                    long nl = n[K - 1];
                    const R *Wo = wout + e * N * nl, *bo = bout + e * N;
                    for (long r = 0; r < N; r++) {
                        R v = bo[r];
                        const R *w = Wo + r * nl;
                        for (long j = 0; j < nl; j++) v += w[j] * prev[j];
                        zz[r] = v;
                    }
                }
                R *gc = a + width - N;
                for (long i = 0; i < H; i++) {
                    R g = sig(zz[i]), c = act == 0 ? th(zz[H + i]) : zz[H + i];
                    gc[i] = g, gc[H + i] = c;
                    s[i] = c + g * (hp[i] - c);
                }
                hp = s;
            }
        }
    }
}

void NAME(dmu_backward)(long E, long T, long B, long H, long K, const long *n, int act, R slope, const R *dS,
                        const R *S, const R *A, const R *w1h, R *const *Wk, const R *wout, const R *h0,
                        const int64_t *lens, R *dU1, R *dw1h, R *const *dWk, R *const *dbk, R *dwout, R *dbout,
                        R *dh0) {
    long N = 2 * H, width = N, widest = N;
    for (long k = 0; k < K; k++) width += n[k], widest = n[k] > widest ? n[k] : widest;
    long n0 = K ? n[0] : N;
    R carry[H], dO[N], da[widest], dp[widest];
    for (long e = 0; e < E; e++) {
        const R *W1 = w1h + e * n0 * H;
        R *dW1 = dw1h + e * n0 * H;
        for (long b = 0; b < B; b++) {
            long L = length_of(lens, e, b, B, T);
            for (long i = 0; i < H; i++) carry[i] = 0;
            for (long t = T - 1; t >= 0; t--) {
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
            memcpy(dh0 + (e * B + b) * H, carry, H * sizeof(R));
        }
    }
}
