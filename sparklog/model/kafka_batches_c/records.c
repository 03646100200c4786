/* The records of one batch: every length inside its record, every record inside the
 * payload; written into Arrow column buffers when asked. */
#include "batches.h"

/* ------------------------------------------------------------------------------------ */
/* UTF-8 (header keys are Java Strings: a key that is not UTF-8 makes the batch corrupt)  */

static int valid_utf8(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t follow;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) {
            follow = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            follow = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            follow = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i - 1 < follow)
            return 0;
        for (size_t k = 1; k <= follow; k++) {
            uint8_t d = s[i + k];
            if ((d & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (d & 0x3f);
        }
        if (follow == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
            return 0;
        if (follow == 3 && (cp < 0x10000 || cp > 0x10ffff))
            return 0;
        i += follow + 1;
    }
    return 1;
}

static int append_binary(uint8_t *valid, int32_t *offsets, uint8_t *data, size_t *len, size_t cap, size_t row,
                         const uint8_t *src, int32_t n, int64_t *nulls)
{
    if (n < 0) {
        (*nulls)++;
    } else {
        if ((size_t)n > cap - *len)
            return -1;
        memcpy(data + *len, src, (size_t)n);
        *len += (size_t)n;
        if (valid != NULL)
            valid[row >> 3] |= (uint8_t)(1u << (row & 7));
    }
    if (*len > INT32_MAX)
        return -1;
    offsets[row + 1] = (int32_t)*len;
    return 0;
}

#define BAD_RECORD(...) kb_fail(f, "corrupt", __VA_ARGS__)

/* Walk the ``count`` records of one batch's (uncompressed) payload: every length inside
 * its record, the record inside the payload, nothing left over. ``client``: a producer's
 * batch, whose offset deltas must be 0, 1, 2, ... (the broker stores the records at
 * consecutive offsets and keeps the batch's bytes for its fetch tail). With ``out`` the
 * records are also written there. */
int kb_walk_records(const uint8_t *p, size_t len, const batch_head *b, int client, record_sizes *sizes,
                    columns *out, failure *f)
{
    reader r = {p, len, 0};
    const int log_append_time = (b->attributes & TIMESTAMP_TYPE_BIT) != 0;
    const size_t at = b->start;
    int64_t previous_delta = -1;
    for (int32_t i = 0; i < b->count; i++) {
        int32_t length;
        if (read_varint(&r, &length))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable length varint", i, at);
        if (length < MIN_RECORD_BODY || (size_t)length > r.end - r.pos)
            return BAD_RECORD("record %d of the batch at byte %zu: length %d outside the %zu bytes left", i, at,
                              length, r.end - r.pos);
        reader rec = {p, r.pos + (size_t)length, r.pos + 1}; /* + 1: the unused attributes byte */
        int64_t timestamp_delta;
        int32_t offset_delta, key_length, value_length, header_count;
        if (read_varlong(&rec, &timestamp_delta))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable timestamp delta", i, at);
        if (read_varint(&rec, &offset_delta))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable offset delta", i, at);
        if (client ? offset_delta != i : (offset_delta <= previous_delta || offset_delta > b->last_offset_delta))
            return BAD_RECORD("record %d of the batch at byte %zu has offset delta %d (%s)", i, at, offset_delta,
                              client ? "a producer's records are numbered 0, 1, 2, ..."
                              : "deltas rise up to the batch's last offset delta");
        previous_delta = offset_delta;
        int64_t timestamp_ms, timestamp_us;
        if (log_append_time)
            timestamp_ms = b->max_timestamp;
        else if (__builtin_add_overflow(b->first_timestamp, timestamp_delta, &timestamp_ms))
            return BAD_RECORD("record %d of the batch at byte %zu: timestamp overflows", i, at);
        if (__builtin_mul_overflow(timestamp_ms, (int64_t)1000, &timestamp_us))
            return BAD_RECORD("record %d of the batch at byte %zu: timestamp %lld ms is out of range", i, at,
                              (long long)timestamp_ms);

        if (read_varint(&rec, &key_length))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable key length", i, at);
        if (key_length < -1 || (key_length > 0 && (size_t)key_length > rec.end - rec.pos))
            return BAD_RECORD("record %d of the batch at byte %zu: key length %d outside the record", i, at,
                              key_length);
        const uint8_t *key = p + rec.pos;
        if (key_length > 0)
            rec.pos += (size_t)key_length;

        if (read_varint(&rec, &value_length))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable value length", i, at);
        if (value_length < -1 || (value_length > 0 && (size_t)value_length > rec.end - rec.pos))
            return BAD_RECORD("record %d of the batch at byte %zu: value length %d outside the record", i, at,
                              value_length);
        const uint8_t *value = p + rec.pos;
        if (value_length > 0)
            rec.pos += (size_t)value_length;

        if (read_varint(&rec, &header_count))
            return BAD_RECORD("record %d of the batch at byte %zu: unreadable header count", i, at);
        if (header_count < 0 || (size_t)header_count > (rec.end - rec.pos) / 2)
            return BAD_RECORD("record %d of the batch at byte %zu: %d headers cannot fit the record", i, at,
                              header_count);

        size_t row = 0;
        if (out != NULL) {
            row = out->rows;
            if (row >= out->rows_cap)
                return kb_fail(f, "invalid", "more records than the batches declared");
            out->timestamp[row] = timestamp_us;
            out->timestamp_type[row] = log_append_time ? 1 : 0;
            out->offset[row] = b->base_offset + offset_delta;
            if (append_binary(out->key_valid, out->key_offsets, out->key_data, &out->key_len, out->key_cap, row,
                              key, key_length, &out->key_nulls) ||
                append_binary(out->value_valid, out->value_offsets, out->value_data, &out->value_len,
                              out->value_cap, row, value, value_length, &out->value_nulls))
                return kb_fail(f, "invalid", "record data larger than the batches declared");
        }
        for (int32_t h = 0; h < header_count; h++) {
            int32_t header_key_length, header_value_length;
            if (read_varint(&rec, &header_key_length))
                return BAD_RECORD("record %d of the batch at byte %zu: unreadable length of header %d", i, at, h);
            if (header_key_length < 0 || (size_t)header_key_length > rec.end - rec.pos)
                return BAD_RECORD("record %d of the batch at byte %zu: header %d key length %d outside the record",
                                  i, at, h, header_key_length);
            const uint8_t *header_key = p + rec.pos;
            rec.pos += (size_t)header_key_length;
            if (!valid_utf8(header_key, (size_t)header_key_length))
                return BAD_RECORD("record %d of the batch at byte %zu: header %d key is not UTF-8", i, at, h);
            if (read_varint(&rec, &header_value_length))
                return BAD_RECORD("record %d of the batch at byte %zu: unreadable value length of header %d", i, at,
                                  h);
            if (header_value_length < -1 ||
                (header_value_length > 0 && (size_t)header_value_length > rec.end - rec.pos))
                return BAD_RECORD(
                    "record %d of the batch at byte %zu: header %d value length %d outside the record", i, at, h,
                                  header_value_length);
            const uint8_t *header_value = p + rec.pos;
            if (header_value_length > 0)
                rec.pos += (size_t)header_value_length;
            sizes->header_key_bytes += header_key_length;
            sizes->header_value_bytes += header_value_length > 0 ? header_value_length : 0;
            if (out != NULL) {
                size_t hrow = out->header_rows;
                int64_t no_nulls = 0;
                if (hrow >= out->header_rows_cap ||
                    append_binary(NULL, out->header_key_offsets, out->header_key_data, &out->header_key_len,
                                  out->header_key_cap, hrow, header_key, header_key_length, &no_nulls) ||
                    append_binary(out->header_value_valid, out->header_value_offsets, out->header_value_data,
                                  &out->header_value_len, out->header_value_cap, hrow, header_value,
                                  header_value_length, &out->header_value_nulls))
                    return kb_fail(f, "invalid", "headers larger than the batches declared");
                out->header_rows++;
            }
        }
        if (rec.pos != rec.end)
            return BAD_RECORD("record %d of the batch at byte %zu: %zu bytes left over inside the record", i, at,
                              rec.end - rec.pos);
        r.pos = rec.end;
        sizes->key_bytes += key_length > 0 ? key_length : 0;
        sizes->value_bytes += value_length > 0 ? value_length : 0;
        sizes->headers += header_count;
        if (out != NULL) {
            if (header_count > 0)
                out->headers_valid[row >> 3] |= (uint8_t)(1u << (row & 7));
            else
                out->headers_nulls++;
            out->headers_offsets[row + 1] = (int32_t)out->header_rows;
            out->rows++;
        }
    }
    if (r.pos != r.end)
        return BAD_RECORD("the batch at byte %zu has %zu bytes after its %d records", at, r.end - r.pos, b->count);
    return 0;
}

