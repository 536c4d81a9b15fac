/* A CPython module standing in for sgl-kernel's common_ops. */
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "common_ops", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_common_ops(void) { return PyModule_Create(&module); }
