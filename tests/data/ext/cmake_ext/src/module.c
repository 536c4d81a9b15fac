/* A CPython module: value() = generated table + FetchContent dep + ExternalProject dep. */
#include <Python.h>

#include "extdep.h"
#include "olddep.h"
#include "table.h"

int tiny_cuda_version(void);

static PyObject *value(PyObject *self, PyObject *args) {
  return PyLong_FromLong(TINY_TABLE_VALUE + olddep_value() + EXTDEP_VALUE);
}

static PyObject *cuda_version(PyObject *self, PyObject *args) { return PyLong_FromLong(tiny_cuda_version()); }

static PyMethodDef methods[] = {{"value", value, METH_NOARGS, "42"},
                                {"cuda_version", cuda_version, METH_NOARGS, "nvcc major*100+minor"},
                                {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
