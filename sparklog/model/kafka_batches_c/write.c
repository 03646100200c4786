/* Writing: encode() a table's rows as record batches, encode_control() a transaction
 * marker's control batch. */
#include "batches.h"

#include <stdlib.h>


typedef struct {
    uint8_t *buf;
    size_t len, cap;
} output;

static int reserve(output *o, size_t n, failure *f)
{
    if (n <= o->cap - o->len)
        return 0;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < n) {
        if (cap > SIZE_MAX / 2)
            return kb_out_of_memory(f);
        cap *= 2;
    }
    uint8_t *grown = PyMem_RawRealloc(o->buf, cap);
    if (grown == NULL)
        return kb_out_of_memory(f);
    o->buf = grown;
    o->cap = cap;
    return 0;
}

static int fixed_at(const column *c, size_t row, size_t width, const char *name, int64_t *value, failure *f)
{
    if (row >= c->length || c->data == NULL)
        return kb_fail(f, "invalid", "row %zu is beyond the %s column", row, name);
    size_t i = c->index + row;
    *value = width == 8 ? load_i64(c->data, i) : load_i32(c->data, i);
    return 0;
}

static int is_valid(const column *c, size_t i)
{
    return c->valid == NULL || ((c->valid[i >> 3] >> (i & 7)) & 1);
}

/* Slot ``slot`` of a binary column: its bytes, or length -1 when null. */
static int binary_at(const column *c, size_t slot, const char *name, const uint8_t **ptr, int32_t *length,
                     failure *f)
{
    if (slot >= c->length)
        return kb_fail(f, "invalid", "slot %zu is beyond the %s column", slot, name);
    size_t i = c->index + slot;
    if (!is_valid(c, i)) {
        *ptr = NULL;
        *length = -1;
        return 0;
    }
    int32_t start = load_i32(c->offsets, i), end = load_i32(c->offsets, i + 1);
    if (start < 0 || end < start)
        return kb_fail(f, "invalid", "slot %zu of the %s column has bad offsets", slot, name);
    *ptr = c->data + start;
    *length = end - start;
    return 0;
}

typedef struct {
    table_view rows;
    int32_t leader_epoch;
    size_t max_records, max_bytes;
    int codec;
    PyObject *compress;
} encode_input;

static inline int64_t floor_ms(int64_t us) { return us / 1000 - ((us % 1000) < 0); }

/* The headers of ``row``: the slots [first, end) of the header key/value columns. */
static int header_range(const encode_input *in, size_t row, size_t *first, size_t *end, failure *f)
{
    *first = *end = 0;
    if (!in->rows.has_headers)
        return 0;
    const column *c = &in->rows.headers;
    size_t i = c->index + row;
    if (row >= c->length)
        return kb_fail(f, "invalid", "row %zu is beyond the headers column", row);
    if (!is_valid(c, i))
        return 0;
    int32_t a = load_i32(c->offsets, i), b = load_i32(c->offsets, i + 1);
    if (a < 0 || b < a)
        return kb_fail(f, "invalid", "row %zu of the headers column has bad offsets", row);
    *first = (size_t)a;
    *end = (size_t)b;
    return 0;
}

/* A record's body size (what its length varint counts). Null header keys are written as
 * empty strings: Kafka has no null header key. */
static int record_body_size(const encode_input *in, size_t row, int64_t timestamp_delta, int32_t offset_delta,
                            size_t *size, failure *f)
{
    const uint8_t *ptr;
    int32_t key_length, value_length;
    if (binary_at(&in->rows.key, row, "key", &ptr, &key_length, f) ||
        binary_at(&in->rows.value, row, "value", &ptr, &value_length, f))
        return -1;
    size_t first, end;
    if (header_range(in, row, &first, &end, f))
        return -1;
    if (end - first > INT32_MAX)
        return kb_fail(f, "invalid", "row %zu has too many headers", row);
    size_t s = 1 + varlong_size(timestamp_delta) + varint_size(offset_delta) + varint_size(key_length) +
               (key_length > 0 ? (size_t)key_length : 0) + varint_size(value_length) +
               (value_length > 0 ? (size_t)value_length : 0) + varint_size((int32_t)(end - first));
    for (size_t j = first; j < end; j++) {
        int32_t hk, hv;
        if (binary_at(&in->rows.header_key, j, "header key", &ptr, &hk, f) ||
            binary_at(&in->rows.header_value, j, "header value", &ptr, &hv, f))
            return -1;
        if (hk < 0)
            hk = 0;
        s += varint_size(hk) + (size_t)hk + varint_size(hv) + (hv > 0 ? (size_t)hv : 0);
    }
    if (s > INT32_MAX)
        return kb_fail(f, "invalid", "row %zu is larger than a record can be", row);
    *size = s;
    return 0;
}

static uint8_t *put_bytes(uint8_t *w, const uint8_t *src, int32_t length)
{
    w = put_varint(w, length);
    if (length > 0) {
        memcpy(w, src, (size_t)length);
        w += length;
    }
    return w;
}

static int write_record(const encode_input *in, size_t row, int64_t timestamp_delta, int32_t offset_delta,
                        size_t body, uint8_t *w, failure *f)
{
    const uint8_t *key, *value;
    int32_t key_length, value_length;
    size_t first, end;
    if (binary_at(&in->rows.key, row, "key", &key, &key_length, f) ||
        binary_at(&in->rows.value, row, "value", &value, &value_length, f) || header_range(in, row, &first, &end, f))
        return -1;
    w = put_varint(w, (int32_t)body);
    *w++ = 0; /* record attributes: unused */
    w = put_varlong(w, timestamp_delta);
    w = put_varint(w, offset_delta);
    w = put_bytes(w, key, key_length);
    w = put_bytes(w, value, value_length);
    w = put_varint(w, (int32_t)(end - first));
    for (size_t j = first; j < end; j++) {
        const uint8_t *hk, *hv;
        int32_t hk_length, hv_length;
        if (binary_at(&in->rows.header_key, j, "header key", &hk, &hk_length, f) ||
            binary_at(&in->rows.header_value, j, "header value", &hv, &hv_length, f))
            return -1;
        w = put_bytes(w, hk, hk_length < 0 ? 0 : hk_length);
        w = put_bytes(w, hv, hv_length);
    }
    return 0;
}

static void put_header(uint8_t *h, size_t total, int64_t base_offset, int32_t leader_epoch, int attributes,
                       int32_t last_offset_delta, int64_t first_timestamp, int64_t max_timestamp,
                       int64_t producer_id, int producer_epoch, int32_t base_sequence, int32_t count)
{
    put64(h, (uint64_t)base_offset);
    put32(h + LENGTH_AT, (uint32_t)(total - LENGTH_PREFIX_BYTES));
    put32(h + LEADER_EPOCH_AT, (uint32_t)leader_epoch);
    h[MAGIC_AT] = 2;
    put16(h + ATTRIBUTES_AT, (uint16_t)attributes);
    put32(h + LAST_OFFSET_DELTA_AT, (uint32_t)last_offset_delta);
    put64(h + FIRST_TIMESTAMP_AT, (uint64_t)first_timestamp);
    put64(h + MAX_TIMESTAMP_AT, (uint64_t)max_timestamp);
    put64(h + PRODUCER_ID_AT, (uint64_t)producer_id);
    put16(h + PRODUCER_EPOCH_AT, (uint16_t)producer_epoch);
    put32(h + BASE_SEQUENCE_AT, (uint32_t)base_sequence);
    put32(h + COUNT_AT, (uint32_t)count);
    put32(h + CRC_AT, kb_crc32c(h + ATTRIBUTES_AT, total - ATTRIBUTES_AT));
}

/* One batch from ``*row`` on: records while the timestamp type stays, a LogAppendTime
 * batch's time stays (its records all read the batch's max timestamp), offset deltas fit
 * an int32 and the limits hold. Without the GIL, except around ``compress``. */
static int encode_batch(const encode_input *in, size_t *row, output *o, failure *f, PyThreadState **thread)
{
    size_t start = *row;
    int64_t kind = 0, base_offset = 0, first_us = 0;
    if (fixed_at(&in->rows.timestamp_type, start, 4, "timestampType", &kind, f) ||
        fixed_at(&in->rows.offset, start, 8, "offset", &base_offset, f) ||
        fixed_at(&in->rows.timestamp, start, 8, "timestamp", &first_us, f))
        return -1;
    if (kind != 0 && kind != 1)
        return kb_fail(f, "invalid", "row %zu has timestampType %lld: data batches hold CreateTime (0) or "
                       "LogAppendTime (1) rows", start, (long long)kind);
    const int64_t first_ms = floor_ms(first_us);
    int64_t max_ms = first_ms, previous = base_offset - 1, last_delta = 0;
    const size_t batch_at = o->len;
    if (reserve(o, HEADER_BYTES, f))
        return -1;
    o->len += HEADER_BYTES;
    size_t count = 0, payload = 0;
    while (*row < in->rows.rows && count < in->max_records) {
        size_t r = *row;
        int64_t k = 0, offset = 0, us = 0;
        if (fixed_at(&in->rows.timestamp_type, r, 4, "timestampType", &k, f) ||
            fixed_at(&in->rows.offset, r, 8, "offset", &offset, f) ||
            fixed_at(&in->rows.timestamp, r, 8, "timestamp", &us, f))
            return -1;
        if (k != kind)
            break;
        if (offset <= previous)
            return kb_fail(f, "invalid", "row %zu has offset %lld after %lld: rows must be in offset order", r,
                           (long long)offset, (long long)previous);
        int64_t delta = offset - base_offset;
        if (delta > INT32_MAX)
            break;
        int64_t ms = floor_ms(us), timestamp_delta;
        if (kind == 1 && ms != first_ms)
            break;
        if (__builtin_sub_overflow(ms, first_ms, &timestamp_delta))
            break;
        size_t body = 0;
        if (record_body_size(in, r, timestamp_delta, (int32_t)delta, &body, f))
            return -1;
        size_t size = varint_size((int32_t)body) + body;
        if (count > 0 && payload + size > in->max_bytes)
            break;
        if (reserve(o, size, f) || write_record(in, r, timestamp_delta, (int32_t)delta, body, o->buf + o->len, f))
            return -1;
        o->len += size;
        payload += size;
        if (ms > max_ms)
            max_ms = ms;
        previous = offset;
        last_delta = delta;
        count++;
        (*row)++;
    }
    int attributes = (int)in->codec | (kind == 1 ? TIMESTAMP_TYPE_BIT : 0);
    if (in->codec != 0) {
        PyEval_RestoreThread(*thread);
        const char *records = (const char *)o->buf + batch_at + HEADER_BYTES;
        PyObject *plain = PyBytes_FromStringAndSize(records, (Py_ssize_t)payload);
        PyObject *packed = plain ? PyObject_CallFunction(in->compress, "iO", in->codec, plain) : NULL;
        Py_XDECREF(plain);
        Py_buffer view;
        int status = -1;
        if (packed != NULL && PyObject_GetBuffer(packed, &view, PyBUF_SIMPLE) == 0) {
            o->len = batch_at + HEADER_BYTES;
            if (reserve(o, (size_t)view.len, f) == 0) {
                memcpy(o->buf + o->len, view.buf, (size_t)view.len);
                o->len += (size_t)view.len;
                status = 0;
            }
            PyBuffer_Release(&view);
        }
        Py_XDECREF(packed);
        *thread = PyEval_SaveThread();
        if (status)
            return f->kind ? -1 : kb_fail(f, "python", "compression failed");
    }
    if (o->len - batch_at - LENGTH_PREFIX_BYTES > INT32_MAX)
        return kb_fail(f, "invalid", "a batch of %zu records exceeds the 2 GiB a batch can hold", count);
    put_header(o->buf + batch_at, o->len - batch_at, base_offset, in->leader_epoch, attributes, (int32_t)last_delta,
               first_ms, max_ms, -1, -1, -1, (int32_t)count);
    return 0;
}

/* encode(rows, start, leader_epoch, max_records, max_bytes, codec, compress) -> (batches, stop):
 * the rows from ``start`` on as batches, up to the first control row (``stop``; the number
 * of rows when there is none), which the caller writes as a control batch of its own. */
PyObject *kb_encode(PyObject *module, PyObject *args)
{
    (void)module;
    encode_input in;
    memset(&in, 0, sizeof in);
    PyObject *capsule;
    Py_ssize_t start, max_records, max_bytes;
    if (!PyArg_ParseTuple(args, "OninniO:encode", &capsule, &start, &in.leader_epoch, &max_records, &max_bytes,
                          &in.codec, &in.compress))
        return NULL;
    if (start < 0 || max_records < 1 || max_bytes < 1 || in.codec < 0 || in.codec > MAX_CODEC ||
        (in.codec != 0 && !PyCallable_Check(in.compress))) {
        PyErr_SetString(PyExc_ValueError, "encode: bad start, limits or codec");
        return NULL;
    }
    if (kb_view_rows(capsule, &in.rows))
        return NULL;
    in.max_records = (size_t)max_records;
    in.max_bytes = (size_t)max_bytes;
    failure f = {0};
    output o = {0};
    int status = 0;
    size_t row = (size_t)start;
    PyThreadState *thread = PyEval_SaveThread();
    while (status == 0 && row < in.rows.rows) {
        int64_t kind = 0;
        status = fixed_at(&in.rows.timestamp_type, row, 4, "timestampType", &kind, &f);
        if (status || kind == CONTROL_TIMESTAMP_TYPE)
            break;
        status = encode_batch(&in, &row, &o, &f, &thread);
    }
    PyEval_RestoreThread(thread);
    PyObject *result = NULL;
    if (status) {
        if (!PyErr_Occurred())
            kb_raise_failure(&f);
    } else {
        /* y# makes None of a NULL buffer: no batch before a control row is b"" */
        result = Py_BuildValue("(y#n)", o.buf ? (const char *)o.buf : "", (Py_ssize_t)o.len, (Py_ssize_t)row);
    }
    PyMem_RawFree(o.buf);
    return result;
}

/* A transaction marker: Kafka's control batch of one record (key: version and control
 * type; value: version and coordinator epoch), transactional and control attributes. */
PyObject *kb_encode_control(PyObject *module, PyObject *args)
{
    (void)module;
    long long offset, timestamp_ms, producer_id;
    int leader_epoch, producer_epoch;
    Py_buffer key, value;
    if (!PyArg_ParseTuple(args, "LLiLiy*y*:encode_control", &offset, &timestamp_ms, &leader_epoch, &producer_id,
                          &producer_epoch, &key, &value))
        return NULL;
    PyObject *result = NULL;
    if (key.len > INT32_MAX / 4 || value.len > INT32_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "control record key or value too large");
        goto done;
    }
    size_t body = 1 + varlong_size(0) + varint_size(0) + varint_size((int32_t)key.len) + (size_t)key.len +
                  varint_size((int32_t)value.len) + (size_t)value.len + varint_size(0);
    size_t total = HEADER_BYTES + varint_size((int32_t)body) + body;
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (result == NULL)
        goto done;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(result);
    memset(w, 0, total);
    uint8_t *r = w + HEADER_BYTES;
    r = put_varint(r, (int32_t)body);
    *r++ = 0;
    r = put_varlong(r, 0);
    r = put_varint(r, 0);
    r = put_bytes(r, key.buf, (int32_t)key.len);
    r = put_bytes(r, value.buf, (int32_t)value.len);
    put_varint(r, 0);
    put_header(w, total, offset, leader_epoch, TRANSACTIONAL_BIT | CONTROL_BIT, 0, timestamp_ms, timestamp_ms,
               producer_id, producer_epoch, -1, 1);
done:
    PyBuffer_Release(&key);
    PyBuffer_Release(&value);
    return result;
}
