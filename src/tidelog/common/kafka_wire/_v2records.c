/* Kafka v2 records ↔ Tidelog's stored record columns, in compiled passes (issue 35, ADR 0029).
 *
 * A produce on the Kafka listener turns each record batch's records (varint-framed rows, Kafka's
 * DefaultRecord) into the stored batch's records section (batch_layout.py, ADR 0002): the offset
 * delta, timestamp, key length, value length and header length columns, then the keys, the
 * values and the headers back to back. aiokafka's Cython reader made a Python object per record
 * (about 1 µs a record with our column building); this reads the bytes twice (check and size,
 * then write) and makes one bytes object per batch.
 *
 * It is fed what clients send: every length is checked against the bytes left before it is used,
 * and anything aiokafka's reader would refuse is refused (ValueError, which the caller reports as
 * CORRUPT_MESSAGE). tests/common/kafka_wire holds it to the aiokafka path byte for byte on random
 * and fuzzed input. Only uncompressed records are read here: the caller inflates nothing itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_NAME_MAX 0xFFFF /* the stored header's name length is a uint16 */

typedef struct {
    const uint8_t *data;
    Py_ssize_t position;
    Py_ssize_t end;
    Py_ssize_t record; /* which record, for the error */
    const char *error;
} Reader;

/* A zigzag varint of at most 10 bytes (Kafka's varlong). 0 on success. */
static int read_varlong(Reader *r, Py_ssize_t end, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    while (r->position < end) {
        uint8_t byte = r->data[r->position++];
        if (shift == 63 && (byte & 0x7E)) {
            break; /* more than 64 bits */
        }
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)((value >> 1) ^ (0 - (value & 1)));
            return 0;
        }
        shift += 7;
        if (shift > 63) {
            break;
        }
    }
    r->error = "a varint runs past its record or past 10 bytes";
    return -1;
}

/* A zigzag varint that must fit an int32 (Kafka's varint: at most 5 bytes). */
static int read_varint(Reader *r, Py_ssize_t end, int32_t *out) {
    Py_ssize_t start = r->position;
    int64_t value;
    if (read_varlong(r, end, &value) < 0) {
        return -1;
    }
    if (r->position - start > 5 || value < INT32_MIN || value > INT32_MAX) {
        r->error = "a varint is longer than 5 bytes";
        return -1;
    }
    *out = (int32_t)value;
    return 0;
}

/* A length and the bytes it counts, their start in *at. Where `nullable`, any negative length is
 * null (-1), as Kafka's DefaultRecord.readFrom reads keys, values and header values. */
static int read_bytes(Reader *r, Py_ssize_t end, int nullable, int32_t *length, Py_ssize_t *at) {
    if (read_varint(r, end, length) < 0) {
        return -1;
    }
    if (*length < 0) {
        if (nullable) {
            *length = -1;
            *at = r->position;
            return 0;
        }
        r->error = "a negative header name length";
        return -1;
    }
    if (*length > end - r->position) {
        r->error = "a length runs past its record";
        return -1;
    }
    *at = r->position;
    r->position += *length;
    return 0;
}

typedef struct {
    int32_t offset_delta;
    int64_t timestamp_delta;
    int32_t key_length;
    Py_ssize_t key_at;
    int32_t value_length;
    Py_ssize_t value_at;
    int32_t header_count;
    Py_ssize_t headers_at; /* the first header's key length */
    int64_t header_bytes;  /* the stored headers' size */
} Row;

/* One record from r->position; leaves r->position at the next one. */
static int read_row(Reader *r, Row *row, int check_names) {
    int32_t length;
    if (read_varint(r, r->end, &length) < 0) {
        return -1;
    }
    if (length < 0 || length > r->end - r->position) {
        r->error = "a record's length runs past its batch";
        return -1;
    }
    Py_ssize_t end = r->position + length;
    int64_t timestamp_delta;
    int32_t offset_delta;
    if (r->position >= end) {
        r->error = "a record without its attributes";
        return -1;
    }
    r->position += 1; /* the record's attributes: unused by Kafka, not stored */
    if (read_varlong(r, end, &timestamp_delta) < 0 || read_varint(r, end, &offset_delta) < 0) {
        return -1;
    }
    row->timestamp_delta = timestamp_delta;
    row->offset_delta = offset_delta;
    if (read_bytes(r, end, 1, &row->key_length, &row->key_at) < 0 ||
        read_bytes(r, end, 1, &row->value_length, &row->value_at) < 0 ||
        read_varint(r, end, &row->header_count) < 0) {
        return -1;
    }
    if (row->header_count < 0) {
        r->error = "a negative header count";
        return -1;
    }
    row->headers_at = r->position;
    row->header_bytes = 0;
    for (int32_t h = 0; h < row->header_count; h++) {
        int32_t name_length, value_length;
        Py_ssize_t name_at, value_at;
        if (read_bytes(r, end, 0, &name_length, &name_at) < 0) {
            return -1;
        }
        if (name_length > HEADER_NAME_MAX) {
            r->error = "a header name longer than 65535 bytes";
            return -1;
        }
        if (check_names) { /* names are strings: UTF-8, as aiokafka decodes them */
            PyObject *name = PyUnicode_DecodeUTF8((const char *)r->data + name_at, name_length, "strict");
            if (name == NULL) {
                PyErr_Clear();
                r->error = "a header name that is not UTF-8";
                return -1;
            }
            Py_DECREF(name);
        }
        if (read_bytes(r, end, 1, &value_length, &value_at) < 0) {
            return -1;
        }
        row->header_bytes += 2 + name_length + 4 + (value_length > 0 ? value_length : 0);
    }
    if (row->header_bytes > INT32_MAX) {
        r->error = "a record's headers exceed 2 GiB";
        return -1;
    }
    if (r->position != end) {
        r->error = "a record's fields do not fill its length";
        return -1;
    }
    return 0;
}

static inline void put32(uint8_t *at, uint32_t value) {
    at[0] = (uint8_t)value;
    at[1] = (uint8_t)(value >> 8);
    at[2] = (uint8_t)(value >> 16);
    at[3] = (uint8_t)(value >> 24);
}

static inline void put64(uint8_t *at, uint64_t value) {
    put32(at, (uint32_t)value);
    put32(at + 4, (uint32_t)(value >> 32));
}

/* records_to_section(records, count, first_timestamp) -> (section, first, max)
 *
 * `records`: a Kafka v2 batch's uncompressed records (after its 61-byte header); `count`: the
 * header's record count; `first_timestamp`: the header's. Returns the stored records section and
 * the first and largest absolute timestamps (the stored header's first_timestamp and
 * max_timestamp; the section's timestamps are relative to the first record's). */
static PyObject *records_to_section(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t count;
    long long first_timestamp;
    if (!PyArg_ParseTuple(args, "y*nL", &buffer, &count, &first_timestamp)) {
        return NULL;
    }
    PyObject *result = NULL;
    Reader r = {(const uint8_t *)buffer.buf, 0, buffer.len, 0, NULL};
    Row row;
    int64_t keys = 0, values = 0, headers = 0;
    if (count <= 0) {
        r.error = "a batch holds at least one record";
        goto fail;
    }
    /* Pass 1: check every record and size the section. A record takes 7 bytes at least, so a
     * count the bytes cannot hold is refused before anything is allocated for it. */
    if (count > buffer.len / 7) {
        r.error = "the batch's record count exceeds what its bytes can hold";
        goto fail;
    }
    for (r.record = 0; r.record < count; r.record++) {
        if (read_row(&r, &row, 1) < 0) {
            goto fail;
        }
        keys += row.key_length > 0 ? row.key_length : 0;
        values += row.value_length > 0 ? row.value_length : 0;
        headers += row.header_bytes;
    }
    if (r.position != r.end) {
        r.error = "bytes left over after the batch's last record";
        goto fail;
    }
    int64_t size = (int64_t)count * (4 + 8 + 4 + 4 + 4) + keys + values + headers;
    if (size > PY_SSIZE_T_MAX) {
        r.error = "the batch is too large";
        goto fail;
    }
    PyObject *section = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (section == NULL) {
        goto done;
    }
    /* Pass 2: write the columns and the blobs (the rows are known good now). */
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(section);
    uint8_t *deltas = out, *timestamps = out + count * 4, *key_lengths = out + count * 12;
    uint8_t *value_lengths = key_lengths + count * 4, *header_lengths = value_lengths + count * 4;
    uint8_t *key_blob = header_lengths + count * 4, *value_blob = key_blob + keys;
    uint8_t *header_blob = value_blob + values;
    uint64_t first = 0, largest = 0;
    r.position = 0;
    for (r.record = 0; r.record < count; r.record++) {
        read_row(&r, &row, 0);
        /* Kafka's record timestamp: the batch's first timestamp plus the record's delta, wrapping
         * past 64 bits as Java's long addition (and aiokafka's) does. */
        uint64_t timestamp = (uint64_t)first_timestamp + (uint64_t)row.timestamp_delta;
        if (r.record == 0) {
            first = largest = timestamp;
        } else if ((int64_t)timestamp > (int64_t)largest) {
            largest = timestamp;
        }
        put32(deltas + r.record * 4, (uint32_t)row.offset_delta);
        put64(timestamps + r.record * 8, timestamp - first);
        put32(key_lengths + r.record * 4, (uint32_t)row.key_length);
        put32(value_lengths + r.record * 4, (uint32_t)row.value_length);
        put32(header_lengths + r.record * 4, (uint32_t)row.header_bytes);
        if (row.key_length > 0) {
            memcpy(key_blob, r.data + row.key_at, (size_t)row.key_length);
            key_blob += row.key_length;
        }
        if (row.value_length > 0) {
            memcpy(value_blob, r.data + row.value_at, (size_t)row.value_length);
            value_blob += row.value_length;
        }
        /* Headers, stored as name length (uint16), name, value length (int32, -1 null), value. */
        Reader h = {r.data, row.headers_at, r.position, 0, NULL};
        for (int32_t n = 0; n < row.header_count; n++) {
            int32_t name_length, value_length;
            Py_ssize_t name_at, value_at;
            read_bytes(&h, h.end, 0, &name_length, &name_at);
            read_bytes(&h, h.end, 1, &value_length, &value_at);
            header_blob[0] = (uint8_t)name_length;
            header_blob[1] = (uint8_t)(name_length >> 8);
            memcpy(header_blob + 2, r.data + name_at, (size_t)name_length);
            header_blob += 2 + name_length;
            put32(header_blob, (uint32_t)value_length);
            header_blob += 4;
            if (value_length > 0) {
                memcpy(header_blob, r.data + value_at, (size_t)value_length);
                header_blob += value_length;
            }
        }
    }
    result = Py_BuildValue("(NLL)", section, (long long)first, (long long)largest);
    goto done;
fail:
    PyErr_Format(PyExc_ValueError, "record %zd: %s", r.record, r.error);
done:
    PyBuffer_Release(&buffer);
    return result;
}

/* ---- stored → Kafka v2 (a fetch on the Kafka listener) ---------------------------------- */

static inline int32_t get32(const uint8_t *at) {
    return (int32_t)((uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24);
}

static inline int64_t get64(const uint8_t *at) {
    return (int64_t)((uint64_t)(uint32_t)get32(at) | (uint64_t)(uint32_t)get32(at + 4) << 32);
}

static int varint_size(uint64_t zigzag) {
    int size = 1;
    while (zigzag >= 0x80) {
        zigzag >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t zigzag(int64_t value) { return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63); }

static uint8_t *put_varint(uint8_t *at, int64_t value) {
    uint64_t z = zigzag(value);
    while (z >= 0x80) {
        *at++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *at++ = (uint8_t)z;
    return at;
}

/* One record's stored headers (name length uint16, name, value length int32, value), checked to
 * fill exactly `size` bytes: their count, and the size they take in Kafka's layout. */
static int stored_headers(const uint8_t *at, int64_t size, int64_t *count, int64_t *kafka_size) {
    int64_t used = 0;
    *count = 0;
    *kafka_size = 0;
    while (used < size) {
        if (size - used < 6) {
            return -1;
        }
        int64_t name = (int64_t)at[used] | (int64_t)at[used + 1] << 8;
        if (size - used - 2 < name + 4) {
            return -1;
        }
        int64_t value = get32(at + used + 2 + name);
        if (value < -1 || (value > 0 && size - used - 6 - name < value)) {
            return -1;
        }
        *kafka_size += varint_size(zigzag(name)) + name + varint_size(zigzag(value)) + (value > 0 ? value : 0);
        used += 6 + name + (value > 0 ? value : 0);
        (*count)++;
    }
    return 0;
}

/* section_to_records(section, count) -> records
 *
 * A stored batch's uncompressed records section (its five columns, then keys, values and
 * headers) as Kafka v2 records, back to back, each with its offset delta and timestamp delta (the
 * stored one: relative to the batch's first timestamp, as Kafka's). The columns are checked
 * against the section's size before anything is read by them: a corrupt section is a ValueError. */
static PyObject *section_to_records(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &buffer, &count)) {
        return NULL;
    }
    PyObject *result = NULL;
    const uint8_t *data = (const uint8_t *)buffer.buf;
    const char *error = NULL;
    if (count <= 0 || count > buffer.len / 24) {
        error = "the records section cannot hold its records' columns";
        goto fail;
    }
    const uint8_t *deltas = data, *stamps = data + count * 4, *key_lengths = data + count * 12;
    const uint8_t *value_lengths = key_lengths + count * 4, *header_lengths = value_lengths + count * 4;
    int64_t keys = 0, values = 0, headers = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t key = get32(key_lengths + i * 4), value = get32(value_lengths + i * 4);
        int32_t record_headers = get32(header_lengths + i * 4);
        if (key < -1 || value < -1 || record_headers < 0) {
            error = "negative key, value or headers length";
            goto fail;
        }
        keys += key > 0 ? key : 0;
        values += value > 0 ? value : 0;
        headers += record_headers;
    }
    if (count * 24 + keys + values + headers != buffer.len) {
        error = "the records section's size is not what its columns account for";
        goto fail;
    }
    /* Pass 1: each record's size in Kafka's layout. */
    const uint8_t *key_at = data + count * 24, *value_at = key_at + keys, *headers_at = value_at + values;
    int64_t total = 0;
    const uint8_t *h = headers_at;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t key = get32(key_lengths + i * 4), value = get32(value_lengths + i * 4);
        int64_t record_headers = get32(header_lengths + i * 4), header_count, header_size;
        if (stored_headers(h, record_headers, &header_count, &header_size) < 0) {
            error = "a record's headers do not fill their length";
            goto fail;
        }
        h += record_headers;
        int64_t body = 1 + varint_size(zigzag(get64(stamps + i * 8))) + varint_size(zigzag(get32(deltas + i * 4))) +
                       varint_size(zigzag(key)) + (key > 0 ? key : 0) + varint_size(zigzag(value)) +
                       (value > 0 ? value : 0) + varint_size(zigzag(header_count)) + header_size;
        total += varint_size(zigzag(body)) + body;
    }
    if (total > PY_SSIZE_T_MAX) {
        error = "the batch is too large";
        goto fail;
    }
    PyObject *records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (records == NULL) {
        goto done;
    }
    /* Pass 2: write them (the columns are known good now). */
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(records);
    h = headers_at;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t key = get32(key_lengths + i * 4), value = get32(value_lengths + i * 4);
        int64_t record_headers = get32(header_lengths + i * 4), header_count, header_size;
        stored_headers(h, record_headers, &header_count, &header_size);
        int64_t stamp = get64(stamps + i * 8);
        int32_t delta = get32(deltas + i * 4);
        int64_t body = 1 + varint_size(zigzag(stamp)) + varint_size(zigzag(delta)) + varint_size(zigzag(key)) +
                       (key > 0 ? key : 0) + varint_size(zigzag(value)) + (value > 0 ? value : 0) +
                       varint_size(zigzag(header_count)) + header_size;
        out = put_varint(out, body);
        *out++ = 0; /* the record's attributes */
        out = put_varint(out, stamp);
        out = put_varint(out, delta);
        out = put_varint(out, key);
        if (key > 0) {
            memcpy(out, key_at, (size_t)key);
            out += key;
            key_at += key;
        }
        out = put_varint(out, value);
        if (value > 0) {
            memcpy(out, value_at, (size_t)value);
            out += value;
            value_at += value;
        }
        out = put_varint(out, header_count);
        for (int64_t n = 0; n < header_count; n++) {
            int64_t name = (int64_t)h[0] | (int64_t)h[1] << 8;
            int64_t header_value = get32(h + 2 + name);
            out = put_varint(out, name);
            memcpy(out, h + 2, (size_t)name);
            out += name;
            out = put_varint(out, header_value);
            if (header_value > 0) {
                memcpy(out, h + 6 + name, (size_t)header_value);
                out += header_value;
            }
            h += 6 + name + (header_value > 0 ? header_value : 0);
        }
    }
    result = records;
    goto done;
fail:
    PyErr_SetString(PyExc_ValueError, error);
done:
    PyBuffer_Release(&buffer);
    return result;
}

static PyMethodDef methods[] = {
    {"records_to_section", records_to_section, METH_VARARGS,
     "records_to_section(records, count, first_timestamp) -> (section, first_timestamp, max_timestamp)"},
    {"section_to_records", section_to_records, METH_VARARGS, "section_to_records(section, count) -> records"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_v2records", "Kafka v2 records to stored record columns.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__v2records(void) { return PyModule_Create(&module); }
