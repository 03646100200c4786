/*
 * The native codec of Kafka record batches (message format v2, "magic 2"), shared
 * declarations. One extension module, sparklog.model._kafka_batches, built from:
 *
 *   module.c   the Python functions and the failures they raise
 *   crc32c.c   Castagnoli CRC (the SSE4.2 instruction where the CPU has it)
 *   records.c  walking the records of one batch: checks, and Arrow columns when asked
 *   read.c     check(): a request's batches; decode(): many checked batches' records
 *   write.c    encode(): table rows as batches; encode_control(): a transaction marker
 *   arrow.c    Arrow's C data interface: decoded columns out, rows to encode in
 *
 * The Python side is sparklog/model/kafka_batches.py. Input comes from the network: every
 * read is bounds-checked, and a failure is a ValueError(kind, message) naming what is
 * wrong and where (kind "corrupt", "magic" or "invalid"). No mutable global state; the GIL
 * is released while bytes are walked, copied or checksummed.
 */
#ifndef SPARKLOG_KAFKA_BATCHES_H
#define SPARKLOG_KAFKA_BATCHES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Work on fewer bytes than this keeps the GIL: a small request's check takes a microsecond or
 * two, while giving the GIL up and taking it back, with the broker's other threads runnable,
 * can wait out their switch interval (milliseconds) and costs more CPU than the work itself. */
#define KB_NOGIL_MIN_BYTES (256 * 1024)
#define KB_BEGIN_NOGIL(work_bytes) \
    { \
        PyThreadState *kb_saved_ = (size_t)(work_bytes) >= KB_NOGIL_MIN_BYTES ? PyEval_SaveThread() : NULL;
#define KB_END_NOGIL \
        if (kb_saved_ != NULL) \
            PyEval_RestoreThread(kb_saved_); \
    }

/* The v2 batch header (Kafka's DefaultRecordBatch). */
#define HEADER_BYTES 61
#define LENGTH_AT 8
#define LEADER_EPOCH_AT 12
#define MAGIC_AT 16
#define CRC_AT 17
#define ATTRIBUTES_AT 21
#define LAST_OFFSET_DELTA_AT 23
#define FIRST_TIMESTAMP_AT 27
#define MAX_TIMESTAMP_AT 35
#define PRODUCER_ID_AT 43
#define PRODUCER_EPOCH_AT 51
#define BASE_SEQUENCE_AT 53
#define COUNT_AT 57
#define LENGTH_PREFIX_BYTES 12 /* baseOffset and batchLength precede what batchLength counts */
#define MAGIC_PREFIX_BYTES 17  /* enough to read the magic byte of any message format */

#define CODEC_MASK 0x07
#define MAX_CODEC 4
#define TIMESTAMP_TYPE_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define CONTROL_TIMESTAMP_TYPE (-1) /* a table's transaction marker row (Kafka's NO_TIMESTAMP_TYPE) */

/* attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount: 1 byte each at least */
#define MIN_RECORD_BODY 6

/* ------------------------------------------------------------------------------------ */
/* failures                                                                               */

typedef struct {
    const char *kind; /* NULL while nothing failed */
    char message[320];
    int no_memory;
} failure;

int kb_fail(failure *f, const char *kind, const char *format, ...);
int kb_out_of_memory(failure *f);
PyObject *kb_raise_failure(const failure *f);

/* ------------------------------------------------------------------------------------ */
/* big-endian fields                                                                      */

static inline uint16_t get16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Arrow buffers are read through memcpy: a buffer handed in from Python need not be aligned. */
static inline int32_t load_i32(const uint8_t *base, size_t index)
{
    int32_t v;
    memcpy(&v, base + index * 4, 4);
    return v;
}

static inline int64_t load_i64(const uint8_t *base, size_t index)
{
    int64_t v;
    memcpy(&v, base + index * 8, 8);
    return v;
}

/* ------------------------------------------------------------------------------------ */
/* varints (zigzag, as Kafka's ByteUtils)                                                */

typedef struct {
    const uint8_t *p;
    size_t end; /* exclusive */
    size_t pos;
} reader;

static inline int read_varint(reader *r, int32_t *out)
{
    uint32_t raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (r->pos >= r->end)
            return -1;
        uint8_t b = r->p[r->pos++];
        raw |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
            return 0;
        }
    }
    return -1;
}

static inline int read_varlong(reader *r, int64_t *out)
{
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->pos >= r->end)
            return -1;
        uint8_t b = r->p[r->pos++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1u)));
            return 0;
        }
    }
    return -1;
}

static inline uint32_t zigzag32(int32_t v) { return ((uint32_t)v << 1) ^ (uint32_t)(v >> 31); }
static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline size_t unsigned_varint_size(uint64_t z)
{
    size_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline size_t varint_size(int32_t v) { return unsigned_varint_size(zigzag32(v)); }
static inline size_t varlong_size(int64_t v) { return unsigned_varint_size(zigzag64(v)); }

static inline uint8_t *put_unsigned_varint(uint8_t *w, uint64_t z)
{
    while (z >= 0x80) {
        *w++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *w++ = (uint8_t)z;
    return w;
}

static inline uint8_t *put_varint(uint8_t *w, int32_t v) { return put_unsigned_varint(w, zigzag32(v)); }
static inline uint8_t *put_varlong(uint8_t *w, int64_t v) { return put_unsigned_varint(w, zigzag64(v)); }

/* ------------------------------------------------------------------------------------ */
/* batches and records                                                                        */

typedef struct {
    size_t start, end; /* the batch in the call's data */
    int64_t base_offset;
    int32_t leader_epoch;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t first_timestamp, max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t count;
} batch_head;

typedef struct {
    int64_t key_bytes, value_bytes, headers, header_key_bytes, header_value_bytes;
} record_sizes;

/* Where decoded records go: Arrow buffers (offsets int32, validity bitmaps LSB first). */
typedef struct {
    size_t rows, rows_cap, header_rows, header_rows_cap;
    int64_t *timestamp;
    int32_t *timestamp_type;
    int64_t *offset;
    uint8_t *key_valid, *key_data;
    int32_t *key_offsets;
    size_t key_len, key_cap;
    int64_t key_nulls;
    uint8_t *value_valid, *value_data;
    int32_t *value_offsets;
    size_t value_len, value_cap;
    int64_t value_nulls;
    uint8_t *headers_valid;
    int32_t *headers_offsets;
    int64_t headers_nulls;
    uint8_t *header_key_data;
    int32_t *header_key_offsets;
    size_t header_key_len, header_key_cap;
    uint8_t *header_value_valid, *header_value_data;
    int32_t *header_value_offsets;
    size_t header_value_len, header_value_cap;
    int64_t header_value_nulls;
} columns;


/* The Arrow C data interface (Arrow's abi.h: a stable ABI, declared as the spec says). */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};
#endif

/* The buffers of decoded records, in the order decode() fills them. */
enum { TIMESTAMP, TIMESTAMP_TYPE, OFFSET, KEY_VALID, KEY_OFFSETS, KEY_DATA, VALUE_VALID, VALUE_OFFSETS, VALUE_DATA,
       HEADERS_VALID, HEADERS_OFFSETS, HEADER_KEY_OFFSETS, HEADER_KEY_DATA, HEADER_VALUE_VALID,
       HEADER_VALUE_OFFSETS, HEADER_VALUE_DATA, BUFFERS };

/* One column of rows to encode, read in place: slot ``i`` is at ``index + i`` of the buffers. */
typedef struct {
    const uint8_t *valid;   /* validity bitmap, NULL: no nulls */
    const uint8_t *offsets; /* int32 offsets of a binary or list column */
    const uint8_t *data;    /* values of a fixed-width column, bytes of a binary one */
    size_t index, length;   /* first slot, and how many slots there are from it */
} column;

typedef struct {
    size_t rows;
    column offset, timestamp, timestamp_type, key, value;
    int has_headers;
    column headers, header_key, header_value; /* list offsets; the pairs' keys and values */
} table_view;

uint32_t kb_crc32c(const uint8_t *p, size_t n);
int kb_walk_records(const uint8_t *p, size_t len, const batch_head *b, int client, record_sizes *sizes,
                    columns *out, failure *f);
void *kb_alloc_buffer(size_t size, int zero);
/* A capsule of an ArrowArray owning ``buffers`` (freed with it, or here on failure). */
PyObject *kb_arrow_records(void *buffers[BUFFERS], const columns *c, int with_offsets);
/* The columns of an exported record batch; sets a Python error on failure. */
int kb_view_rows(PyObject *capsule, table_view *view);

PyObject *kb_check(PyObject *module, PyObject *args);
PyObject *kb_decode(PyObject *module, PyObject *args);
PyObject *kb_encode(PyObject *module, PyObject *args);
PyObject *kb_encode_control(PyObject *module, PyObject *args);
PyObject *kb_crc32c_of(PyObject *module, PyObject *args);

#endif
