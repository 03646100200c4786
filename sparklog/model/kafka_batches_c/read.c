/* Reading: check() the batches of a Produce request, decode() the records of many checked
 * batches into one set of Arrow buffers. */
#include "batches.h"

#include <stdlib.h>

static int read_head(const uint8_t *data, size_t len, size_t pos, int client, batch_head *b, failure *f)
{
    size_t left = len - pos;
    if (left < MAGIC_PREFIX_BYTES)
        return kb_fail(f, "corrupt", "%zu trailing bytes at byte %zu are shorter than a record batch header", left,
                       pos);
    const uint8_t *h = data + pos;
    int magic = (int8_t)h[MAGIC_AT];
    if (magic != 2)
        return kb_fail(f, "magic", "record batch of magic %d at byte %zu: only magic 2 (Kafka 0.11+) is accepted",
                       magic, pos);
    int32_t length = (int32_t)get32(h + LENGTH_AT);
    if (length < HEADER_BYTES - LENGTH_PREFIX_BYTES || (size_t)length > left - LENGTH_PREFIX_BYTES)
        return kb_fail(f, "corrupt", "record batch length %d at byte %zu does not fit the %zu bytes sent", length, pos,
                       len);
    b->start = pos;
    b->end = pos + LENGTH_PREFIX_BYTES + (size_t)length;
    uint32_t stored = get32(h + CRC_AT);
    uint32_t computed = kb_crc32c(h + ATTRIBUTES_AT, b->end - pos - ATTRIBUTES_AT);
    if (stored != computed)
        return kb_fail(f, "corrupt",
                    "record batch CRC32C does not match its contents (batch at byte %zu: stored %08x, computed %08x)",
                       pos, stored, computed);
    b->base_offset = (int64_t)get64(h);
    b->leader_epoch = (int32_t)get32(h + LEADER_EPOCH_AT);
    b->attributes = (int16_t)get16(h + ATTRIBUTES_AT);
    b->last_offset_delta = (int32_t)get32(h + LAST_OFFSET_DELTA_AT);
    b->first_timestamp = (int64_t)get64(h + FIRST_TIMESTAMP_AT);
    b->max_timestamp = (int64_t)get64(h + MAX_TIMESTAMP_AT);
    b->producer_id = (int64_t)get64(h + PRODUCER_ID_AT);
    b->producer_epoch = (int16_t)get16(h + PRODUCER_EPOCH_AT);
    b->base_sequence = (int32_t)get32(h + BASE_SEQUENCE_AT);
    b->count = (int32_t)get32(h + COUNT_AT);
    int codec = b->attributes & CODEC_MASK;
    if (codec > MAX_CODEC)
        return kb_fail(f, "corrupt", "the batch at byte %zu names compression codec %d (Kafka has 0-4)", pos, codec);
    if (client && (b->attributes & CONTROL_BIT))
        return kb_fail(f, "corrupt", "clients may not send control batches (batch at byte %zu)", pos);
    /* A producer numbers every record; compaction leaves fewer records than offsets. */
    int64_t offsets = (int64_t)b->last_offset_delta + 1;
    if (b->count < 0 || (b->count > 0 && (client ? b->count != offsets : b->count > offsets)))
        return kb_fail(f, "corrupt", "the batch at byte %zu says last offset delta %d but holds %d records", pos,
                       b->last_offset_delta, b->count);
    if (codec == 0 && (size_t)b->count > (b->end - pos - HEADER_BYTES) / (MIN_RECORD_BODY + 1))
        return kb_fail(f, "corrupt", "the batch at byte %zu declares %d records in %zu bytes", pos, b->count,
                       b->end - pos - HEADER_BYTES);
    return 0;
}

typedef struct {
    batch_head head;
    record_sizes sizes;
    PyObject *raw;     /* the batch's bytes (new reference) */
    PyObject *payload; /* the records' bytes: raw, or what inflate returned (new reference) */
    Py_buffer view;    /* of payload, while held */
    int viewing;
    size_t payload_at, payload_len;
} checked_batch;

static void release_batches(checked_batch *batches, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (batches[i].viewing)
            PyBuffer_Release(&batches[i].view);
        Py_XDECREF(batches[i].raw);
        Py_XDECREF(batches[i].payload);
    }
    PyMem_RawFree(batches);
}

static int scan_heads(const uint8_t *data, size_t len, int client, checked_batch **batches, size_t *n, failure *f)
{
    size_t cap = 4, pos = 0;
    checked_batch *list = PyMem_RawCalloc(cap, sizeof *list);
    if (list == NULL)
        return kb_out_of_memory(f);
    *n = 0;
    while (pos < len) {
        if (*n == cap) {
            checked_batch *grown = PyMem_RawRealloc(list, 2 * cap * sizeof *list);
            if (grown == NULL) {
                *batches = list;
                return kb_out_of_memory(f);
            }
            memset(grown + cap, 0, cap * sizeof *list);
            list = grown;
            cap *= 2;
        }
        checked_batch *b = &list[*n];
        if (read_head(data, len, pos, client, &b->head, f)) {
            *batches = list;
            return -1;
        }
        (*n)++;
        pos = b->head.end;
    }
    *batches = list;
    return 0;
}

PyObject *kb_check(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer data;
    PyObject *inflate;
    int client;
    if (!PyArg_ParseTuple(args, "y*Op:check", &data, &inflate, &client))
        return NULL;
    const uint8_t *bytes = data.buf;
    size_t len = (size_t)data.len;
    failure f = {0};
    checked_batch *batches = NULL;
    size_t n = 0;
    int status;

    KB_BEGIN_NOGIL(len)
    status = scan_heads(bytes, len, client, &batches, &n, &f);
    for (size_t i = 0; status == 0 && i < n; i++) {
        checked_batch *b = &batches[i];
        if ((b->head.attributes & CODEC_MASK) == 0)
            status = kb_walk_records(bytes + b->head.start + HEADER_BYTES, b->head.end - b->head.start - HEADER_BYTES,
                                     &b->head, client, &b->sizes, NULL, &f);
    }
    KB_END_NOGIL

    PyObject *result = NULL;
    if (status)
        goto done;
    /* One batch that is the whole of a bytes object (the usual request) is not copied. */
    int whole = n == 1 && PyBytes_CheckExact(data.obj) && batches[0].head.end == len;
    for (size_t i = 0; i < n; i++) {
        checked_batch *b = &batches[i];
        b->raw = whole ? Py_NewRef(data.obj)
                       : PyBytes_FromStringAndSize((const char *)bytes + b->head.start,
                                                   (Py_ssize_t)(b->head.end - b->head.start));
        if (b->raw == NULL)
            goto done;
        int codec = b->head.attributes & CODEC_MASK;
        if (codec == 0) {
            b->payload = Py_NewRef(b->raw);
            b->payload_at = HEADER_BYTES;
            b->payload_len = b->head.end - b->head.start - HEADER_BYTES;
            continue;
        }
        b->payload = PyObject_CallFunction(inflate, "iOn", codec, b->raw, (Py_ssize_t)HEADER_BYTES);
        if (b->payload == NULL)
            goto done;
        if (PyObject_GetBuffer(b->payload, &b->view, PyBUF_SIMPLE))
            goto done;
        b->viewing = 1;
        b->payload_at = 0;
        b->payload_len = (size_t)b->view.len;
        if (b->payload_len > INT32_MAX) { /* one batch's records always fit one table */
            status = kb_fail(&f, "corrupt", "the batch at byte %zu decompresses to %zu bytes, over 2 GiB",
                             b->head.start, b->payload_len);
            goto done;
        }
        KB_BEGIN_NOGIL(b->payload_len)
        status = kb_walk_records(b->view.buf, b->payload_len, &b->head, client, &b->sizes, NULL, &f);
        KB_END_NOGIL
        PyBuffer_Release(&b->view);
        b->viewing = 0;
        if (status)
            goto done;
    }
    result = PyList_New((Py_ssize_t)n);
    if (result == NULL)
        goto done;
    for (size_t i = 0; i < n; i++) {
        checked_batch *b = &batches[i];
        const batch_head *h = &b->head;
        const record_sizes *s = &b->sizes;
        PyObject *item = Py_BuildValue("(OLiiiLLLiiiOnnLLLLL)", b->raw, (long long)h->base_offset, h->leader_epoch,
                                       (int)h->attributes, h->last_offset_delta, (long long)h->first_timestamp,
                                       (long long)h->max_timestamp, (long long)h->producer_id, (int)h->producer_epoch,
                                       h->base_sequence, h->count, b->payload, (Py_ssize_t)b->payload_at,
                                       (Py_ssize_t)b->payload_len, (long long)s->key_bytes,
                                       (long long)s->value_bytes, (long long)s->headers,
                                       (long long)s->header_key_bytes, (long long)s->header_value_bytes);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
done:
    if (status && !PyErr_Occurred())
        kb_raise_failure(&f);
    if (batches != NULL)
        release_batches(batches, n);
    PyBuffer_Release(&data);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* records of checked batches -> Arrow buffers                                           */

PyObject *kb_decode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *list;
    int with_offsets;
    if (!PyArg_ParseTuple(args, "Op:decode", &list, &with_offsets))
        return NULL;
    PyObject *seq = PySequence_Fast(list, "decode takes a sequence of checked batches");
    if (seq == NULL)
        return NULL;
    size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
    failure f = {0};
    void *buffers[BUFFERS] = {NULL};
    PyObject *result = NULL;
    int status = 0;
    checked_batch *batches = PyMem_RawCalloc(n ? n : 1, sizeof *batches);
    if (batches == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    record_sizes total = {0};
    int64_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        checked_batch *b = &batches[i];
        batch_head *h = &b->head;
        PyObject *raw, *payload;
        long long base_offset, first_timestamp, max_timestamp, producer_id;
        int attributes, producer_epoch;
        Py_ssize_t payload_at, payload_len;
        long long sizes[5];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), "OLiiiLLLiiiOnnLLLLL:decode", &raw,
                              &base_offset, &h->leader_epoch, &attributes, &h->last_offset_delta, &first_timestamp,
                              &max_timestamp, &producer_id, &producer_epoch, &h->base_sequence, &h->count, &payload,
                              &payload_at, &payload_len, &sizes[0], &sizes[1], &sizes[2], &sizes[3], &sizes[4]))
            goto done;
        h->base_offset = base_offset;
        h->attributes = (int16_t)attributes;
        h->first_timestamp = first_timestamp;
        h->max_timestamp = max_timestamp;
        h->producer_id = producer_id;
        h->producer_epoch = (int16_t)producer_epoch;
        h->start = 0;
        b->payload = Py_NewRef(payload);
        if (PyObject_GetBuffer(payload, &b->view, PyBUF_SIMPLE))
            goto done;
        b->viewing = 1;
        if (payload_at < 0 || payload_len < 0 || payload_at > b->view.len || payload_len > b->view.len - payload_at ||
            h->count < 0) {
            status = kb_fail(&f, "invalid", "checked batch %zu does not match its payload", i);
            goto done;
        }
        b->payload_at = (size_t)payload_at;
        b->payload_len = (size_t)payload_len;
        for (int k = 0; k < 5; k++)
            if (sizes[k] < 0) {
                status = kb_fail(&f, "invalid", "checked batch %zu has negative sizes", i);
                goto done;
            }
        rows += h->count;
        total.key_bytes += sizes[0];
        total.value_bytes += sizes[1];
        total.headers += sizes[2];
        total.header_key_bytes += sizes[3];
        total.header_value_bytes += sizes[4];
    }
    if (rows > INT32_MAX || total.key_bytes > INT32_MAX || total.value_bytes > INT32_MAX ||
        total.headers > INT32_MAX || total.header_key_bytes > INT32_MAX || total.header_value_bytes > INT32_MAX) {
        status = kb_fail(&f, "overflow", "the batches hold more than one table with int32 offsets can (%lld records)",
                         (long long)rows);
        goto done;
    }
    size_t nrows = (size_t)rows, nheaders = (size_t)total.headers;
    columns out = {0};
    out.rows_cap = nrows;
    out.header_rows_cap = nheaders;
    out.key_cap = (size_t)total.key_bytes;
    out.value_cap = (size_t)total.value_bytes;
    out.header_key_cap = (size_t)total.header_key_bytes;
    out.header_value_cap = (size_t)total.header_value_bytes;
    size_t bitmap = (nrows + 7) / 8;
    uint8_t **at = (uint8_t **)buffers;
    const size_t sizes[BUFFERS] = {
        nrows * 8, nrows * 4, nrows * 8, bitmap, (nrows + 1) * 4, out.key_cap, bitmap, (nrows + 1) * 4, out.value_cap,
        bitmap, (nrows + 1) * 4, (nheaders + 1) * 4, out.header_key_cap, (nheaders + 7) / 8, (nheaders + 1) * 4,
        out.header_value_cap};
    for (int k = 0; k < BUFFERS; k++) {
        int bitmap_or_offsets = k == KEY_VALID || k == VALUE_VALID || k == HEADERS_VALID || k == HEADER_VALUE_VALID;
        buffers[k] = kb_alloc_buffer(sizes[k], bitmap_or_offsets);
        if (buffers[k] == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    out.timestamp = (int64_t *)at[TIMESTAMP];
    out.timestamp_type = (int32_t *)at[TIMESTAMP_TYPE];
    out.offset = (int64_t *)at[OFFSET];
    out.key_valid = at[KEY_VALID];
    out.key_offsets = (int32_t *)at[KEY_OFFSETS];
    out.key_data = at[KEY_DATA];
    out.value_valid = at[VALUE_VALID];
    out.value_offsets = (int32_t *)at[VALUE_OFFSETS];
    out.value_data = at[VALUE_DATA];
    out.headers_valid = at[HEADERS_VALID];
    out.headers_offsets = (int32_t *)at[HEADERS_OFFSETS];
    out.header_key_offsets = (int32_t *)at[HEADER_KEY_OFFSETS];
    out.header_key_data = at[HEADER_KEY_DATA];
    out.header_value_valid = at[HEADER_VALUE_VALID];
    out.header_value_offsets = (int32_t *)at[HEADER_VALUE_OFFSETS];
    out.header_value_data = at[HEADER_VALUE_DATA];
    out.key_offsets[0] = out.value_offsets[0] = out.headers_offsets[0] = 0;
    out.header_key_offsets[0] = out.header_value_offsets[0] = 0;

    KB_BEGIN_NOGIL(out.key_cap + out.value_cap + out.header_key_cap + out.header_value_cap + nrows * 32)
    for (size_t i = 0; status == 0 && i < n; i++) {
        checked_batch *b = &batches[i];
        record_sizes ignored = {0};
        /* check() applied the producer's rules already: here only the layout is walked again. */
        status = kb_walk_records((const uint8_t *)b->view.buf + b->payload_at, b->payload_len, &b->head, 0,
                                 &ignored, &out, &f);
    }
    if (status == 0 && (out.rows != nrows || out.header_rows != nheaders || out.key_len != out.key_cap ||
                        out.value_len != out.value_cap || out.header_key_len != out.header_key_cap ||
                        out.header_value_len != out.header_value_cap))
        status = kb_fail(&f, "invalid", "the checked batches' sizes do not match their records");
    KB_END_NOGIL
    if (status)
        goto done;

    PyObject *capsule = kb_arrow_records(buffers, &out, with_offsets);
    memset(buffers, 0, sizeof buffers); /* the capsule owns them now */
    if (capsule != NULL) {
        /* The address too: pyarrow imports from it with a schema object, no schema to parse. */
        void *array = PyCapsule_GetPointer(capsule, "arrow_array");
        result = Py_BuildValue("(NK)", capsule, (unsigned long long)(uintptr_t)array);
    }
done:
    if (status && !PyErr_Occurred())
        kb_raise_failure(&f);
    for (int k = 0; k < BUFFERS; k++)
        free(buffers[k]);
    release_batches(batches, n);
    Py_DECREF(seq);
    return result;
}
