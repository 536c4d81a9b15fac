/* A CPython module: value() = what the three fetched dependencies define. */
#include <Python.h>

#include "depa.h"
#include "depb.h"
#include "depc.h"

static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(DEPA_VALUE + DEPB_VALUE + DEPC_VALUE); }

static PyMethodDef methods[] = {{"value", value, METH_NOARGS, "123"}, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
