/* The loader's fast path in C: a chunk of Kineto's traceEvents (a JSON array of event objects) scanned
 * straight into columns of the fields headroom reads, with no Python object per event.
 *
 * Why hand-written (docs/trace-core.md, "Load"): every JSON library for Python builds objects per event
 * (msgspec's typed structs are the cheapest: their path takes 3-4x this one's time, benchmarks/scan_speed.py);
 * none scans into columns. This scanner accepts a strict subset of what the msgspec path accepts and gives
 * the same values for it; anything else (invalid JSON, a value of another type, an id beyond 64 bits, an
 * escaped key, a lone surrogate, a number out of range, nesting deeper than MAX_DEPTH) makes `scan` return
 * None and the chunk takes the msgspec path, which decides and words every error. So the two paths can
 * only differ in speed (tests/test_scan.py and tests/test_load.py check that on generated and real traces).
 *
 * Names (and the (ph, cat) pairs that route events to tables) are interned: a Scanner keeps each distinct
 * value once, as a Python str, and a chunk's name column is an int32 code per event.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64

/* Which keys the scanner reads and into which arrays: generated from headroom/data/kineto.toml. */
#include "_scan_keys.h"

/* ---- interning: distinct byte strings -> codes, each kept once (a Python object per code) ----------
 * Interning makes no Python object: it runs while the scan has released the GIL. Each new code's value is
 * made afterwards, with the GIL held (interner_values), before the scan returns its columns. */

typedef struct {
    int32_t *slots;        /* code per slot, -1: empty */
    uint64_t *slot_hash;
    size_t cap;            /* slots, a power of two */
    size_t count;
    char *arena;           /* the keys' bytes, one after another */
    size_t arena_len, arena_cap;
    size_t *key_off;
    size_t *key_len;
    size_t keys_cap;
    PyObject *values;      /* list: the Python value of each code (made up to `count` by interner_values) */
    PyObject *(*make)(const char *, size_t);   /* a key's Python value */
    int oom;               /* an allocation failed while interning (reported once the GIL is held again) */
} Interner;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    return h;
}

static int interner_init(Interner *t, PyObject *(*make)(const char *, size_t)) {
    memset(t, 0, sizeof(*t));
    t->make = make;
    t->cap = 1024;
    t->slots = malloc(t->cap * sizeof(int32_t));
    t->slot_hash = malloc(t->cap * sizeof(uint64_t));
    t->values = PyList_New(0);
    if (!t->slots || !t->slot_hash || !t->values) return -1;
    memset(t->slots, 0xff, t->cap * sizeof(int32_t));
    return 0;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->slot_hash);
    free(t->arena);
    free(t->key_off);
    free(t->key_len);
    Py_XDECREF(t->values);
    memset(t, 0, sizeof(*t));
}

static int interner_grow(Interner *t) {
    size_t cap = t->cap * 2;
    int32_t *slots = malloc(cap * sizeof(int32_t));
    uint64_t *hashes = malloc(cap * sizeof(uint64_t));
    if (!slots || !hashes) { free(slots); free(hashes); return -1; }
    memset(slots, 0xff, cap * sizeof(int32_t));
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i] < 0) continue;
        size_t j = t->slot_hash[i] & (cap - 1);
        while (slots[j] >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
        hashes[j] = t->slot_hash[i];
    }
    free(t->slots);
    free(t->slot_hash);
    t->slots = slots;
    t->slot_hash = hashes;
    t->cap = cap;
    return 0;
}

/* The code of key[0:n]; a new key gets the next code (its value is made later: interner_values). -1: out of
 * memory (t->oom is set) or too many keys. Calls nothing of Python's: it runs without the GIL. */
static int32_t intern(Interner *t, const char *key, size_t n) {
    uint64_t h = hash_bytes(key, n);
    size_t j = h & (t->cap - 1);
    for (;;) {
        int32_t code = t->slots[j];
        if (code < 0) break;
        if (t->slot_hash[j] == h && t->key_len[code] == n &&
            (n == 0 || memcmp(t->arena + t->key_off[code], key, n) == 0))
            return code;
        j = (j + 1) & (t->cap - 1);
    }
    if (t->count >= INT32_MAX - 1) return -1;
    /* room first, so that a failure leaves the table as it was */
    if (t->arena_len + n > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + n) cap *= 2;
        char *arena = realloc(t->arena, cap);
        if (!arena) { t->oom = 1; return -1; }
        t->arena = arena;
        t->arena_cap = cap;
    }
    if (t->count == t->keys_cap) {
        size_t cap = t->keys_cap ? t->keys_cap * 2 : 1024;
        size_t *off = realloc(t->key_off, cap * sizeof(size_t));
        if (!off) { t->oom = 1; return -1; }
        t->key_off = off;
        size_t *len = realloc(t->key_len, cap * sizeof(size_t));
        if (!len) { t->oom = 1; return -1; }
        t->key_len = len;
        t->keys_cap = cap;
    }
    if ((t->count + 1) * 2 > t->cap) {
        if (interner_grow(t) < 0) { t->oom = 1; return -1; }
        j = h & (t->cap - 1);
        while (t->slots[j] >= 0) j = (j + 1) & (t->cap - 1);
    }
    if (n) memcpy(t->arena + t->arena_len, key, n);    /* (an empty key before the arena exists: NULL + 0) */
    int32_t code = (int32_t)t->count;
    t->key_off[code] = t->arena_len;
    t->key_len[code] = n;
    t->arena_len += n;
    t->slots[j] = code;
    t->slot_hash[j] = h;
    t->count++;
    return code;
}

static PyObject *make_str(const char *s, size_t n) {
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
}

/* A (ph, cat) key is the length of ph (4 bytes), ph, then cat. */
static PyObject *make_pair(const char *s, size_t n) {
    uint32_t ph_len;
    memcpy(&ph_len, s, 4);
    PyObject *ph = PyUnicode_DecodeUTF8(s + 4, ph_len, "strict");
    if (!ph) return NULL;
    PyObject *cat = PyUnicode_DecodeUTF8(s + 4 + ph_len, (Py_ssize_t)(n - 4 - ph_len), "strict");
    if (!cat) { Py_DECREF(ph); return NULL; }
    PyObject *pair = PyTuple_Pack(2, ph, cat);
    Py_DECREF(ph);
    Py_DECREF(cat);
    return pair;
}

/* The Python value of every code interned since the last call (the GIL held). -1: a Python error is set; the
 * codes without a value get theirs at the next call. */
static int interner_values(Interner *t) {
    for (size_t code = (size_t)PyList_GET_SIZE(t->values); code < t->count; code++) {
        size_t n = t->key_len[code];
        PyObject *value = t->make(n ? t->arena + t->key_off[code] : "", n);
        if (value == NULL) return -1;
        int failed = PyList_Append(t->values, value) < 0;
        Py_DECREF(value);
        if (failed) return -1;
    }
    return 0;
}

/* ---- the JSON grammar (RFC 8259), validated; NULL means "not for this path" ---------------------- */

/* JSON's whitespace: space, tab, newline, carriage return. */
static const uint8_t WHITESPACE[256] = {[' '] = 1, ['\t'] = 1, ['\n'] = 1, ['\r'] = 1};

static inline const char *skip_ws(const char *p, const char *end) {
    /* most values follow "," or ":" and one space or none; Kineto indents each event's first line */
    while (p < end && WHITESPACE[(unsigned char)*p]) p++;
    return p;
}

static inline int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 sequence starting at p (its first byte >= 0x80); its length, or 0 if it is not valid UTF-8
 * (overlong forms, surrogates and code points beyond U+10FFFF are not). */
static inline int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) { n = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
    else if (c == 0xED) { n = 3; hi = 0x9F; }
    else if (c == 0xF0) { n = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) { n = 4; hi = 0x8F; }
    else return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

/* A string's body from p (just after its opening quote) to its closing quote: returns the position after
 * the closing quote (NULL: not a valid string). *escaped is set when it holds a backslash escape. */
static const char *scan_string(const char *p, const char *end, int *escaped) {
    for (;;) {
#ifdef __SSE2__
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* signed compare: bytes below 0x20 and bytes from 0x80 (negative) both need a look */
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                     _mm_cmplt_epi8(v, space));
            int bits = _mm_movemask_epi8(m);
            if (bits == 0) { p += 16; continue; }
            p += __builtin_ctz(bits);
            break;
        }
#endif
        while (p < end) {
            unsigned char c = (unsigned char)*p;
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
            p++;
        }
        if (p >= end) return NULL;
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c >= 0x80) {
            int n = utf8_length((const unsigned char *)p, (const unsigned char *)end);
            if (n == 0) return NULL;
            p += n;
            continue;
        }
        /* a backslash */
        *escaped = 1;
        if (end - p < 2) return NULL;
        switch (p[1]) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
            p += 2;
            break;
        case 'u':
            if (end - p < 6) return NULL;
            for (int i = 2; i < 6; i++)
                if (hexval(p[i]) < 0) return NULL;
            p += 6;
            break;
        default:
            return NULL;
        }
    }
}

static void put_utf8(char **out, uint32_t cp) {
    char *o = *out;
    if (cp < 0x80) *o++ = (char)cp;
    else if (cp < 0x800) { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12)); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18)); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
    }
    *out = o;
}

static uint32_t hex4(const char *p) {
    return (uint32_t)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

/* The text of a validated string body s[0:n] with its escapes decoded, into out (n bytes suffice: no
 * escape is shorter than what it stands for). Returns the decoded length, or -1 for a lone surrogate. */
static Py_ssize_t unescape(const char *s, size_t n, char *out) {
    const char *end = s + n;
    char *o = out;
    while (s < end) {
        if (*s != '\\') { *o++ = *s++; continue; }
        char e = s[1];
        s += 2;
        switch (e) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp = hex4(s);
            s += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - s < 6 || s[0] != '\\' || s[1] != 'u') return -1;
                uint32_t lo = hex4(s + 2);
                if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                s += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = e; break;    /* " \ / */
        }
    }
    return o - out;
}

/* A number's text from p: returns the position after it (NULL: not a JSON number), with what it holds:
 * an integer's magnitude (overflow: beyond 64 bits), or the first 19 significant digits and the power of
 * ten that scales them (truncated: more digits followed). */
typedef struct {
    int negative, is_integer, overflow, truncated;
    uint64_t magnitude;       /* an integer's value; else the significant digits */
    int exp10;
    const char *start;
} Number;

static inline int is_digit(char c) { return (unsigned)(c - '0') < 10; }

static const char *scan_number(const char *p, const char *end, Number *num) {
    num->start = p;
    num->negative = 0;
    num->is_integer = 1;
    num->overflow = 0;
    num->truncated = 0;
    num->exp10 = 0;
    num->magnitude = 0;
    if (p < end && *p == '-') { num->negative = 1; p++; }
    if (p >= end) return NULL;
    uint64_t m = 0;
    int digits = 0;        /* significant digits in m */
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        const char *first = p;
        while (p < end && is_digit(*p)) {
            if (digits < 19) { m = m * 10 + (uint64_t)(*p - '0'); digits++; }
            else { num->truncated = 1; num->exp10++; }
            p++;
        }
        if (p - first > 19) {      /* a 20-digit integer may still fit 64 bits unsigned */
            uint64_t v = 0;
            for (const char *q = first; q < p; q++)
                if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*q - '0'), &v)) {
                    num->overflow = 1;
                    break;
                }
            num->magnitude = v;
        } else {
            num->magnitude = m;
        }
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        num->is_integer = 0;
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) {
            if (digits < 19) {
                m = m * 10 + (uint64_t)(*p - '0');
                if (m) digits++;
                num->exp10--;
            } else if (*p != '0') {
                num->truncated = 1;
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->is_integer = 0;
        p++;
        int sign = 1, e = 0;
        if (p < end && (*p == '+' || *p == '-')) { sign = *p == '-' ? -1 : 1; p++; }
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) {
            if (e < 100000) e = e * 10 + (*p - '0');
            p++;
        }
        num->exp10 += sign * e;
    }
    if (!num->is_integer) num->magnitude = m;
    return p;
}

/* A number skipped: its grammar only. */
static inline const char *skip_number(const char *p, const char *end) {
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && is_digit(*p)) p++;
    else return NULL;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return NULL;
        while (p < end && is_digit(*p)) p++;
    }
    return p;
}

/* An integer that fits int64 (msgspec's int fields: a fraction or an exponent is not an int). */
static int number_as_int64(const Number *num, int64_t *out) {
    if (!num->is_integer || num->overflow) return -1;
    if (num->negative) {
        if (num->magnitude > (uint64_t)INT64_MAX + 1) return -1;
        *out = (int64_t)(0 - num->magnitude);
    } else {
        if (num->magnitude > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)num->magnitude;
    }
    return 0;
}

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
                               1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The number as a float: an integer as float(int) does (correctly rounded), else the nearest double to the
 * decimal text: exactly by one IEEE operation when the digits fit 2^53 and the power of ten is exact
 * (Clinger's fast path), else by the C library's correctly rounded conversion. -1: out of range. */
static int number_as_double(const Number *num, const char *stop, double *out) {
    if (num->is_integer) {
        int64_t v;
        if (number_as_int64(num, &v) < 0) return -1;    /* beyond 64 bits: the msgspec path decides */
        *out = (double)v;
        return 0;
    }
    if (!num->truncated && num->magnitude <= (1ull << 53) && num->exp10 >= -22 && num->exp10 <= 22) {
        double v = (double)num->magnitude;
        v = num->exp10 >= 0 ? v * POW10[num->exp10] : v / POW10[-num->exp10];
        *out = num->negative ? -v : v;
        return 0;
    }
    char small[64];
    size_t n = (size_t)(stop - num->start);
    char *text = n < sizeof(small) ? small : malloc(n + 1);
    if (!text) return -1;
    memcpy(text, num->start, n);
    text[n] = 0;
    char *after = NULL;
    /* The C library's conversion, correctly rounded (glibc, musl, macOS; as Python's and msgspec's are), and
     * no call into Python: the scan runs without the GIL. A timestamp in microseconds of the epoch with a
     * fraction (1.7e15.xxx: 19 digits) takes this path. A locale whose decimal point is not "." stops it
     * early: the whole text is not read, and the chunk takes the msgspec path. */
    double v = strtod(text, &after);   /* ERANGE: an overflow (inf: refused below) or a subnormal result */
    int ok = after == text + n && isfinite(v);
    if (text != small) free(text);
    if (!ok) return -1;
    *out = v;
    return 0;
}

static const char *skip_value(const char *p, const char *end, int depth);

static const char *skip_container(const char *p, const char *end, int depth, char close, int object) {
    if (depth >= MAX_DEPTH) return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (object) {
            int esc = 0;
            if (p >= end || *p != '"') return NULL;
            p = scan_string(p + 1, end, &esc);
            if (!p) return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') return NULL;
            p = skip_ws(p + 1, end);
        }
        p = skip_value(p, end, depth + 1);
        if (!p) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* Any JSON value from p (no whitespace before it), validated and skipped. */
static const char *skip_value(const char *p, const char *end, int depth) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"': {
        int esc = 0;
        return scan_string(p + 1, end, &esc);
    }
    case '{': return skip_container(p, end, depth, '}', 1);
    case '[': return skip_container(p, end, depth, ']', 0);
    case 't': return end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f': return end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n': return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    default:
        return skip_number(p, end);
    }
}

/* ---- the columns of one chunk -------------------------------------------------------------------- */

/* One array per field of every event (the slots: _scan_keys.h). */
typedef struct {
    size_t n, cap;
    int32_t *pair, *name;
    int64_t *thread[N_THREADS];
    int32_t *thread_text[N_THREADS]; /* a pid/tid written as text ("Spans"): its code among the names; -1: a number */
    double *doubles[N_DOUBLES];      /* NaN: absent (JSON has no NaN) */
    int64_t *ints[N_INTS];
    uint16_t *present;               /* bit i: ints[i] present */
    int64_t *raw_at[N_RAWS], *raw_len[N_RAWS];   /* a raw value's text in the chunk (len 0: absent) */
} Columns;

#define EACH_COLUMN(X) X(pair) X(name) X(present)
#define EACH_ARRAY(X) X(thread, N_THREADS) X(thread_text, N_THREADS) X(doubles, N_DOUBLES) X(ints, N_INTS) \
                      X(raw_at, N_RAWS) X(raw_len, N_RAWS)

static void columns_free(Columns *c) {
#define FREE(f) free(c->f);
#define FREE_ALL(f, count) for (int k = 0; k < (count); k++) free(c->f[k]);
    EACH_COLUMN(FREE)
    EACH_ARRAY(FREE_ALL)
#undef FREE
#undef FREE_ALL
    memset(c, 0, sizeof(*c));
}

static int columns_reserve(Columns *c, size_t cap) {
#define GROW(f) { void *q = realloc(c->f, cap * sizeof(*c->f)); if (!q) return -1; c->f = q; }
#define GROW_ALL(f, count) \
    for (int k = 0; k < (count); k++) { void *q = realloc(c->f[k], cap * sizeof(*c->f[k])); if (!q) return -1; c->f[k] = q; }
    EACH_COLUMN(GROW)
    EACH_ARRAY(GROW_ALL)
#undef GROW
#undef GROW_ALL
    c->cap = cap;
    return 0;
}

/* The bits of `present` that are the event's own integers (an args object leaves them as they are). */
#define EVENT_INTS_MASK ((uint16_t)(((1u << N_INTS) - 1) & ~((1u << ARG_INTS) - 1)))

/* ---- the Scanner ---------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Interner names;
    Interner pairs;
    char *text;           /* room for an escaped string's decoded text */
    size_t text_cap;
    int busy;             /* a scan runs (without the GIL): another thread's scan is refused */
} Scanner;

typedef struct { const char *s; size_t n; int escaped; } Text;

/* A string value's text (decoded when escaped: into the scanner's room at `*room`). 0, or -1. */
static int text_value(Scanner *self, Text t, const char **s, size_t *n, size_t *room) {
    if (!t.escaped) { *s = t.s; *n = t.n; return 0; }
    if (*room + t.n > self->text_cap) return -1;   /* sized before the event (see scan) */
    Py_ssize_t len = unescape(t.s, t.n, self->text + *room);
    if (len < 0) return -1;
    *s = self->text + *room;
    *n = (size_t)len;
    *room += (size_t)len;
    return 0;
}

/* A value that must be a string: p at its opening quote. */
static const char *string_value(const char *p, const char *end, Text *t) {
    if (p >= end || *p != '"') return NULL;
    t->escaped = 0;
    t->s = p + 1;
    const char *q = scan_string(p + 1, end, &t->escaped);
    if (q) t->n = (size_t)(q - 1 - t->s);
    return q;
}

/* An int-or-null field: sets *present (0 for null). */
static const char *int_or_null(const char *p, const char *end, int64_t *out, int *present) {
    if (end - p >= 4 && memcmp(p, "null", 4) == 0) { *present = 0; *out = 0; return p + 4; }
    Number num;
    const char *q = scan_number(p, end, &num);
    if (!q || number_as_int64(&num, out) < 0) return NULL;
    *present = 1;
    return q;
}

static const char *float_or_null(const char *p, const char *end, double *out) {
    if (end - p >= 4 && memcmp(p, "null", 4) == 0) { *out = NAN; return p + 4; }
    Number num;
    const char *q = scan_number(p, end, &num);
    if (!q || number_as_double(&num, q, out) < 0) return NULL;
    return q;
}

/* A member's key and the ':' after it, from p (at the key's quote): the position of its value (NULL: not for
 * this path; an escaped key is not, nor a value missing). */
static const char *member_key(const char *p, const char *end, Text *key) {
    p = string_value(p, end, key);
    if (!p || key->escaped) return NULL;
    p = skip_ws(p, end);
    if (p >= end || *p != ':') return NULL;
    p = skip_ws(p + 1, end);
    return p < end ? p : NULL;
}

/* After a member's value: the next key's position (*closed 0) or the closing '}' (*closed 1); NULL otherwise. */
static const char *after_member(const char *p, const char *end, int *closed) {
    p = skip_ws(p, end);
    if (p >= end) return NULL;
    *closed = *p == '}';
    if (*closed) return p;
    if (*p != ',') return NULL;
    return skip_ws(p + 1, end);
}

static const char *scan_args(const char *p, const char *end, const char *base, Columns *c, size_t i) {
    /* p at '{'; a later "args" replaces an earlier one whole (as msgspec decodes it) */
    uint16_t present = 0;
    for (int k = 0; k < ARG_INTS; k++) c->ints[k][i] = 0;
    for (int k = 0; k < ARG_DOUBLES; k++) c->doubles[k][i] = NAN;
    for (int k = 0; k < ARG_RAWS; k++) c->raw_at[k][i] = c->raw_len[k][i] = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') { c->present[i] = (uint16_t)(c->present[i] & EVENT_INTS_MASK); return p + 1; }
    for (;;) {
        Text key;
        p = member_key(p, end, &key);
        if (!p) return NULL;
        int slot = args_key(key.s, key.n), index = SLOT_INDEX(slot);
        switch (SLOT_KIND(slot)) {
        case KIND_INT: {
            int has;
            p = int_or_null(p, end, &c->ints[index][i], &has);
            present = (uint16_t)(has ? present | (1u << index) : present & ~(1u << index));
            break;
        }
        case KIND_DOUBLE:
            p = float_or_null(p, end, &c->doubles[index][i]);
            break;
        case KIND_RAW: {
            const char *q = skip_value(p, end, 2);
            if (q) {
                c->raw_at[index][i] = p - base;
                c->raw_len[index][i] = q - p;
            }
            p = q;
            break;
        }
        default:
            p = skip_value(p, end, 2);
            break;
        }
        int closed;
        if (!p || !(p = after_member(p, end, &closed))) return NULL;
        if (closed) break;
    }
    c->present[i] = (uint16_t)((c->present[i] & EVENT_INTS_MASK) | present);
    return p + 1;
}

/* One event object from p (at its '{') into row i; NULL: not for this path. */
static const char *scan_event(Scanner *self, const char *p, const char *end, const char *base, Columns *c,
                              size_t i, size_t room0) {
    Text strings[N_STRINGS];
    for (int k = 0; k < N_STRINGS; k++) strings[k] = (Text){"", 0, 0};
    for (int k = 0; k < N_THREADS; k++) { c->thread[k][i] = 0; c->thread_text[k][i] = -1; }
    for (int k = 0; k < N_DOUBLES; k++) c->doubles[k][i] = NAN;
    c->present[i] = 0;
    for (int k = 0; k < N_INTS; k++) c->ints[k][i] = 0;
    for (int k = 0; k < N_RAWS; k++) c->raw_at[k][i] = c->raw_len[k][i] = 0;
    if (p >= end || *p != '{') return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p != '}') {
        for (;;) {
            Text key;
            p = member_key(p, end, &key);
            if (!p) return NULL;
            int slot = event_key(key.s, key.n), index = SLOT_INDEX(slot);
            switch (SLOT_KIND(slot)) {
            case KIND_STRING:
                p = string_value(p, end, &strings[index]);
                break;
            case KIND_DOUBLE:
                p = float_or_null(p, end, &c->doubles[index][i]);
                break;
            case KIND_INT: {
                int has;
                p = int_or_null(p, end, &c->ints[index][i], &has);
                c->present[i] = (uint16_t)(has ? c->present[i] | (1u << index) : c->present[i] & ~(1u << index));
                break;
            }
            case KIND_THREAD: {
                int64_t *value = &c->thread[index][i];
                int32_t *text = &c->thread_text[index][i];
                if (*p == '"') {      /* a name ("Spans"), interned at once (its text may use the room) */
                    Text t;
                    const char *s;
                    size_t sn, room = 0;
                    p = string_value(p, end, &t);
                    if (!p || text_value(self, t, &s, &sn, &room) < 0) return NULL;
                    int32_t code = intern(&self->names, s, sn);
                    if (code < 0) return NULL;
                    *value = 0;
                    *text = code;
                } else {
                    Number num;
                    const char *q = scan_number(p, end, &num);
                    if (!q || number_as_int64(&num, value) < 0) return NULL;
                    *text = -1;
                    p = q;
                }
                break;
            }
            case KIND_ARGS:
                if (*p != '{') return NULL;    /* args: null or not an object: the msgspec path decides */
                p = scan_args(p, end, base, c, i);
                break;
            default:
                p = skip_value(p, end, 1);
                break;
            }
            int closed;
            if (!p || !(p = after_member(p, end, &closed))) return NULL;
            if (closed) break;
        }
    }
    /* intern the name and the (ph, cat) pair */
    size_t room = room0;
    const char *s;
    size_t n;
    if (text_value(self, strings[STRING_NAME], &s, &n, &room) < 0) return NULL;
    int32_t code = intern(&self->names, s, n);
    if (code < 0) return NULL;
    c->name[i] = code;
    const char *phs, *cats;
    size_t phn, catn;
    if (text_value(self, strings[STRING_PH], &phs, &phn, &room) < 0 ||
        text_value(self, strings[STRING_CAT], &cats, &catn, &room) < 0) return NULL;
    char small[256];
    size_t kn = 4 + phn + catn;
    char *key = kn <= sizeof(small) ? small : malloc(kn);
    if (!key) return NULL;
    uint32_t phl = (uint32_t)phn;
    memcpy(key, &phl, 4);
    memcpy(key + 4, phs, phn);
    memcpy(key + 4 + phn, cats, catn);
    code = intern(&self->pairs, key, kn);
    if (key != small) free(key);
    if (code < 0) return NULL;
    c->pair[i] = code;
    return p + 1;
}

/* cols[name + suffix] = the bytes of data[0:n] (items of `item` bytes); -1 on failure. */
static int put_column(PyObject *cols, const char *name, const char *suffix, const void *data, size_t n, size_t item) {
    char key[96];
    snprintf(key, sizeof(key), "%s%s", name, suffix);
    PyObject *b = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)(n * item));
    if (!b) return -1;
    int failed = PyDict_SetItemString(cols, key, b) < 0;
    Py_DECREF(b);
    return failed ? -1 : 0;
}

/* The events of base[0:end - base] (a JSON array) into c: 0, 1 (not for this path: the msgspec path decides)
 * or -1 (out of memory). Calls nothing of Python's: it runs with the GIL released. */
static int scan_array(Scanner *self, const char *base, const char *end, Columns *c) {
    const char *p = skip_ws(base, end);
    if (p >= end || *p != '[') return 1;
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']') {
        p++;
    } else {
        for (;;) {
            if (c->n == c->cap && columns_reserve(c, c->cap * 2) < 0) return -1;
            p = scan_event(self, p, end, base, c, c->n, 0);
            if (!p) return self->names.oom || self->pairs.oom ? -1 : 1;
            c->n++;
            p = skip_ws(p, end);
            if (p >= end) return 1;
            if (*p == ']') { p++; break; }
            if (*p != ',') return 1;
            p = skip_ws(p + 1, end);
        }
    }
    return skip_ws(p, end) == end ? 0 : 1;
}

/* Scanner.scan(buffer) -> None, or (events, {column: bytes}). The scan itself runs without the GIL, so
 * another thread's Python runs beside it (the loader builds the previous chunk's tables meanwhile). */
static PyObject *Scanner_scan(Scanner *self, PyObject *arg) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.scan: another thread's scan of this scanner is running");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *base = view.buf, *end = base + view.len;
    Columns c;
    memset(&c, 0, sizeof(c));
    PyObject *result = NULL;
    /* An escaped string decodes to no more bytes than its text: the chunk's length is room enough. */
    if ((size_t)view.len > self->text_cap) {
        char *text = realloc(self->text, (size_t)view.len + 1);
        if (!text) { PyErr_NoMemory(); goto done; }
        self->text = text;
        self->text_cap = (size_t)view.len + 1;
    }
    if (columns_reserve(&c, (size_t)view.len / 256 + 16) < 0) { PyErr_NoMemory(); goto done; }
    int status;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    status = scan_array(self, base, end, &c);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    /* the values of the codes it met, also of a chunk the msgspec path takes (its codes stay interned) */
    if (interner_values(&self->names) < 0 || interner_values(&self->pairs) < 0) goto done;
    if (status < 0) {
        self->names.oom = self->pairs.oom = 0;
        PyErr_NoMemory();
        goto done;
    }
    if (status > 0) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    {
        size_t n = c.n;
        PyObject *cols = PyDict_New();
        if (!cols) goto done;
        int failed = put_column(cols, "pair", "", c.pair, n, 4) || put_column(cols, "name", "", c.name, n, 4) ||
                     put_column(cols, "present", "", c.present, n, 2);
        for (int k = 0; k < N_THREADS && !failed; k++)
            failed = put_column(cols, THREAD_COLUMNS[k], "", c.thread[k], n, 8) ||
                     put_column(cols, THREAD_COLUMNS[k], "_text", c.thread_text[k], n, 4);
        for (int k = 0; k < N_DOUBLES && !failed; k++) failed = put_column(cols, DOUBLE_COLUMNS[k], "", c.doubles[k], n, 8);
        for (int k = 0; k < N_INTS && !failed; k++) failed = put_column(cols, INT_COLUMNS[k], "", c.ints[k], n, 8);
        for (int k = 0; k < N_RAWS && !failed; k++)
            failed = put_column(cols, RAW_COLUMNS[k], "_at", c.raw_at[k], n, 8) ||
                     put_column(cols, RAW_COLUMNS[k], "_len", c.raw_len[k], n, 8);
        if (failed) { Py_DECREF(cols); goto done; }
        result = Py_BuildValue("(nN)", (Py_ssize_t)n, cols);
    }
done:
    columns_free(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Scanner *self = (Scanner *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (interner_init(&self->names, make_str) < 0 || interner_init(&self->pairs, make_pair) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void Scanner_dealloc(Scanner *self) {
    interner_free(&self->names);
    interner_free(&self->pairs);
    free(self->text);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Scanner_get_names(Scanner *self, void *closure) {
    Py_INCREF(self->names.values);
    return self->names.values;
}

static PyObject *Scanner_get_pairs(Scanner *self, void *closure) {
    Py_INCREF(self->pairs.values);
    return self->pairs.values;
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_O,
     "scan(buffer) -> None (the chunk needs the msgspec path) or (events, {column: bytes})"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"names", (getter)Scanner_get_names, NULL, "the distinct names, by code (a list the scanner appends to)", NULL},
    {"pairs", (getter)Scanner_get_pairs, NULL, "the distinct (ph, cat) pairs, by code", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headroom.trace._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scans chunks of Kineto's traceEvents into columns; names and (ph, cat) pairs interned across chunks.",
    .tp_new = Scanner_new,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef scan_module = {
    PyModuleDef_HEAD_INIT, "_scan", "Kineto traceEvents chunks scanned into columns (the loader's fast path).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&scan_module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    /* The key table's columns by kind, in slot order (scan.py reads `present`'s bits from INT_COLUMNS). */
    const struct { const char *name; const char *const *columns; } tables[] = {
        {"INT_COLUMNS", INT_COLUMNS}, {"DOUBLE_COLUMNS", DOUBLE_COLUMNS}, {"RAW_COLUMNS", RAW_COLUMNS},
        {"THREAD_COLUMNS", THREAD_COLUMNS},
    };
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        Py_ssize_t count = 0;
        while (tables[t].columns[count]) count++;
        PyObject *names = PyTuple_New(count);
        for (Py_ssize_t k = 0; names && k < count; k++) {
            PyObject *name = PyUnicode_FromString(tables[t].columns[k]);
            if (!name) { Py_DECREF(names); names = NULL; break; }
            PyTuple_SET_ITEM(names, k, name);
        }
        if (!names || PyModule_AddObject(m, tables[t].name, names) < 0) {
            Py_XDECREF(names);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
