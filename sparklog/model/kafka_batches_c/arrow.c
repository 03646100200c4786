/* Arrow's C data interface: decoded columns handed to pyarrow without a copy, and a table's
 * rows read in place for encoding. One pyarrow import per decode instead of one Python call
 * per buffer. */
#include "batches.h"

#include <stdatomic.h>
#include <stdlib.h>

#define ARRAY_CAPSULE "arrow_array"
#define ALIGNMENT 64

void *kb_alloc_buffer(size_t size, int zero)
{
    size_t rounded = (size + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    if (rounded == 0)
        rounded = ALIGNMENT;
    void *p = aligned_alloc(ALIGNMENT, rounded);
    if (p != NULL && zero)
        memset(p, 0, rounded);
    return p;
}

/* ------------------------------------------------------------------------------------ */
/* decoded columns -> an ArrowArray (a struct array: one record batch)                   */

enum { NODE_OFFSET, NODE_TIMESTAMP, NODE_TIMESTAMP_TYPE, NODE_KEY, NODE_VALUE, NODE_HEADERS, NODE_PAIRS,
       NODE_HEADER_KEY, NODE_HEADER_VALUE, NODES };

/* Everything one decode hands over, freed when pyarrow has released every node. */
typedef struct {
    atomic_long references; /* nodes not yet released (the root lives in the capsule) */
    void *buffers[BUFFERS];
    struct ArrowArray nodes[NODES];
    const void *node_buffers[NODES][3];
    struct ArrowArray *root_children[6];
    struct ArrowArray *headers_children[1];
    struct ArrowArray *pairs_children[2];
} decoded;

static void free_decoded(decoded *d)
{
    for (int k = 0; k < BUFFERS; k++)
        free(d->buffers[k]);
    PyMem_RawFree(d);
}

/* May run on any thread, without the GIL: only C memory is freed. */
static void release_node(struct ArrowArray *array)
{
    for (int64_t i = 0; i < array->n_children; i++)
        if (array->children[i]->release != NULL)
            array->children[i]->release(array->children[i]);
    decoded *d = array->private_data;
    array->release = NULL;
    if (atomic_fetch_sub(&d->references, 1) == 1)
        free_decoded(d);
}

static void drop_capsule(PyObject *capsule)
{
    struct ArrowArray *root = PyCapsule_GetPointer(capsule, ARRAY_CAPSULE);
    if (root == NULL) {
        PyErr_Clear();
        return;
    }
    if (root->release != NULL) /* never imported */
        root->release(root);
    PyMem_RawFree(root);
}

static struct ArrowArray *node(decoded *d, int k, int64_t length, int64_t null_count, int n_buffers,
                               const void *b0, const void *b1, const void *b2)
{
    struct ArrowArray *a = &d->nodes[k];
    d->node_buffers[k][0] = b0;
    d->node_buffers[k][1] = b1;
    d->node_buffers[k][2] = b2;
    *a = (struct ArrowArray){.length = length,
                             .null_count = null_count,
                             .n_buffers = n_buffers,
                             .buffers = d->node_buffers[k],
                             .release = release_node,
                             .private_data = d};
    atomic_fetch_add(&d->references, 1);
    return a;
}

PyObject *kb_arrow_records(void *buffers[BUFFERS], const columns *c, int with_offsets)
{
    decoded *d = PyMem_RawCalloc(1, sizeof *d);
    struct ArrowArray *root = PyMem_RawCalloc(1, sizeof *root);
    if (d == NULL || root == NULL) {
        PyMem_RawFree(d);
        PyMem_RawFree(root);
        for (int k = 0; k < BUFFERS; k++)
            free(buffers[k]);
        return PyErr_NoMemory();
    }
    memcpy(d->buffers, buffers, sizeof d->buffers);
    atomic_init(&d->references, 1); /* the root */
    const int64_t rows = (int64_t)c->rows, header_rows = (int64_t)c->header_rows;
    void **b = d->buffers;
#define VALIDITY(k, nulls) ((nulls) ? b[k] : NULL)
    int n = 0;
    if (with_offsets)
        d->root_children[n++] = node(d, NODE_OFFSET, rows, 0, 2, NULL, b[OFFSET], NULL);
    d->root_children[n++] = node(d, NODE_TIMESTAMP, rows, 0, 2, NULL, b[TIMESTAMP], NULL);
    d->root_children[n++] = node(d, NODE_TIMESTAMP_TYPE, rows, 0, 2, NULL, b[TIMESTAMP_TYPE], NULL);
    d->root_children[n++] = node(d, NODE_KEY, rows, c->key_nulls, 3, VALIDITY(KEY_VALID, c->key_nulls),
                                 b[KEY_OFFSETS], b[KEY_DATA]);
    d->root_children[n++] = node(d, NODE_VALUE, rows, c->value_nulls, 3, VALIDITY(VALUE_VALID, c->value_nulls),
                                 b[VALUE_OFFSETS], b[VALUE_DATA]);
    struct ArrowArray *headers = node(d, NODE_HEADERS, rows, c->headers_nulls, 2,
                                      VALIDITY(HEADERS_VALID, c->headers_nulls), b[HEADERS_OFFSETS], NULL);
    d->root_children[n++] = headers;
    struct ArrowArray *pairs = node(d, NODE_PAIRS, header_rows, 0, 1, NULL, NULL, NULL);
    d->pairs_children[0] = node(d, NODE_HEADER_KEY, header_rows, 0, 3, NULL, b[HEADER_KEY_OFFSETS],
                                b[HEADER_KEY_DATA]);
    d->pairs_children[1] = node(d, NODE_HEADER_VALUE, header_rows, c->header_value_nulls, 3,
                                VALIDITY(HEADER_VALUE_VALID, c->header_value_nulls), b[HEADER_VALUE_OFFSETS],
                                b[HEADER_VALUE_DATA]);
#undef VALIDITY
    pairs->n_children = 2;
    pairs->children = d->pairs_children;
    d->headers_children[0] = pairs;
    headers->n_children = 1;
    headers->children = d->headers_children;
    static const void *no_buffers[1] = {NULL};
    *root = (struct ArrowArray){.length = rows,
                                .null_count = 0,
                                .n_buffers = 1,
                                .n_children = n,
                                .buffers = no_buffers,
                                .children = d->root_children,
                                .release = release_node,
                                .private_data = d};
    PyObject *capsule = PyCapsule_New(root, ARRAY_CAPSULE, drop_capsule);
    if (capsule == NULL) {
        root->release(root);
        PyMem_RawFree(root);
    }
    return capsule;
}

/* ------------------------------------------------------------------------------------ */
/* an exported record batch (offset, timestamp, timestampType, key, value[, headers]) -> columns */

static int shape(const struct ArrowArray *a, int64_t n_buffers, int64_t n_children, const char *name)
{
    if (a == NULL || a->release == NULL || a->n_buffers != n_buffers || a->n_children != n_children ||
        a->length < 0 || a->offset < 0) {
        PyErr_Format(PyExc_ValueError, "the %s column is not laid out as expected", name);
        return -1;
    }
    for (int64_t i = 1; i < n_buffers; i++)
        if (a->buffers[i] == NULL && a->length > 0) {
            PyErr_Format(PyExc_ValueError, "the %s column lacks a buffer", name);
            return -1;
        }
    return 0;
}

/* ``a`` seen from a parent whose slot 0 is at ``parent_index``. */
static void view_column(const struct ArrowArray *a, size_t parent_index, column *c)
{
    c->valid = a->null_count != 0 ? a->buffers[0] : NULL;
    c->offsets = a->n_buffers >= 3 || a->n_children == 1 ? a->buffers[1] : NULL;
    c->data = a->n_buffers >= 3 ? a->buffers[2] : a->buffers[1];
    c->index = (size_t)a->offset + parent_index;
    c->length = (size_t)a->length > parent_index ? (size_t)a->length - parent_index : 0;
}

int kb_view_rows(PyObject *capsule, table_view *view)
{
    const struct ArrowArray *root = PyCapsule_GetPointer(capsule, ARRAY_CAPSULE);
    if (root == NULL)
        return -1;
    if (root->release == NULL || (root->n_children != 5 && root->n_children != 6) || root->length < 0 ||
        root->offset < 0) {
        PyErr_SetString(PyExc_ValueError, "encode takes an exported record batch of the encoded columns");
        return -1;
    }
    struct ArrowArray **ch = root->children;
    const size_t at = (size_t)root->offset;
    view->rows = (size_t)root->length;
    if (shape(ch[0], 2, 0, "offset") || shape(ch[1], 2, 0, "timestamp") || shape(ch[2], 2, 0, "timestampType") ||
        shape(ch[3], 3, 0, "key") || shape(ch[4], 3, 0, "value"))
        return -1;
    view_column(ch[0], at, &view->offset);
    view_column(ch[1], at, &view->timestamp);
    view_column(ch[2], at, &view->timestamp_type);
    view_column(ch[3], at, &view->key);
    view_column(ch[4], at, &view->value);
    const column *fields[] = {&view->offset, &view->timestamp, &view->timestamp_type, &view->key, &view->value};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (fields[i]->length < view->rows) {
            PyErr_SetString(PyExc_ValueError, "a column is shorter than the record batch");
            return -1;
        }
    view->has_headers = root->n_children == 6;
    if (!view->has_headers)
        return 0;
    const struct ArrowArray *headers = ch[5];
    if (shape(headers, 2, 1, "headers") || shape(headers->children[0], 1, 2, "headers' pairs"))
        return -1;
    const struct ArrowArray *pairs = headers->children[0];
    if (shape(pairs->children[0], 3, 0, "header key") || shape(pairs->children[1], 3, 0, "header value"))
        return -1;
    view_column(headers, at, &view->headers);
    view_column(pairs->children[0], (size_t)pairs->offset, &view->header_key);
    view_column(pairs->children[1], (size_t)pairs->offset, &view->header_value);
    if (view->headers.length < view->rows) {
        PyErr_SetString(PyExc_ValueError, "the headers column is shorter than the record batch");
        return -1;
    }
    return 0;
}
