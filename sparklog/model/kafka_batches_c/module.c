/* The module: its functions (see batches.h) and how their failures reach Python. */
#include "batches.h"

#include <stdarg.h>
#include <stdio.h>


int kb_fail(failure *f, const char *kind, const char *format, ...)
{
    if (f->kind == NULL) {
        va_list args;
        va_start(args, format);
        vsnprintf(f->message, sizeof f->message, format, args);
        va_end(args);
        f->kind = kind;
    }
    return -1;
}

int kb_out_of_memory(failure *f)
{
    f->no_memory = 1;
    return kb_fail(f, "memory", "out of memory");
}

PyObject *kb_raise_failure(const failure *f)
{
    if (f->no_memory)
        return PyErr_NoMemory();
    PyObject *args = Py_BuildValue("(ss)", f->kind ? f->kind : "invalid", f->message);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyMethodDef methods[] = {
    {"check", kb_check, METH_VARARGS,
     "check(data, inflate, client) -> list of checked batches; see sparklog.model.kafka_batches."},
    {"decode", kb_decode, METH_VARARGS,
     "decode(checked, client) -> (counts..., Arrow buffers...) of every record of the checked batches."},
    {"encode", kb_encode, METH_VARARGS, "encode(rows, columns..., limits, codec, compress) -> record batches."},
    {"encode_control", kb_encode_control, METH_VARARGS,
     "encode_control(offset, timestamp_ms, leader_epoch, producer_id, producer_epoch, key, value) -> batch."},
    {"crc32c", kb_crc32c_of, METH_VARARGS, "crc32c(data) -> Castagnoli CRC of data."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sparklog.model._kafka_batches",
    .m_doc = "Kafka record batches (magic 2) <-> Arrow column buffers, in one native pass.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC PyInit__kafka_batches(void) { return PyModuleDef_Init(&module_def); }
