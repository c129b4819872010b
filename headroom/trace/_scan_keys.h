/* The C scanner's key table: generated from headroom/data/kineto.toml by scripts/gen_scan_keys.py
 * (at build time; tests/test_scan.py regenerates it and compares). Do not edit. */

/* Slots of each kind of array, the args' first: int (int64, a bit of `present`), double (float64,
 * NaN: absent), raw (offset and length of the value's text), string (text), thread (a number, or text). */
enum { INT_DEVICE, INT_STREAM, INT_CORRELATION, INT_EXTERNAL_ID, INT_SEQUENCE, INT_FWD_THREAD, INT_WAIT_ON_STREAM, INT_WAIT_ON_CUDA_EVENT_RECORD_CORR_ID, ARG_INTS, INT_ID = ARG_INTS, N_INTS };
static const char *const INT_COLUMNS[] = {"device", "stream", "correlation", "external_id", "sequence", "fwd_thread", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "id", NULL};
enum { DOUBLE_BYTES, ARG_DOUBLES, DOUBLE_TS = ARG_DOUBLES, DOUBLE_DUR, N_DOUBLES };
static const char *const DOUBLE_COLUMNS[] = {"bytes", "ts", "dur", NULL};
enum { RAW_DIMS, RAW_TYPES, ARG_RAWS, N_RAWS = ARG_RAWS };
static const char *const RAW_COLUMNS[] = {"dims", "types", NULL};
enum { ARG_STRINGS, STRING_PH = ARG_STRINGS, STRING_CAT, STRING_NAME, N_STRINGS };
static const char *const STRING_COLUMNS[] = {"ph", "cat", "name", NULL};
enum { ARG_THREADS, THREAD_PID = ARG_THREADS, THREAD_TID, N_THREADS };
static const char *const THREAD_COLUMNS[] = {"pid", "tid", NULL};

/* A key's slot: its kind and its index among that kind's arrays; 0: a key the scanner skips. */
enum { KIND_SKIP, KIND_INT, KIND_DOUBLE, KIND_RAW, KIND_STRING, KIND_THREAD, KIND_ARGS };
#define SLOT(kind, index) ((kind) << 8 | (index))
#define SLOT_KIND(slot) ((slot) >> 8)
#define SLOT_INDEX(slot) ((slot) & 0xff)

static inline int event_key(const char *k, size_t n) {
    switch (n) {
    case 2:
        if (memcmp(k, "ph", 2) == 0) return SLOT(KIND_STRING, STRING_PH);
        if (memcmp(k, "ts", 2) == 0) return SLOT(KIND_DOUBLE, DOUBLE_TS);
        if (memcmp(k, "id", 2) == 0) return SLOT(KIND_INT, INT_ID);
        break;
    case 3:
        if (memcmp(k, "cat", 3) == 0) return SLOT(KIND_STRING, STRING_CAT);
        if (memcmp(k, "pid", 3) == 0) return SLOT(KIND_THREAD, THREAD_PID);
        if (memcmp(k, "tid", 3) == 0) return SLOT(KIND_THREAD, THREAD_TID);
        if (memcmp(k, "dur", 3) == 0) return SLOT(KIND_DOUBLE, DOUBLE_DUR);
        break;
    case 4:
        if (memcmp(k, "name", 4) == 0) return SLOT(KIND_STRING, STRING_NAME);
        if (memcmp(k, "args", 4) == 0) return SLOT(KIND_ARGS, 0);
        break;
    default:
        break;
    }
    return 0;
}

static inline int args_key(const char *k, size_t n) {
    switch (n) {
    case 5:
        if (memcmp(k, "bytes", 5) == 0) return SLOT(KIND_DOUBLE, DOUBLE_BYTES);
        break;
    case 6:
        if (memcmp(k, "device", 6) == 0) return SLOT(KIND_INT, INT_DEVICE);
        if (memcmp(k, "stream", 6) == 0) return SLOT(KIND_INT, INT_STREAM);
        break;
    case 10:
        if (memcmp(k, "Input Dims", 10) == 0) return SLOT(KIND_RAW, RAW_DIMS);
        if (memcmp(k, "Input type", 10) == 0) return SLOT(KIND_RAW, RAW_TYPES);
        break;
    case 11:
        if (memcmp(k, "correlation", 11) == 0) return SLOT(KIND_INT, INT_CORRELATION);
        if (memcmp(k, "External id", 11) == 0) return SLOT(KIND_INT, INT_EXTERNAL_ID);
        break;
    case 13:
        if (memcmp(k, "Fwd thread id", 13) == 0) return SLOT(KIND_INT, INT_FWD_THREAD);
        break;
    case 14:
        if (memcmp(k, "wait_on_stream", 14) == 0) return SLOT(KIND_INT, INT_WAIT_ON_STREAM);
        break;
    case 15:
        if (memcmp(k, "Sequence number", 15) == 0) return SLOT(KIND_INT, INT_SEQUENCE);
        break;
    case 33:
        if (memcmp(k, "wait_on_cuda_event_record_corr_id", 33) == 0) return SLOT(KIND_INT, INT_WAIT_ON_CUDA_EVENT_RECORD_CORR_ID);
        break;
    default:
        break;
    }
    return 0;
}
